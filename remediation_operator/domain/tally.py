"""The fleet-wide counts a plan needs, carried from plan to plan so only changed nodes are matched.

Which selected nodes show a fault, which of those are still in their startup grace, and how
many nodes and faulty nodes each breaker group has: every plan needs them, yet between two
plans only a few nodes change. `FleetTally` keeps them for one policy over one node source.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from remediation_operator.domain import breaker, matching
from remediation_operator.domain.fleet import NodeView, Snapshot
from remediation_operator.domain.policy import Policy

_Counted = tuple[NodeView, str, "matching.Match | None"]
"""What a FleetTally counted for one node: the view it saw, its group, its fault (or None)."""


class FleetTally:
    """The fleet-wide part of a plan, carried between plans of ONE policy over ONE node source.

    Which selected nodes show a fault, which of those are still in their startup grace, and
    how many nodes and faulty nodes each breaker group has: a plan needs all of them, yet
    between two plans only a few nodes change. The caller owns one tally per policy and tells
    it, before each plan, which nodes changed since the previous one (`changed`); the plan
    then matches again only those nodes, the focused nodes whose view is not the one counted,
    and the nodes whose answer changes with time alone (a heartbeat goes stale, a startup
    grace ends: a heap of those instants, whose earliest is also the plan's wake for them:
    `next_change`). Whatever it cannot vouch for (a different set of
    faults, grouping or grace, time going back, a node count it did not expect, a caller that
    does not know what changed) makes it count every node again. A plan made with a tally is
    always the plan made without one (a property test checks this on random histories).
    """

    def __init__(self) -> None:
        self._key: object = None
        self._now: datetime | None = None
        self._unknown = True
        self._dirty: set[str] = set()
        self._counted: dict[str, _Counted] = {}
        self._due: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, str]] = []
        self._totals: Counter[str] = Counter()
        self._unhealthy: Counter[str] = Counter()
        self._matcher: matching.Matcher | None = None
        self.matches: dict[str, matching.Match] = {}
        """Selected nodes that show a fault now (read-only for callers)."""
        self.starting: set[str] = set()
        """Of those, the ones still within the policy's startup grace (read-only)."""
        self.recounts = 0
        """How many times every node was counted again (for tests and benchmarks)."""

    def changed(self, names: Iterable[str] | None) -> None:
        """Nodes whose view may have changed, joined or left since the previous plan; None:
        the caller does not know (the next plan counts every node again)."""
        if names is None:
            self._unknown = True
        else:
            self._dirty.update(names)

    def health(self, group_by: str | None, selected: int) -> dict[str, breaker.Health]:
        """Health by breaker group, as `_Planner` needs it."""
        if group_by is None:
            return {breaker.UNGROUPED: breaker.Health(selected, self._unhealthy[breaker.UNGROUPED])}
        unhealthy = self._unhealthy
        return {g: breaker.Health(t, unhealthy[g]) for g, t in self._totals.items()}

    @property
    def unhealthy(self) -> int:
        return sum(self._unhealthy.values())

    @property
    def next_change(self) -> datetime | None:
        """After `refresh(now)`: the first instant, after `now`, at which some node's answer
        may change with time alone (a condition goes stale, a startup grace ends); None: no
        such instant. Every pending instant is after `now` (`refresh` re-counted the others)."""
        heap, due = self._heap, self._due
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # a superseded instant of a node counted again since
        return heap[0][0] if heap else None

    def refresh(self, snapshot: Snapshot, policy: Policy, now: datetime) -> None:
        """Bring the counts up to date with `snapshot.nodes` at `now`."""
        try:
            self._refresh(snapshot, policy, now)
        except BaseException:
            self._unknown = True
            raise

    def _refresh(self, snapshot: Snapshot, policy: Policy, now: datetime) -> None:
        nodes = snapshot.nodes
        config = policy.circuit_breaker
        key = (policy.faults, None if config is None else config.group_by, policy.startup_grace)
        matcher = self._matcher
        if (
            matcher is None
            or self._unknown
            or key != self._key
            or self._now is None
            or now < self._now
        ):
            self._matcher = matching.Matcher(policy.faults)
            self._recount(nodes, policy, now, self._matcher, key)
            return
        dirty = self._dirty
        heap, due = self._heap, self._due
        while heap and heap[0][0] <= now:
            at, name = heapq.heappop(heap)
            if due.get(name) == at:
                del due[name]
                dirty.add(name)
        counted = self._counted
        for name in snapshot.focus or ():
            seen = counted.get(name)
            if (seen[0] if seen is not None else None) is not nodes.get(name):
                dirty.add(name)
        for name in dirty:
            self._forget(name)
            view = nodes.get(name)
            if view is not None:
                self._count(name, view, policy, now, matcher)
        self._dirty = set()
        self._now = now
        if len(counted) != len(nodes) or len(heap) > 2 * len(due) + 1024:
            self._recount(nodes, policy, now, matcher, key)

    def _recount(
        self,
        nodes: Mapping[str, NodeView],
        policy: Policy,
        now: datetime,
        matcher: matching.Matcher,
        key: object,
    ) -> None:
        self.recounts += 1
        self._counted, self._due, self._heap = {}, {}, []
        self._totals, self._unhealthy = Counter(), Counter()
        self.matches, self.starting = {}, set()
        for name, view in nodes.items():
            self._count(name, view, policy, now, matcher)
        self._key, self._now, self._unknown, self._dirty = key, now, False, set()

    def _count(
        self, name: str, view: NodeView, policy: Policy, now: datetime, matcher: matching.Matcher
    ) -> None:
        found, until = matcher.evaluate(view, now)
        group = breaker.group_of(view, policy.circuit_breaker)
        self._totals[group] += 1
        self._counted[name] = (view, group, found)
        # The first instant the answer may differ (it holds up to and including `until`).
        wake = None if until is None else until + matching.TICK
        if found is not None:
            self.matches[name] = found
            born = view.created_at
            if born is not None and born > now - policy.startup_grace:
                self.starting.add(name)
                grown = born + policy.startup_grace
                wake = grown if wake is None else min(wake, grown)
            else:
                self._unhealthy[group] += 1
        if wake is not None:
            self._due[name] = wake
            heapq.heappush(self._heap, (wake, name))

    def _forget(self, name: str) -> None:
        seen = self._counted.pop(name, None)
        if seen is None:
            return
        _, group, found = seen
        self._due.pop(name, None)
        self._drop(self._totals, group)
        if found is not None:
            del self.matches[name]
            if name in self.starting:
                self.starting.discard(name)
            else:
                self._drop(self._unhealthy, group)

    @staticmethod
    def _drop(counts: Counter[str], group: str) -> None:
        left = counts[group] - 1
        if left:
            counts[group] = left
        else:
            del counts[group]
