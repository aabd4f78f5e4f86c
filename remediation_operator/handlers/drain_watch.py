"""Watch the pods of nodes being drained, so a finished drain is seen at once.

Evicted pods leave on their own schedule (grace periods, PDB-permitted evictions by others),
and nothing else tells the operator between the planner's re-checks of a running drain
(every 5 s, `domain.actions.EVICTION_RETRY`, where each re-check also evicts again). One
watch per draining node (`fieldSelector=spec.nodeName=N`, the same selector kubelet uses)
is cheap, because budgets keep few nodes draining at once, and far cheaper than watching
every pod in the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from remediation_operator.handlers.supervision import Supervisor
from remediation_operator.k8s.client import ApiError, Client, path

RESTART_DELAY = 1.0
WATCH_SECONDS = 60
QUIET = timedelta(seconds=2 * WATCH_SECONDS + 30)
"""A drain watch that delivered nothing (no list, event or end of stream) this long fails
`/healthz` (handlers.supervision): the server ends each stream after `WATCH_SECONDS`."""


class DrainWatches:
    def __init__(
        self,
        client: Client,
        on_change: Callable[[str], None],
        log: Any = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._client = client
        self._on_change = on_change
        self._log = log
        self._supervisor = supervisor or Supervisor(log=log)
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self._tasks)

    def ensure(self, node: str) -> None:
        if node not in self._tasks:
            task = self._supervisor.spawn(f"drain/{node}", lambda: self._watch(node), quiet=QUIET)
            if task is not None:
                self._tasks[node] = task

    def drop(self, node: str) -> None:
        if self._tasks.pop(node, None) is not None:
            self._supervisor.cancel(f"drain/{node}")

    async def close(self) -> None:
        tasks = [self._supervisor.cancel(f"drain/{node}") for node in self._tasks]
        self._tasks.clear()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _watch(self, node: str) -> None:
        selector = f"spec.nodeName={node}"
        pods = path("v1", "pods")
        beat = self._supervisor.beater(f"drain/{node}")
        while True:
            try:
                listed = await self._client.get(pods, fieldSelector=selector)
                beat()
                version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                async for event in self._client.watch(
                    pods,
                    fieldSelector=selector,
                    resourceVersion=version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    beat()
                    if event.get("type") in ("DELETED", "MODIFIED"):
                        self._on_change(node)
                beat()
            except ApiError as error:
                if self._log is not None:
                    self._log.debug("drain_watch_restarting", node=node, error=str(error))
            await asyncio.sleep(RESTART_DELAY)
