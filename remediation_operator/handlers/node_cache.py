"""The latest body of every Node, and the cheap test of whether an update matters.

kopf delivers every Node update (heartbeats arrive every few seconds per node); the runtime
keeps the newest body here and asks `engine.nodes.is_relevant_change` before any other work,
so at 10,000 nodes a heartbeat costs a dict lookup and a few comparisons. Views for the planner
are rebuilt lazily, only for nodes that changed since the last reconcile asked for them (a
heartbeat that triggers nothing still refreshes the view, so staleness is judged on the
newest heartbeat).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

from remediation_operator.domain.fleet import NodeView
from remediation_operator.engine import nodes as node_views


class NodeCache:
    def __init__(self) -> None:
        self._bodies: dict[str, Mapping[str, Any]] = {}
        self._views: dict[str, NodeView] = {}
        self._dirty: set[str] = set()
        self.watched: frozenset[str] = frozenset()
        """Condition types any policy matches on."""
        self.stale_after: timedelta | None = None
        """The smallest `staleAfter` of any policy (heartbeats matter only then)."""

    def update(self, body: Mapping[str, Any]) -> bool:
        """Store the newest body; True when the change could alter a decision."""
        name = node_views.name_of(body)
        if not name:
            return False
        old = self._bodies.get(name)
        self._bodies[name] = body
        self._dirty.add(name)
        return node_views.is_relevant_change(old, body, self.watched, self.stale_after)

    def remove(self, name: str) -> bool:
        self._views.pop(name, None)
        self._dirty.discard(name)
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
        for name in self._dirty:
            self._views[name] = node_views.to_view(self._bodies[name])
        self._dirty.clear()
        return self._views

    def uid(self, name: str) -> str | None:
        body = self._bodies.get(name)
        uid = (body.get("metadata") or {}).get("uid") if body else None
        return str(uid) if uid else None

    def quarantined(self) -> int:
        return sum(1 for view in self.views.values() if view.quarantined)
