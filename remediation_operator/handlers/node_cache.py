"""The latest body of every Node, and the cheap test of whether an update matters.

The Node watch delivers every update (heartbeats arrive every few seconds per node); the
runtime keeps the newest body here and asks `engine.nodes.classify` before any other work, so
at 10,000 nodes a heartbeat costs a dict lookup and a few comparisons of raw values. Views for
the planner are rebuilt lazily, only for nodes that changed since the last reconcile asked for
them (a heartbeat that triggers nothing still refreshes the view, so staleness is judged on the
newest heartbeat). An update that changes only conditions no policy watches (nor Ready), which
no plan reads, does not even do that: the node is remembered as "behind" and its view is
rebuilt when the set of watched conditions changes (or with its next other change). The views
live in an `engine.node_index.NodeIndex`, which keeps each policy's selection and the NotReady
set up to date as nodes change, so a reconcile focused on one node does not pass over every
node to find them; the quarantined count is kept the same way (the metric is refreshed on
every relevant event).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

from remediation_operator.domain.fleet import NodeView
from remediation_operator.engine import nodes as node_views
from remediation_operator.engine.node_index import NodeIndex
from remediation_operator.engine.nodes import Change


class NodeCache:
    def __init__(self) -> None:
        self._bodies: dict[str, Mapping[str, Any]] = {}
        self._views = NodeIndex()
        self._quarantined: set[str] = set()
        self._dirty: set[str] = set()
        """Nodes whose view must be rebuilt before the next plan reads the views."""
        self._behind: set[str] = set()
        """Nodes whose view lags their body only in conditions no policy watches."""
        self._watched: frozenset[str] = frozenset()
        self.stale_after: timedelta | None = None
        """The smallest `staleAfter` of any policy (heartbeats matter only then)."""

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
        self._watched = types

    def update(self, body: Mapping[str, Any]) -> bool:
        """Store the newest body; True when the change could alter a decision."""
        name = node_views.name_of(body)
        if not name:
            return False
        old = self._bodies.get(name)
        self._bodies[name] = body
        change = node_views.classify(old, body, self._watched, self.stale_after)
        if change is Change.UNSEEN:
            self._behind.add(name)  # (a view still to be built is built from the newest body)
            return False
        self._dirty.add(name)
        return change is Change.RELEVANT

    def remove(self, name: str) -> bool:
        self._views.pop(name, None)
        self._quarantined.discard(name)
        self._dirty.discard(name)
        self._behind.discard(name)
        return self._bodies.pop(name, None) is not None

    def add_missing(self, bodies: Collection[Mapping[str, Any]]) -> None:
        """Store listed nodes the watch has not delivered yet.

        A node the watch already delivered is at least as fresh as a list taken while the
        watch was running, so it is never replaced by the listed copy.
        """
        for body in bodies:
            name = node_views.name_of(body)
            if name and name not in self._bodies:
                self.update(body)

    @property
    def views(self) -> Mapping[str, NodeView]:
        """Every node's view, current as of this call (a live index: later calls update it)."""
        return self._refresh()

    def _refresh(self) -> NodeIndex:
        behind = self._behind
        for name in self._dirty:
            behind.discard(name)
            view = self._views[name] = node_views.to_view(self._bodies[name])
            if view.quarantined:
                self._quarantined.add(name)
            else:
                self._quarantined.discard(name)
        self._dirty.clear()
        return self._views

    def body(self, name: str) -> Mapping[str, Any] | None:
        """The newest Node body the watch delivered (never mutate it)."""
        return self._bodies.get(name)

    def uid(self, name: str) -> str | None:
        body = self._bodies.get(name)
        uid = (body.get("metadata") or {}).get("uid") if body else None
        return str(uid) if uid else None

    def quarantined(self) -> int:
        self._refresh()
        return len(self._quarantined)
