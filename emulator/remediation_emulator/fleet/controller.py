"""The reconcile loop every fleet controller shares: workers draining one work queue.

A reconcile function looks at one key's current state (from informer caches) and does what
is due; it returns how long until it must look again, or None. Failures are retried per key
with exponential backoff, so one broken object never stalls the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from remediation_emulator.fleet.workqueue import WorkQueue

log = logging.getLogger(__name__)

Reconcile = Callable[[str], Awaitable[float | None]]


class Controller:
    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        *,
        workers: int = 4,
        base_backoff: float = 0.05,
        max_backoff: float = 5.0,
    ) -> None:
        self.name = name
        self.queue = WorkQueue()
        self.errors = 0
        self._reconcile = reconcile
        self._workers = workers
        self._base_backoff = base_backoff
        self._max_backoff = max_backoff
        self._failures: dict[str, int] = {}

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    async def run(self) -> None:
        """Run the workers until cancelled."""
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self._workers):
                    group.create_task(self._work())
        finally:
            self.queue.close()

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                delay = await self._reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors += 1
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                backoff = min(self._max_backoff, self._base_backoff * 2 ** (failures - 1))
                log.warning(
                    "%s: reconcile of %s failed (%r); retry in %.2fs", self.name, key, exc, backoff
                )
                self.queue.add_after(key, backoff)
            else:
                self._failures.pop(key, None)
                if delay is not None:
                    self.queue.add_after(key, delay)
            finally:
                self.queue.done(key)
