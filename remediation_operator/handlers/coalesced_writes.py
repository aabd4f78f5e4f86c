"""Writes of one object, one at a time, with the cosmetic ones coalesced to one per interval.

A policy's status holds decision state (the circuit breakers, read back by the next plan and
after a restart) and a summary for people (`kubectl get rpol`: counts, headroom). Writing
the summary after every fault's reconcile cost a round trip inside the reconcile, which the
next fault waited for (docs/performance.md, p99 on a busy machine). So a write that only
changes the summary is left `later`: the newest such write per key is kept, and `run` writes
it at most once per `interval` (the first after a quiet period goes at once; later ones wait
for the interval since the previous write). A write that carries decision state goes
`at_once`, inside the caller, and replaces whatever was pending (it carries the newest state).

Writes of one key are serialized by a lock, and a pending write is taken under that lock, so
a background write can never overwrite a newer write made at once with its older content.
A failed background write is logged and kept pending (unless a newer one replaced it), so it
is retried at the next tick; the write function decides what is not worth a retry (it
returns normally to drop the write). `clock` is injected: tests drive `tick` by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from remediation_operator.observability import logs

T = TypeVar("T")
R = TypeVar("R")

INTERVAL = 1.0
"""Seconds between two writes of the same key, at least, for coalesced writes."""


class CoalescedWrites(Generic[T]):
    def __init__(
        self,
        write: Callable[[str, T], Awaitable[None]],
        *,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        log: Any = None,
    ) -> None:
        self._write = write
        self._interval = interval
        self._clock = clock
        self._log = log if log is not None else logs.get("remediation_operator.status")
        self._pending: dict[str, T] = {}
        self._last: dict[str, float] = {}
        """When each key was last written (started), on `clock`."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._wake = asyncio.Event()
        self.failures = 0
        """Background writes that failed (each is retried at the next tick)."""

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def pending(self, key: str) -> T | None:
        """The write waiting for `key`, if any."""
        return self._pending.get(key)

    def __len__(self) -> int:
        """Keys with a write pending."""
        return len(self._pending)

    async def at_once(self, key: str, write: Callable[[], Awaitable[R]]) -> R:
        """Run `write` now (after a background write of `key` in flight); drop the pending
        write of `key`, which `write` supersedes. Its errors propagate."""
        async with self._lock(key):
            self._pending.pop(key, None)
            self._last[key] = self._clock()
            return await write()

    def later(self, key: str, item: T) -> None:
        """Keep `item` as the write to make for `key`, replacing an older pending one."""
        self._pending[key] = item
        self._wake.set()

    def discard(self, key: str) -> None:
        """Forget `key` (its object is gone): its pending write is dropped."""
        self._pending.pop(key, None)
        self._last.pop(key, None)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]

    def due_in(self) -> float | None:
        """Seconds until the next pending write is due (0 or less: now); None if none."""
        if not self._pending:
            return None
        now = self._clock()
        return min(self._last.get(k, -self._interval) + self._interval - now for k in self._pending)

    async def tick(self) -> None:
        """Make every pending write whose interval has passed."""
        now = self._clock()
        due = [
            k
            for k in self._pending
            if now - self._last.get(k, now - self._interval) >= self._interval
        ]
        for key in due:
            await self._write_pending(key)

    async def flush(self) -> None:
        """Make every pending write now, whatever the interval (a clean stop)."""
        for key in list(self._pending):
            await self._write_pending(key)

    async def _write_pending(self, key: str) -> None:
        async with self._lock(key):
            item = self._pending.pop(key, None)
            if item is None:
                return  # written at once meanwhile, or discarded
            self._last[key] = self._clock()
            try:
                await self._write(key, item)
            except Exception as error:
                self.failures += 1
                self._log.warning("policy_status_write_failed", policy=key, error=str(error))
                self._pending.setdefault(key, item)

    async def run(self) -> None:
        """Write pending items as they fall due, until cancelled."""
        while True:
            due = self.due_in()
            if due is None:
                await self._wake.wait()
            elif due > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), due)
            self._wake.clear()
            await self.tick()
