"""A de-duplicating work queue with delayed adds, as client-go's workqueue.

Controllers are level-triggered: an event only says "look at this key again". A key queued
twice is processed once; a key added while it is being processed is processed again after;
`add_after` wakes a key at a deadline (grace period over, reboot done) without a polling loop.
"""

from __future__ import annotations

import asyncio
from collections import deque


class WorkQueue:
    def __init__(self) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._ready.set()

    def add_after(self, key: str, delay: float) -> None:
        """Queue `key` after `delay` seconds; an earlier pending deadline for it wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= when:
                return
            pending[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> str:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
