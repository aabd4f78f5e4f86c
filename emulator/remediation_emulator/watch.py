"""Watch fan-out: one bounded history ring per resource and one queue per open watch.

Each write is offered to the watches of its resource only, filtered by namespace and
selectors at dispatch (no scans), and serialised once however many watches receive it. The
ring lets a client resume from a resourceVersion without losing or repeating an event; a
version older than the ring answers 410 Gone, as the real watch cache does.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from remediation_emulator.selectors import (
    EVERYTHING,
    NO_FIELDS,
    FieldSelector,
    LabelSelector,
)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
# A watcher this far behind is closed, like the real server closes slow watchers; the client
# re-lists or resumes from its last resourceVersion.
MAX_BACKLOG = 200_000


class Event:
    """One change to one object, as recorded in the history ring."""

    __slots__ = ("_line", "obj", "old", "rv", "type")

    def __init__(self, rv: int, type_: str, obj: dict[str, Any], old: dict[str, Any] | None):
        self.rv = rv
        self.type = type_
        self.obj = obj
        self.old = old
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The watch stream line, encoded once and shared by every watcher."""
        if self._line is None:
            self._line = encode(self.type, self.obj)
        return self._line


def encode(type_: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": type_, "object": obj}, separators=(",", ":")) + "\n").encode()


@dataclass(eq=False)
class Watcher:
    """An open watch: its filter and the queue its HTTP stream drains."""

    namespace: str | None = None
    labels: LabelSelector = EVERYTHING
    fields: FieldSelector = NO_FIELDS
    queue: asyncio.Queue[tuple[str, dict[str, Any], Event | None] | None] = field(
        default_factory=asyncio.Queue
    )
    closed: bool = False

    def selects(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def offer(self, event: Event) -> None:
        """Queue the event as this watcher sees it (an object leaving the selector is DELETED)."""
        if self.closed:
            return
        now = self.selects(event.obj)
        before = event.old is not None and self.selects(event.old)
        if event.type == MODIFIED:
            if now and before:
                self._put(MODIFIED, event.obj, event)
            elif now:
                self._put(ADDED, event.obj, None)
            elif before and event.old is not None:
                self._put(DELETED, with_rv(event.old, event.rv), None)
        elif now:
            self._put(event.type, event.obj, event)

    def _put(self, type_: str, obj: dict[str, Any], event: Event | None) -> None:
        if self.queue.qsize() >= MAX_BACKLOG:
            self.close()
            return
        self.queue.put_nowait((type_, obj, event))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


def with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """A copy of obj carrying resourceVersion rv (deleted objects carry the deletion's rv)."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


class History:
    """The bounded ring of recent events of one resource, and the watches open on it.

    Watches of a single object (fieldSelector metadata.name=X, as a per-object watch is made)
    are indexed by that name, so a write is offered to the general watches plus the few
    watching that object: 10,000 per-node watches do not make each write cost 10,000 checks.
    """

    def __init__(self, size: int) -> None:
        self.events: deque[Event] = deque(maxlen=size)
        self.dropped_upto = 0
        """Highest resourceVersion no longer in the ring; watches must start at or after it."""
        self._general: set[Watcher] = set()
        self._by_name: dict[str, set[Watcher]] = {}

    def add(self, watcher: Watcher) -> None:
        name = watcher.fields.exact("metadata.name")
        if name is None:
            self._general.add(watcher)
        else:
            self._by_name.setdefault(name, set()).add(watcher)

    def discard(self, watcher: Watcher) -> None:
        name = watcher.fields.exact("metadata.name")
        if name is None:
            self._general.discard(watcher)
            return
        named = self._by_name.get(name)
        if named is not None:
            named.discard(watcher)
            if not named:
                del self._by_name[name]

    @property
    def watchers(self) -> list[Watcher]:
        return [*self._general, *(w for ws in self._by_name.values() for w in ws)]

    def record(self, event: Event) -> None:
        if len(self.events) == self.events.maxlen and self.events:
            self.dropped_upto = self.events[0].rv
        self.events.append(event)
        targets = list(self._general)
        named = self._by_name.get(event.obj["metadata"]["name"])
        if named:
            targets += named
        for watcher in targets:
            watcher.offer(event)
            if watcher.closed:
                self.discard(watcher)

    def since(self, rv: int) -> Iterator[Event]:
        """Events after rv, oldest first (caller checked rv >= dropped_upto)."""
        if not self.events or self.events[-1].rv <= rv:
            return iter(())
        # The ring is ordered by rv: skip from the left with a binary search over indices.
        lo, hi = 0, len(self.events)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.events[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return (self.events[i] for i in range(lo, len(self.events)))

    def compact(self, rv: int) -> None:
        """Forget everything up to rv, like an etcd compaction."""
        while self.events and self.events[0].rv <= rv:
            self.events.popleft()
        self.dropped_upto = max(self.dropped_upto, rv)

    def close_all(self) -> None:
        for watcher in self.watchers:
            watcher.close()
        self._general.clear()
        self._by_name.clear()
