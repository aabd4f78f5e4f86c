"""The per-policy worker: events narrow the focus, deadlines widen it, only a leader acts.

The reconcile is a recording fake and the clock is manual; the worker's own asyncio timer is
only ever asked to wait for deadlines already due, so nothing here sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from remediation_operator.domain.policy import Action, Fault, Policy, Step
from remediation_operator.engine.reconciler import Reconciled
from remediation_operator.handlers.workers import PolicyWorker

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = Policy(name="gpu", faults=(Fault("f", (), (Step(Action.Replace),)),))


class Harness:
    def __init__(self) -> None:
        self.now = T0
        self.leading = True
        self.calls: asyncio.Queue[frozenset[str] | None] = asyncio.Queue()
        self.next_wake: datetime | None = None
        self.fail = False
        self.worker = PolicyWorker("gpu", self.reconcile, lambda: self.leading, clock=self.clock)

    def clock(self) -> datetime:
        return self.now

    async def reconcile(
        self, policy: Policy, focus: frozenset[str] | None, now: datetime
    ) -> Reconciled:
        await self.calls.put(focus)
        if self.fail:
            raise RuntimeError("403 Forbidden")
        return Reconciled(next_wake=self.next_wake)

    async def call(self) -> frozenset[str] | None:
        return await asyncio.wait_for(self.calls.get(), timeout=5)

    async def idle(self) -> None:
        """Let the worker run until it waits again."""
        for _ in range(20):
            await asyncio.sleep(0)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    task = asyncio.create_task(h.worker.run())
    yield h
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_first_round_plans_everything_then_events_narrow_the_focus(
    harness: Harness,
) -> None:
    harness.worker.set_policy(POLICY)
    assert await harness.call() is None
    harness.worker.touch(["a"])
    harness.worker.touch(["b"])
    assert await harness.call() == frozenset({"a", "b"})
    await harness.idle()
    assert harness.calls.empty()


async def test_a_due_deadline_plans_everything(harness: Harness) -> None:
    harness.next_wake = T0 + timedelta(seconds=30)
    harness.worker.set_policy(POLICY)
    assert await harness.call() is None
    assert harness.worker.wake_at == T0 + timedelta(seconds=30)
    harness.next_wake = None
    harness.now = T0 + timedelta(seconds=30)
    harness.worker.touch(["a"])
    assert await harness.call() is None  # the deadline passed: everyone, not just "a"


async def test_a_focused_plan_keeps_an_earlier_deadline(harness: Harness) -> None:
    harness.next_wake = T0 + timedelta(seconds=10)
    harness.worker.set_policy(POLICY)
    await harness.call()
    harness.next_wake = T0 + timedelta(minutes=5)
    harness.worker.touch(["a"])
    assert await harness.call() == frozenset({"a"})
    await harness.idle()
    assert harness.worker.wake_at == T0 + timedelta(seconds=10)


async def test_a_standby_does_not_act_until_it_leads(harness: Harness) -> None:
    harness.leading = False
    harness.worker.set_policy(POLICY)
    harness.worker.touch(["a"])
    await harness.idle()
    assert harness.calls.empty()
    harness.leading = True
    harness.worker.touch_all()
    assert await harness.call() is None


async def test_a_failed_round_is_retried_with_backoff_and_keeps_its_focus(
    harness: Harness,
) -> None:
    harness.worker.set_policy(POLICY)
    await harness.call()
    harness.fail = True
    harness.worker.touch(["a"])
    assert await harness.call() == frozenset({"a"})
    await harness.idle()
    assert harness.worker.wake_at == T0 + timedelta(seconds=1)
    harness.fail = False
    harness.now = T0 + timedelta(seconds=1)
    harness.worker.touch(["b"])
    assert await harness.call() is None  # the retry deadline is due: plan everything


async def test_a_persistent_error_is_retried_at_its_backoff_not_on_every_event(
    harness: Harness,
) -> None:
    """Issue 12: a reconcile that fails every time was retried on each node event (about 200
    `reconcile_failed` a second). Events during the backoff only join the next round's focus."""
    harness.worker.set_policy(POLICY)
    await harness.call()
    harness.fail = True
    harness.worker.touch(["a"])
    assert await harness.call() == frozenset({"a"})
    for i in range(50):  # a burst of node events within the first second of backoff
        harness.now = T0 + timedelta(milliseconds=10 * i)
        harness.worker.touch([f"n{i}"])
        await harness.idle()
    assert harness.calls.empty()
    assert harness.worker.retry_at == T0 + timedelta(seconds=1)
    harness.now = T0 + timedelta(seconds=1)
    harness.worker.touch(["late"])
    assert await harness.call() is None  # the retry: everything, the burst included
    # The backoff doubles while the error persists: the next try is 2 s later, not sooner.
    for i in range(20):
        harness.now = T0 + timedelta(seconds=1, milliseconds=90 * i)
        harness.worker.touch(["x"])
        await harness.idle()
    assert harness.calls.empty()
    assert harness.worker.retry_at == T0 + timedelta(seconds=3)
    harness.fail = False
    harness.now = T0 + timedelta(seconds=3)
    harness.worker.touch(["y"])
    assert await harness.call() is None
    await harness.idle()
    assert harness.worker.retry_at is None
