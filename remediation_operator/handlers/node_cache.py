"""The latest body of every Node, trimmed, and the cheap test of whether an update matters.

The Node watch delivers every update (heartbeats arrive every few seconds per node); the
runtime keeps the newest body here and asks `engine.nodes.classify` before any other work, so
at 10,000 nodes a heartbeat costs a dict lookup and a few comparisons of raw values. Views for
the planner are rebuilt lazily, only for nodes that changed since the last reconcile asked for
them (a heartbeat that triggers nothing still refreshes the view, so staleness is judged on the
newest observation). An update that changes only conditions no policy watches (nor Ready), which
no plan reads, does not even do that: the node is remembered as "behind" and its view is
rebuilt when the set of watched conditions changes (or with its next other change). The views
live in an `engine.node_index.NodeIndex`, which keeps each policy's selection and the NotReady
set up to date as nodes change, so a reconcile focused on one node does not pass over every
node to find them; the quarantined count is kept the same way (the metric is refreshed on
every relevant event).

It also keeps, per node and watched condition, when the operator last saw that condition's
heartbeat, status or reason change, on the injected clock (`engine.condition_clock`): views
carry it as `Condition.observed_at`, from which staleness is judged (never from the remote
heartbeat). The instant is taken when the watch event arrives, not when the view is rebuilt
(from a clock read at most every 100 ms: `CoarseClock`, D40); a condition whose type a policy
starts watching is first seen at that moment, on every node at once. A
heartbeat that renews a condition we had not seen change for longer than the smallest
`staleAfter` is relevant: a staleness the planner may have acted on just ended. Going stale is
no event at all, so the cache also knows when each node's first watched condition would go
stale (`next_deadline`, `due`): the runtime wakes that node's policies then.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.fleet import NodeView
from remediation_operator.engine import nodes as node_views
from remediation_operator.engine.condition_clock import ConditionClock
from remediation_operator.engine.node_index import NodeIndex
from remediation_operator.engine.nodes import Change
from remediation_operator.handlers import node_trim


def _now() -> datetime:
    return datetime.now(UTC)


RESOLUTION = 0.1
"""Seconds: how stale the instant a node cache stamps may be (`CoarseClock`)."""


class CoarseClock:
    """The wall clock, read again only once `resolution` seconds passed on the monotonic one.

    Why: the node cache stamps every heartbeat it sees (`engine.condition_clock`), and on the
    per-event path `datetime.now` is the most expensive line: about 13 us of a 200 us event,
    the datetime module's code being cold at every event, when a monotonic reading, which the
    event loop makes all the time, costs well under one (docs/performance.md). A stamp is
    then early by less than `resolution` (100 ms): a condition goes stale that much sooner,
    against windows of minutes, and evidence seen within 100 ms after a step started may be
    taken as seen before it, which only makes the evidence gate wait for the next heartbeat."""

    def __init__(
        self,
        resolution: float = RESOLUTION,
        wall: Callable[[], datetime] = _now,
        ticks: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolution = resolution
        self._wall = wall
        self._ticks = ticks
        self._read_at = -math.inf
        self._last = datetime.min.replace(tzinfo=UTC)

    def __call__(self) -> datetime:
        tick = self._ticks()
        if tick - self._read_at >= self._resolution:
            self._last = self._wall()
            self._read_at = tick
        return self._last


class NodeCache:
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock if clock is not None else CoarseClock()
        self._seen = ConditionClock()
        """When each watched condition (and Ready) was last seen to change, on our clock."""
        self._bodies: dict[str, Mapping[str, Any]] = {}
        self._views = NodeIndex()
        self._quarantined: set[str] = set()
        self._dirty: set[str] = set()
        """Nodes whose view must be rebuilt before the next plan reads the views."""
        self._behind: set[str] = set()
        """Nodes whose view lags their body only in conditions no policy watches."""
        self._watched: frozenset[str] = frozenset()
        self._tracked: frozenset[str] = frozenset({node_views.READY})
        """Condition types whose changes are timed: the watched ones and Ready."""
        self.stale_after: timedelta | None = None
        """The smallest `staleAfter` of any policy: a heartbeat renewing a condition not seen
        to change for longer than this is relevant (a staleness ended)."""
        self.replaced: Mapping[str, Any] | None = None
        """The body the last `update` replaced (None: the node was new). After a heartbeat
        no decision reads, which refreshes the stored body in place, that very body: its
        labels, annotations and spec are the same then."""
        self.renewed = False
        """The last `update` saw a condition seen before change (a heartbeat at least): fresh
        evidence, which a step held by the evidence gate may be waiting for."""
        self.on_sooner: Callable[[], None] = lambda: None
        """Called when a staleness deadline earlier than all others appears (re-arm a timer)."""

    @property
    def windows(self) -> Mapping[str, timedelta]:
        """By condition type: the smallest `staleAfter` any policy gives it."""
        return self._seen.windows

    @windows.setter
    def windows(self, windows: Mapping[str, timedelta]) -> None:
        self._seen.windows = windows
        self._sooner()

    def next_deadline(self) -> datetime | None:
        """The earliest instant a node's watched condition goes stale if nothing changes."""
        return self._seen.next_deadline()

    def due(self, now: datetime) -> list[str]:
        """Nodes one of whose watched conditions went stale by `now` (each reported once)."""
        return self._seen.due(now)

    def _sooner(self) -> None:
        if self._seen.sooner:
            self._seen.sooner = False
            self.on_sooner()

    @property
    def watched(self) -> frozenset[str]:
        """Condition types any policy matches on."""
        return self._watched

    @watched.setter
    def watched(self, types: frozenset[str]) -> None:
        if types != self._watched:
            # A newly watched condition may be one whose changes were skipped: catch up.
            self._dirty.update(self._behind)
            self._behind.clear()
        grew = not types <= self._watched
        self._watched = types
        self._tracked = types | {node_views.READY}
        if grew:
            # Its conditions are first seen now (rare: a policy starts matching a new
            # condition type): timed at once, so that every node's record covers every timed
            # type and a heartbeat is timed from its moved conditions alone (`update`), and
            # every view rebuilt to carry that instant.
            now = self._clock()
            for name, body in self._bodies.items():
                self._seen.observe(name, body, now, self._tracked)
            self._sooner()
            self._dirty.update(self._bodies)

    def update(self, body: Mapping[str, Any], name: str | None = None) -> bool:
        """Store the newest body: a heartbeat no decision reads refreshes the stored one in
        place, anything else is trimmed (`handlers.node_trim`) against the one it replaces.
        True when the change could alter a decision. `name`: the body's metadata.name, when
        the caller has read it already. The body replaced is `replaced` until the next call.

        Runs for every Node event: plain code, no call that a line can do (docs/performance.md)."""
        if name is None:
            name = node_views.name_of(body)
        if not name:
            self.replaced = None
            return False
        old = self.replaced = self._bodies.get(name)
        moved = None if old is None else node_trim.heartbeat(old, body)
        change = None
        if old is not None and moved is not None:
            change = node_views.classify_moved(old, body, moved, self._watched)
            if change is not None:
                # A heartbeat no decision reads: the stored body is brought up to date in
                # place, no object built (`node_trim.refresh`); `replaced` is that same body.
                node_trim.refresh(old, body, moved)
                body = old
        if change is None:
            body = self._bodies[name] = node_trim.trim(body, old)
            change = node_views.classify(old, body, self._watched)
        self.renewed = False
        if change is Change.UNSEEN:
            self._behind.add(name)  # (a view still to be built is built from the newest body)
            return False  # (no watched condition changed: nothing to time either)
        now = self._clock()
        seen = self._seen
        renewed = seen.observe(name, body, now, self._tracked, moved)
        if seen.sooner:
            self._sooner()
        self.renewed = renewed is not None
        self._dirty.add(name)
        if change is Change.RELEVANT:
            return True
        stale_after = self.stale_after
        return renewed is not None and stale_after is not None and now - renewed > stale_after

    def remove(self, name: str) -> bool:
        self._seen.forget(name)
        self._views.pop(name, None)
        self._quarantined.discard(name)
        self._dirty.discard(name)
        self._behind.discard(name)
        return self._bodies.pop(name, None) is not None

    @property
    def views(self) -> Mapping[str, NodeView]:
        """Every node's view, current as of this call (a live index: later calls update it)."""
        return self._refresh()

    def _refresh(self) -> NodeIndex:
        behind = self._behind
        if not self._dirty:
            return self._views
        now = self._clock()
        seen, tracked = self._seen, self._tracked
        for name in self._dirty:
            behind.discard(name)
            body = self._bodies[name]
            # Timed already when the event came, unless a type just became watched: then
            # this is its first sight.
            seen.observe(name, body, now, tracked)
            self._sooner()
            view = self._views[name] = node_views.to_view(body, seen.times(name))
            if view.quarantined:
                self._quarantined.add(name)
            else:
                self._quarantined.discard(name)
        self._dirty.clear()
        return self._views

    def body(self, name: str) -> Mapping[str, Any] | None:
        """The newest Node body the watch delivered, trimmed. Never mutate it, nor keep it
        across an await: the cache refreshes it in place on a heartbeat (`node_trim.refresh`)."""
        return self._bodies.get(name)

    def uid(self, name: str) -> str | None:
        body = self._bodies.get(name)
        uid = (body.get("metadata") or {}).get("uid") if body else None
        return str(uid) if uid else None

    def quarantined(self) -> int:
        self._refresh()
        return len(self._quarantined)
