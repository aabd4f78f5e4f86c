"""Watch Nodes with a bare list-and-watch instead of kopf: nodes are the operator's hot path.

A 10,000-node fleet sends tens of Node updates per second (kubelet heartbeats, conditions no
policy watches). Through kopf each one costs a cause detection, a diff-base deep copy and a
handler invocation (about 10 ms of CPU per event measured at 10,000 nodes, 30x a bare
watcher; docs/performance.md), and almost all of them are then dropped by
`engine.nodes.is_relevant_change`. This watcher parses each event once and hands it straight
to the runtime, so an irrelevant update costs what it costs any watcher.

It behaves like client-go's reflector: list (in pages), then watch from the list's
resourceVersion with bookmarks, resume from the last version seen when the server ends the
stream, and list again on 410 Gone (the version is too old), reporting nodes that vanished in
between as deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from remediation_operator.k8s.client import ApiError, Client, path

PAGE = 500
WATCH_SECONDS = 300
RESTART_DELAY = 1.0
QUIET = timedelta(seconds=2 * WATCH_SECONDS)
"""The Node watch delivered nothing (no list page, event, bookmark or end of stream) this
long: `/healthz` fails (handlers.supervision). The server ends every stream after
`WATCH_SECONDS`, so a working watch delivers at least that often."""

NodeEvent = Callable[[str | None, Mapping[str, Any]], None]


class NodeWatch:
    def __init__(self, client: Client, on_event: NodeEvent, log: Any = None) -> None:
        self._client = client
        self._on_event = on_event
        self._log = log
        self._known: set[str] = set()
        """Nodes handed over and not deleted since (a list reports the others as deleted)."""
        self._version = ""
        """The last resourceVersion the watch delivered (where a resumed watch starts)."""
        self.listed = asyncio.Event()
        """Set once the first full list has been handed over (the runtime's cache is synced)."""
        self.on_progress: Callable[[], None] = lambda: None
        """Called for each list page, watch event (bookmarks too) and end of stream."""

    async def run(self) -> None:
        version = ""
        while True:
            try:
                if not version:
                    version = await self._list()
                version = await self._watch(version)
            except ApiError as error:
                if error.status == 410:
                    version = ""  # too old: list again, at once
                    continue
                if self._log is not None:
                    self._log.warning("node_watch_restarting", error=str(error))
                await asyncio.sleep(RESTART_DELAY)

    async def _list(self) -> str:
        listed: set[str] = set()
        token, version = "", ""
        while True:
            query: dict[str, str | int] = {"limit": PAGE}
            if token:
                query["continue"] = token
            page = await self._client.get(path("v1", "nodes"), **query)
            self.on_progress()
            # Handed over as each page arrives: the consumer trims what it keeps, and the full
            # bodies are garbage before the next page.
            for body in page.get("items") or []:
                name = _name(body) if isinstance(body, dict) else ""
                if name:
                    listed.add(name)
                    self._deliver("ADDED", body)
            metadata = page.get("metadata") or {}
            version = str(metadata.get("resourceVersion") or version)
            token = str(metadata.get("continue") or "")
            if not token:
                break
        for name in [n for n in self._known if n not in listed]:
            self._deliver("DELETED", {"metadata": {"name": name}})
        self.listed.set()
        return version

    async def _watch(self, version: str) -> str:
        """Stream events from `version`; returns the last version seen when the server ends
        the watch (its timeout), to resume from there."""
        self._version = version
        await self._client.watch_each(
            path("v1", "nodes"),
            self._event,
            timeout_seconds=WATCH_SECONDS,
            resourceVersion=version,
            allowWatchBookmarks=True,
        )
        self.on_progress()
        return self._version

    def _event(self, event: Mapping[str, Any]) -> None:
        self.on_progress()
        body = event.get("object")
        if type(body) is not dict:
            return  # not an object: nothing to hand over (the API server never sends one)
        metadata = body.get("metadata")
        if type(metadata) is not dict:
            metadata = {}
        self._version = str(metadata.get("resourceVersion") or self._version)
        kind = event.get("type")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._deliver(kind, body)

    def _deliver(self, kind: str, body: Mapping[str, Any]) -> None:
        name = _name(body)
        if not name:
            return
        if kind == "DELETED":
            self._known.discard(name)
        else:
            self._known.add(name)
        self._on_event(kind, body)


def _name(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata")
    return str(metadata.get("name") or "") if type(metadata) is dict else ""
