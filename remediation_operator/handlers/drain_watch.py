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
from typing import Any

from remediation_operator.k8s.client import ApiError, Client, path

RESTART_DELAY = 1.0


class DrainWatches:
    def __init__(self, client: Client, on_change: Callable[[str], None], log: Any = None) -> None:
        self._client = client
        self._on_change = on_change
        self._log = log
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self._tasks)

    def ensure(self, node: str) -> None:
        if node not in self._tasks:
            self._tasks[node] = asyncio.create_task(self._watch(node), name=f"drain/{node}")

    def drop(self, node: str) -> None:
        task = self._tasks.pop(node, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self, node: str) -> None:
        selector = f"spec.nodeName={node}"
        pods = path("v1", "pods")
        while True:
            try:
                listed = await self._client.get(pods, fieldSelector=selector)
                version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                async for event in self._client.watch(
                    pods, fieldSelector=selector, resourceVersion=version, timeout_seconds=60
                ):
                    if event.get("type") in ("DELETED", "MODIFIED"):
                        self._on_change(node)
            except ApiError as error:
                if self._log is not None:
                    self._log.debug("drain_watch_restarting", node=node, error=str(error))
            await asyncio.sleep(RESTART_DELAY)
