"""Which fault of a policy a node shows right now, and how strong the evidence is.

Node agents publish faults as conditions; the policy lists faults in severity order. A node
that matches several takes the first listed. A stale heartbeat, a missing condition or an
Unknown status is *weak* evidence (fail closed: enough to cordon, never enough to disrupt).

The planner matches every selected node on every plan (the breaker and the policy's counts
need all of them), so the policy's faults are compiled once into a per-condition-type index
and a node costs one dictionary look-up per condition it carries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.policy import ConditionMatch, Fault

UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Match:
    """A fault seen on a node now, with the condition that showed it (None: condition missing)."""

    fault: Fault
    severity: int
    """Position of the fault in `policy.faults`: 0 is the most severe."""
    condition: Condition | None
    weak: bool
    """Only a stale heartbeat, a missing condition or status Unknown: cordon, never disrupt."""


@dataclass(frozen=True)
class _Rule:
    severity: int
    fault: Fault
    match: ConditionMatch
    reason: re.Pattern[str] | None


@dataclass(frozen=True)
class _Index:
    by_type: dict[str, tuple[_Rule, ...]]
    """Every rule, by the condition type it looks at, most severe first."""
    stale: tuple[_Rule, ...]
    """Rules with `stale_after`: they also fire when their condition is missing."""


@lru_cache(maxsize=64)
def _index(faults: tuple[Fault, ...]) -> _Index:
    by_type: dict[str, list[_Rule]] = {}
    stale: list[_Rule] = []
    for severity, fault in enumerate(faults):
        for m in fault.match:
            pattern = re.compile(m.reason) if m.reason is not None else None
            rule = _Rule(severity, fault, m, pattern)
            by_type.setdefault(m.type, []).append(rule)
            if m.stale_after is not None:
                stale.append(rule)
    return _Index({t: tuple(rules) for t, rules in by_type.items()}, tuple(stale))


def _evidence(rule: _Rule, condition: Condition, now: datetime) -> bool | None:
    """None: no fault. False: strong evidence. True: weak evidence (stale or Unknown).

    A rule that names only a type and `staleAfter` fires on staleness alone; a rule that names
    only a type (no status, reason or staleAfter) never fires.
    """
    m = rule.match
    if m.status is not None or rule.reason is not None:
        status_ok = m.status is None or condition.status == m.status
        if status_ok and (rule.reason is None or rule.reason.fullmatch(condition.reason)):
            return condition.status == UNKNOWN
    stale_after: timedelta | None = m.stale_after
    if stale_after is not None:
        beat = condition.last_heartbeat_time
        if beat is None or now - beat > stale_after:
            return True
    return None


_CACHE_LIMIT = 250_000
"""Remembered (node, answer) pairs per policy; far more than a fleet, cleared when reached."""


class Matcher:
    """The faults of one policy compiled for matching many nodes at one instant.

    Answers are remembered per NodeView object (frozen: its conditions cannot change) for as
    long as no heartbeat can go stale, so re-planning a large, mostly unchanged fleet costs a
    dictionary look-up per node. The memory is an optimisation only: results are identical.
    """

    def __init__(self, faults: tuple[Fault, ...]) -> None:
        self._index = _index(faults)
        self._cache = _caches(faults)

    def match(self, node: NodeView, now: datetime) -> Match | None:
        """The most severe fault the node shows now; strong evidence wins at equal rank."""
        entry = self._cache.get(id(node))
        if entry is not None and entry[0] is node and entry[1] <= now <= entry[2]:
            return entry[3]
        return self._remember(node, now)

    def faulty(self, nodes: Mapping[str, NodeView], now: datetime) -> dict[str, Match]:
        """`match` for every node, keeping only those that show a fault (one tight loop)."""
        get = self._cache.get
        remember = self._remember
        out: dict[str, Match] = {}
        for name, node in nodes.items():
            entry = get(id(node))
            if entry is not None and entry[0] is node and entry[1] <= now <= entry[2]:
                found = entry[3]
            else:
                found = remember(node, now)
            if found is not None:
                out[name] = found
        return out

    def evaluate(self, node: NodeView, now: datetime) -> tuple[Match | None, datetime | None]:
        """`match` without the memory, and the last instant the answer holds (None: for as
        long as the node is unchanged; after it, a fresh heartbeat may have gone stale)."""
        return self._evaluate(node, now)

    def _remember(self, node: NodeView, now: datetime) -> Match | None:
        found, until = self._evaluate(node, now)
        cache = self._cache
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[id(node)] = (node, now, now + _FOREVER if until is None else until, found)
        return found

    def _evaluate(self, node: NodeView, now: datetime) -> tuple[Match | None, datetime | None]:
        """The answer, and until when it holds (a fresh heartbeat may go stale; None: ever)."""
        index = self._index
        by_type = index.by_type
        best: Match | None = None
        until: datetime | None = None
        seen: set[str] | None = set() if index.stale else None
        for condition in node.conditions:
            if seen is not None:
                seen.add(condition.type)
            rules = by_type.get(condition.type)
            if rules is None:
                continue
            for rule in rules:
                if best is not None and (
                    rule.severity > best.severity
                    or (rule.severity == best.severity and not best.weak)
                ):
                    break
                weak = _evidence(rule, condition, now)
                if weak is not None:
                    best = Match(rule.fault, rule.severity, condition, weak)
                stale_after = rule.match.stale_after
                beat = condition.last_heartbeat_time
                if stale_after is not None and beat is not None and now - beat <= stale_after:
                    goes_stale = beat + stale_after
                    until = goes_stale if until is None else min(until, goes_stale)
        if seen is not None:
            for rule in index.stale:
                if rule.match.type in seen:
                    continue
                if best is None or rule.severity < best.severity:
                    best = Match(rule.fault, rule.severity, None, True)
        return best, until


_Entry = tuple[NodeView, datetime, datetime, Match | None]
"""(node, computed at, valid until, answer): valid for any `now` between the two instants."""

_FOREVER = timedelta(days=365 * 100)


@lru_cache(maxsize=64)
def _caches(faults: tuple[Fault, ...]) -> dict[int, _Entry]:
    """One answer memory per set of faults (a policy edit starts a fresh one)."""
    return {}


def match(node: NodeView, faults: tuple[Fault, ...], now: datetime) -> Match | None:
    """The most severe of `faults` the node shows now (see `Matcher` for many nodes)."""
    return Matcher(faults).match(node, now)


def match_fault(node: NodeView, fault: Fault, now: datetime) -> Match | None:
    """Whether the node shows this one fault now (the re-check before a step)."""
    return match(node, (fault,), now)
