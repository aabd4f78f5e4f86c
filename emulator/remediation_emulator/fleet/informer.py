"""A list+watch cache of one resource type, shared by every controller that needs it.

This is client-go's informer reduced to what the fleet needs: list in pages, then watch from
the list's resourceVersion with bookmarks, resume from the last seen resourceVersion when the
server ends a watch (timeoutSeconds), and list again after `410 Gone` (or an ERROR event with
code 410), telling subscribers about what changed meanwhile. One watch per resource type keeps
a 10,000-node fleet at a handful of connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from remediation_emulator.fleet import resources
from remediation_emulator.fleet.client import ApiError, KubeClient, Obj
from remediation_emulator.fleet.resources import Resource

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj | None, Obj | None], None]
"""Called with (key, old, new) after the cache changed; old or new is None on add/delete.
Handlers must be quick (queue work); they run on the informer's task."""


def resource_version(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def version_number(obj: Obj) -> int:
    """A resourceVersion as a number (etcd's and the emulator's are), for read-your-writes
    checks by the writer itself; 0 when it is not a number (the check is then skipped)."""
    text = resource_version(obj)
    return int(text) if text.isdigit() else 0


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        watch_timeout: int = 300,
        page_size: int = 500,
        retry_delay: float = 0.2,
    ) -> None:
        self.resource = resource
        self.cache: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self._client = client
        self._handlers: list[Handler] = []
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._retry_delay = retry_delay
        self.relists = 0
        """How many times the cache was rebuilt from a list (1 + one per 410 Gone)."""

    def subscribe(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def get(self, cache_key: str) -> Obj | None:
        return self.cache.get(cache_key)

    def _notify(self, cache_key: str, old: Obj | None, new: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(cache_key, old, new)
            except Exception:
                log.exception("informer handler failed for %s %s", self.resource.plural, cache_key)

    async def _list(self) -> str:
        items: dict[str, Obj] = {}
        token: str | None = None
        while True:
            page = await self._client.list(self.resource, limit=self._page_size, continue_=token)
            for item in page.get("items", []):
                items[resources.key(item)] = item
            token = page.get("metadata", {}).get("continue") or None
            if not token:
                rv = str(page.get("metadata", {}).get("resourceVersion", ""))
                break
        old = self.cache
        self.cache = items
        self.relists += 1
        for cache_key in [k for k in old if k not in items]:
            self._notify(cache_key, old[cache_key], None)
        for cache_key, item in items.items():
            before = old.get(cache_key)
            if before is None or resource_version(before) != resource_version(item):
                self._notify(cache_key, before, item)
        self.synced.set()
        return rv

    def _apply(self, kind: str, obj: Obj) -> None:
        cache_key = resources.key(obj)
        old = self.cache.get(cache_key)
        if kind == "DELETED":
            self.cache.pop(cache_key, None)
            self._notify(cache_key, old, None)
        else:
            self.cache[cache_key] = obj
            self._notify(cache_key, old, obj)

    async def run(self) -> None:
        """List, then watch forever; cancel the task to stop."""
        rv: str | None = None
        failures = 0
        while True:
            if failures:
                # Back off while the server refuses (e.g. a CRD not installed yet), up to 5 s.
                await asyncio.sleep(min(5.0, self._retry_delay * 2 ** (failures - 1)))
            try:
                if rv is None:
                    rv = await self._list()
                async for event in self._client.watch(
                    self.resource, resource_version=rv, timeout_seconds=self._watch_timeout
                ):
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            rv = None
                            break
                        raise ApiError(int(obj.get("code", 0)), str(obj.get("reason", "")), "")
                    if kind != "BOOKMARK":
                        self._apply(str(kind), obj)
                    rv = resource_version(obj) or rv
                failures = 0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status == 410:
                    rv = None
                    continue
                failures += 1
                log.warning("watch of %s failed: %s", self.resource.plural, exc)
            except Exception as exc:
                failures += 1
                log.warning("watch of %s broke: %r", self.resource.plural, exc)
