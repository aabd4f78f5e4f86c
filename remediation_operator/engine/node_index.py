"""The caller's live map of NodeViews, keeping what every reconcile needs up to date as it changes.

A reconcile focused on one node must not cost a pass over 10,000 nodes beyond what the planner
itself needs. Which nodes a policy's selector picks and which nodes are NotReady change only
when a node changes, so this map maintains both on every write instead of recomputing them on
every reconcile. The runtime (one entry per Node watch event) and the in-memory cluster both
hold one; `reconcile` accepts any Mapping and only uses the shortcuts when given this one.

It also numbers its changes and keeps, per policy, the planner's `FleetTally` and the change
number that tally last saw, so each plan re-matches only the nodes changed since the previous
plan of that policy instead of all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Set
from dataclasses import dataclass, field

from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.planner import FleetTally
from remediation_operator.domain.selectors import LabelSelector, Requirement

_SelectorKey = tuple[tuple[tuple[str, str], ...], tuple[Requirement, ...]]


def not_ready(view: NodeView) -> bool:
    """The node reports Ready other than True (a node with no Ready condition yet does not)."""
    for condition in view.conditions:
        if condition.type == "Ready":
            return condition.status != "True"
    return False


def _key(selector: LabelSelector) -> _SelectorKey:
    return tuple(sorted(selector.match_labels.items())), tuple(selector.match_expressions)


@dataclass
class PolicyMemory:
    """One policy's planner tally over this index, and the change number it has seen."""

    tally: FleetTally = field(default_factory=FleetTally)
    seen: int = -1
    """Changes up to this number are known to the tally (-1: none; it must count all)."""


_JOURNAL_MIN = 4096
"""Changes remembered at least; beyond max(this, 2 x nodes) the journal is dropped and a tally
that had not caught up counts every node again (amortised O(1) per change)."""


class NodeIndex(MutableMapping[str, NodeView]):
    """NodeViews by name, plus the NotReady set and one selection per selector seen."""

    def __init__(self, views: Mapping[str, NodeView] | None = None) -> None:
        self._views: dict[str, NodeView] = {}
        self._not_ready: set[str] = set()
        self._selections: dict[_SelectorKey, tuple[LabelSelector, dict[str, NodeView]]] = {}
        self._journal: list[str] = []
        """Names of changed nodes; entry i is change number `_base + i + 1`."""
        self._base = 0
        self._memories: dict[str, PolicyMemory] = {}
        for name, view in (views or {}).items():
            self[name] = view

    def __getitem__(self, name: str) -> NodeView:
        return self._views[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __contains__(self, name: object) -> bool:
        return name in self._views

    def __setitem__(self, name: str, view: NodeView) -> None:
        self._views[name] = view
        self._note(name)
        if not_ready(view):
            self._not_ready.add(name)
        else:
            self._not_ready.discard(name)
        for selector, selected in self._selections.values():
            if selector.matches(view.labels):
                selected[name] = view
            else:
                selected.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._views[name]
        self._note(name)
        self._not_ready.discard(name)
        for _, selected in self._selections.values():
            selected.pop(name, None)

    def not_ready(self) -> Set[str]:
        """Names of the nodes whose Ready condition is not True (live; do not mutate)."""
        return self._not_ready

    def selected(self, selector: LabelSelector) -> Mapping[str, NodeView]:
        """The nodes `selector` picks (live; built once per selector, then kept up to date)."""
        if not selector.match_labels and not selector.match_expressions:
            return self._views
        key = _key(selector)
        entry = self._selections.get(key)
        if entry is None:
            picked = {n: v for n, v in self._views.items() if selector.matches(v.labels)}
            entry = self._selections[key] = (selector, picked)
        return entry[1]

    # Change journal ------------------------------------------------------------------------------

    def _note(self, name: str) -> None:
        journal = self._journal
        journal.append(name)
        if len(journal) > max(_JOURNAL_MIN, 2 * len(self._views)):
            self._base += len(journal)
            journal.clear()

    @property
    def version(self) -> int:
        """The number of the latest change (a view set or removed)."""
        return self._base + len(self._journal)

    def changed_between(self, after: int, upto: int) -> set[str] | None:
        """Names changed after change `after` up to change `upto`; None when no longer known."""
        if after < self._base or upto < after or upto > self.version:
            return None
        return set(self._journal[after - self._base : upto - self._base])

    def memory(self, policy: str) -> PolicyMemory:
        """The planner's tally for `policy` over this index (created on first use)."""
        memory = self._memories.get(policy)
        if memory is None:
            memory = self._memories[policy] = PolicyMemory()
        return memory

    def forget(self, policy: str) -> None:
        """Drop a deleted policy's tally."""
        self._memories.pop(policy, None)
