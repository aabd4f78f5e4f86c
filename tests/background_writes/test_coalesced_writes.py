"""Coalescing on a manual clock: one write per interval per key, the newest, never stale."""

from __future__ import annotations

import asyncio

from remediation_operator.handlers.coalesced_writes import CoalescedWrites
from tests.background_writes.conftest import ManualClock, RecordedLog


class Writes:
    def __init__(self) -> None:
        self.made: list[tuple[str, int]] = []
        self.fail = 0

    async def __call__(self, key: str, item: int) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("API unreachable")
        self.made.append((key, item))


async def test_the_first_write_after_a_quiet_period_goes_at_once_later_ones_wait(
    clock: ManualClock,
) -> None:
    writes = Writes()
    coalesced = CoalescedWrites(writes, clock=clock)
    coalesced.later("gpu", 1)
    await coalesced.tick()
    assert writes.made == [("gpu", 1)]
    for n in range(2, 7):  # five more within the second
        clock.advance(0.125)
        coalesced.later("gpu", n)
        await coalesced.tick()
    assert writes.made == [("gpu", 1)]
    assert coalesced.pending("gpu") == 6
    assert coalesced.due_in() == 0.375
    clock.advance(0.375)
    await coalesced.tick()
    assert writes.made == [("gpu", 1), ("gpu", 6)]  # one write, the newest
    assert coalesced.due_in() is None


async def test_keys_are_independent(clock: ManualClock) -> None:
    writes = Writes()
    coalesced = CoalescedWrites(writes, clock=clock)
    coalesced.later("a", 1)
    await coalesced.tick()
    coalesced.later("a", 2)
    coalesced.later("b", 1)
    await coalesced.tick()
    assert writes.made == [("a", 1), ("b", 1)]


async def test_a_write_at_once_supersedes_the_pending_one(clock: ManualClock) -> None:
    writes = Writes()
    coalesced = CoalescedWrites(writes, clock=clock)
    coalesced.later("gpu", 1)

    async def now() -> str:
        return "written"

    assert await coalesced.at_once("gpu", now) == "written"
    assert coalesced.pending("gpu") is None
    clock.advance(5)
    await coalesced.tick()
    assert writes.made == []


async def test_a_failed_write_is_retried_at_the_next_tick(
    clock: ManualClock, log: RecordedLog
) -> None:
    writes = Writes()
    writes.fail = 1
    coalesced = CoalescedWrites(writes, clock=clock, log=log)
    coalesced.later("gpu", 1)
    await coalesced.tick()
    assert writes.made == []
    assert coalesced.failures == 1
    assert log.events("policy_status_write_failed") == [
        {"policy": "gpu", "error": "API unreachable"}
    ]
    clock.advance(1)
    await coalesced.tick()
    assert writes.made == [("gpu", 1)]


async def test_a_newer_item_wins_over_the_retry_of_a_failed_one(clock: ManualClock) -> None:
    made: list[int] = []
    coalesced: CoalescedWrites[int]

    async def write(key: str, item: int) -> None:
        if item == 1:
            coalesced.later(key, 2)  # arrives while the write is in flight, which then fails
            raise RuntimeError("503")
        made.append(item)

    coalesced = CoalescedWrites(write, clock=clock, log=RecordedLog())
    coalesced.later("gpu", 1)
    await coalesced.tick()
    assert coalesced.pending("gpu") == 2
    clock.advance(1)
    await coalesced.tick()
    assert made == [2]


async def test_a_background_write_in_flight_delays_a_write_at_once(clock: ManualClock) -> None:
    """Serialized per key: the write at once lands last, so the older content never wins."""
    order: list[str] = []
    release = asyncio.Event()

    async def slow(key: str, item: int) -> None:
        order.append("background started")
        await release.wait()
        order.append("background done")

    async def now() -> None:
        order.append("at once")

    coalesced = CoalescedWrites(slow, clock=clock)
    coalesced.later("gpu", 1)
    background = asyncio.create_task(coalesced.tick())
    await asyncio.sleep(0)  # let the background write start (no wall-clock wait)
    urgent = asyncio.create_task(coalesced.at_once("gpu", now))
    await asyncio.sleep(0)
    assert order == ["background started"]
    release.set()
    await asyncio.gather(background, urgent)
    assert order == ["background started", "background done", "at once"]


async def test_flush_writes_everything_pending_whatever_the_interval(clock: ManualClock) -> None:
    writes = Writes()
    coalesced = CoalescedWrites(writes, clock=clock)
    coalesced.later("a", 1)
    await coalesced.tick()
    coalesced.later("a", 2)
    coalesced.later("b", 1)
    await coalesced.flush()
    assert sorted(writes.made) == [("a", 1), ("a", 2), ("b", 1)]
    assert len(coalesced) == 0


async def test_a_discarded_key_is_not_written(clock: ManualClock) -> None:
    writes = Writes()
    coalesced = CoalescedWrites(writes, clock=clock)
    coalesced.later("gone", 1)
    coalesced.discard("gone")
    await coalesced.flush()
    assert writes.made == []


async def test_run_writes_when_due(clock: ManualClock) -> None:
    """The loop itself: a pending write due now is made without any tick by hand."""
    done = asyncio.Event()
    made: list[int] = []

    async def write(key: str, item: int) -> None:
        made.append(item)
        done.set()

    coalesced = CoalescedWrites(write, clock=clock)
    task = asyncio.create_task(coalesced.run())
    try:
        coalesced.later("gpu", 7)
        await asyncio.wait_for(done.wait(), 5)
    finally:
        task.cancel()
    assert made == [7]
