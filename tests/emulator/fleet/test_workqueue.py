"""The work queue: keys are de-duplicated and delayed keys come back at their deadline."""

from __future__ import annotations

import asyncio

from remediation_emulator.fleet.workqueue import WorkQueue


async def test_a_key_queued_twice_is_processed_once() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


async def test_a_key_added_while_processing_comes_back_after_done() -> None:
    queue = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    assert len(queue) == 0
    queue.done(key)
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_the_earliest_delayed_add_wins() -> None:
    queue = WorkQueue()
    queue.add_after("a", 30)
    queue.add_after("a", 0.01)
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    queue.close()
