"""Which fault of a policy a node shows right now, and how strong the evidence is.

Node agents publish faults as conditions; the policy lists faults in severity order. A node
that matches several takes the first listed. Weak evidence (fail closed: enough to cordon,
never enough to disrupt) is: a status Unknown (but for the control plane's `Ready=Unknown`
held for a rule's `positiveAfter`: positive evidence that the host is gone); a condition gone
stale; a status/reason match
on a condition gone stale; a condition the policy expects (`whenMissing: Fault`) that the
node never reported.

Staleness is measured on OUR clock (docs/decisions.md, "evidence is judged on our clock"): a
condition is stale when `now - Condition.observed_at > staleAfter`, `observed_at` being when
the operator last saw its heartbeat, status or reason change. The remote `lastHeartbeatTime`
is never compared with our clock, so an agent or node whose clock is off (a heartbeat a year
in the future, or ten minutes in the past at start-up) is judged by whether it keeps beating.
A condition with no `observed_at` (a caller that does not track observations) is never stale.

The freshness window of a condition type is the smallest `staleAfter` any rule of the policy
gives that type: a status/reason match on a condition older than that is weak, whichever
fault the `staleAfter` rule belongs to (the window is a property of the source, not of one
fault). A `staleAfter` rule fires on a node that never carried its condition only with
`whenMissing: Fault`: a source that never reported is not a stale source.

The planner matches every selected node on every plan (the breaker and the policy's counts
need all of them), so the policy's faults are compiled once into a per-condition-type index
and a node costs one dictionary look-up per condition it carries. Reason patterns run on RE2
(`domain.patterns`): linear time whatever the pattern.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from remediation_operator.domain import durations, patterns
from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.policy import ConditionMatch, Fault, WhenMissing

UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Match:
    """A fault seen on a node now, with the condition that showed it (None: condition missing)."""

    fault: Fault
    severity: int
    """Position of the fault in `policy.faults`: 0 is the most severe."""
    condition: Condition | None
    weak: bool
    """Status Unknown, a stale condition, or a missing one: cordon, never disrupt."""
    rule: ConditionMatch
    """The rule of `fault` that fired; its `type` names the condition even when it is missing."""
    stale: bool = False
    """The condition was not seen to change for longer than its freshness window."""
    observed_at: datetime | None = None
    """The condition's `observed_at` (our clock): the evidence is no newer than this. None when
    the condition is missing or its observation is not tracked."""
    vanished: bool = False
    """The condition that opened an open incident is no longer on the node (its agent was
    removed or restarted and has not reported since): weak evidence the fault stays
    (`domain.following`), never a sign it is gone."""

    @property
    def condition_type(self) -> str:
        return self.rule.type


@dataclass(frozen=True)
class _Rule:
    severity: int
    fault: Fault
    match: ConditionMatch
    reason: patterns.Pattern | None
    message: patterns.Pattern | None = None
    except_reason: patterns.Pattern | None = None


@dataclass(frozen=True)
class _Index:
    by_type: dict[str, tuple[_Rule, ...]]
    """Every rule, by the condition type it looks at, most severe first."""
    windows: dict[str, tuple[timedelta, tuple[timedelta, ...]]]
    """By condition type: its freshness window (the smallest `staleAfter` of the policy for
    that type) and every distinct `staleAfter` given to it (instants an answer may change)."""
    missing: tuple[_Rule, ...]
    """`staleAfter` rules with `whenMissing: Fault`: they fire when their condition is absent."""


@lru_cache(maxsize=128)
def _index(faults: tuple[Fault, ...], only: str | None = None) -> _Index:
    """The rules of `faults` (of the fault named `only`, if given); windows from all of them."""
    by_type: dict[str, list[_Rule]] = {}
    stale_afters: dict[str, set[timedelta]] = {}
    missing: list[_Rule] = []
    for severity, fault in enumerate(faults):
        for m in fault.match:
            if m.stale_after is not None:
                stale_afters.setdefault(m.type, set()).add(m.stale_after)
            if only is not None and fault.name != only:
                continue
            pattern = patterns.compile(m.reason) if m.reason is not None else None
            text = patterns.compile(m.message) if m.message is not None else None
            unless = patterns.compile(m.except_reason) if m.except_reason is not None else None
            rule = _Rule(severity, fault, m, pattern, text, unless)
            by_type.setdefault(m.type, []).append(rule)
            if m.stale_after is not None and m.when_missing is WhenMissing.Fault:
                missing.append(rule)
    windows = {t: (min(s), tuple(sorted(s))) for t, s in stale_afters.items()}
    return _Index({t: tuple(r) for t, r in by_type.items()}, windows, tuple(missing))


def _evidence(rule: _Rule, condition: Condition, stale: bool, now: datetime) -> bool | None:
    """None: no fault. False: strong evidence. True: weak evidence.

    A status/reason match is weak when the status is Unknown or the condition is stale (its
    type's freshness window passed), except a `positiveAfter` rule's Unknown held that long:
    the control plane's own verdict that the host is gone. A rule with `staleAfter` fires on
    its own window passing. A rule that names only a type (no status, reason or staleAfter)
    never fires.
    """
    m = rule.match
    if m.status is not None or rule.reason is not None or rule.message is not None:
        status_ok = m.status is None or condition.status == m.status
        if (
            status_ok
            and (rule.reason is None or rule.reason.fullmatch(condition.reason))
            and (rule.message is None or rule.message.search(condition.message))
            and (rule.except_reason is None or not rule.except_reason.fullmatch(condition.reason))
        ):
            if condition.status == UNKNOWN and m.positive_after is not None:
                return not _held(condition, m.positive_after, now)
            return stale or condition.status == UNKNOWN
    if m.stale_after is not None and _older(condition, m.stale_after, now):
        return True
    return None


def _held(condition: Condition, window: timedelta, now: datetime) -> bool:
    """Seen unchanged for at least `window` (on our clock). A condition whose observation is
    not tracked was never seen to hold: the verdict stays weak."""
    seen = condition.observed_at
    return seen is not None and now - seen >= window


def _older(condition: Condition, window: timedelta, now: datetime) -> bool:
    """Not seen to change for longer than `window` (on our clock)."""
    seen = condition.observed_at
    return seen is not None and now - seen > window


_CACHE_LIMIT = 250_000
"""Remembered (node, answer) pairs per policy; far more than a fleet, cleared when reached."""


class Matcher:
    """The faults of one policy compiled for matching many nodes at one instant.

    Answers are remembered per NodeView object (frozen: its conditions and their observation
    times cannot change) for as long as no condition can go stale, so re-planning a large,
    mostly unchanged fleet costs a dictionary look-up per node. The memory is an optimisation
    only: results are identical.

    `only`: match just the fault of that name, still with the whole policy's freshness windows
    (the re-check of one incident's fault).
    """

    def __init__(self, faults: tuple[Fault, ...], only: str | None = None) -> None:
        self._index = _index(faults, only)
        self._cache = _caches(faults, only)
        self.next_change: datetime | None = None
        """After `faulty`: the first instant at which one of those nodes' answers may change
        with time alone (a condition going stale); None: none will. A plan that does not
        wake by then misses a source going silent until some other event."""

    def match(self, node: NodeView, now: datetime) -> Match | None:
        """The most severe fault the node shows now; strong evidence wins at equal rank."""
        entry = self._cache.get(id(node))
        if entry is not None and entry[0] is node and entry[1] <= now <= entry[2]:
            return entry[3]
        return self._remember(node, now)

    def faulty(self, nodes: Mapping[str, NodeView], now: datetime) -> dict[str, Match]:
        """`match` for every node, keeping only those that show a fault (one tight loop)."""
        cache = self._cache
        get = cache.get
        remember = self._remember
        out: dict[str, Match] = {}
        earliest: datetime | None = None
        for name, node in nodes.items():
            entry = get(id(node))
            if entry is None or entry[0] is not node or not entry[1] <= now <= entry[2]:
                remember(node, now)
                entry = cache[id(node)]
            until = entry[2]
            if (earliest is None or until < earliest) and until - entry[1] < _FOREVER:
                earliest = until
            found = entry[3]
            if found is not None:
                out[name] = found
        self.next_change = None if earliest is None else earliest + _TICK
        return out

    def evaluate(self, node: NodeView, now: datetime) -> tuple[Match | None, datetime | None]:
        """`match` without the memory, and the last instant the answer holds (None: for as
        long as the node is unchanged; after it, a condition may have gone stale)."""
        return self._evaluate(node, now)

    def _remember(self, node: NodeView, now: datetime) -> Match | None:
        found, until = self._evaluate(node, now)
        cache = self._cache
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[id(node)] = (node, now, now + _FOREVER if until is None else until, found)
        return found

    def _evaluate(self, node: NodeView, now: datetime) -> tuple[Match | None, datetime | None]:
        """The answer, and until when it holds (a condition may go stale; None: ever)."""
        index = self._index
        by_type = index.by_type
        windows = index.windows
        best: Match | None = None
        until: datetime | None = None
        seen: set[str] | None = set() if index.missing else None
        for condition in node.conditions:
            if seen is not None:
                seen.add(condition.type)
            rules = by_type.get(condition.type)
            if rules is None:
                continue
            stale = False
            window = windows.get(condition.type)
            observed = condition.observed_at
            if window is not None and observed is not None:
                stale = now - observed > window[0]
                for each in window[1]:
                    # The instants this condition's answers change with time alone: its type's
                    # window (strong -> weak) and each rule's own staleAfter (a stale fault).
                    goes_stale = observed + each
                    if now <= goes_stale and (until is None or goes_stale < until):
                        until = goes_stale
            if observed is not None and condition.status == UNKNOWN:
                for rule in rules:
                    held = rule.match.positive_after
                    # A positiveAfter verdict turns from weak to strong with time alone.
                    if held is not None and now < observed + held:
                        turns = observed + held - _TICK
                        if until is None or turns < until:
                            until = turns
            for rule in rules:
                if best is not None and (
                    rule.severity > best.severity
                    or (rule.severity == best.severity and not best.weak)
                ):
                    break
                weak = _evidence(rule, condition, stale, now)
                if weak is not None:
                    best = Match(
                        rule.fault,
                        rule.severity,
                        condition,
                        weak,
                        rule.match,
                        stale,
                        observed,
                    )
        if seen is not None:
            for rule in index.missing:
                if rule.match.type in seen:
                    continue
                if best is None or rule.severity < best.severity:
                    best = Match(rule.fault, rule.severity, None, True, rule.match)
        return best, until


_Entry = tuple[NodeView, datetime, datetime, Match | None]
"""(node, computed at, valid until, answer): valid for any `now` between the two instants."""

_FOREVER = timedelta(days=365 * 100)
TICK = timedelta(microseconds=1)
"""An answer holds up to and including its `until`; it may differ from the next instant on."""
_TICK = TICK


@lru_cache(maxsize=128)
def _caches(faults: tuple[Fault, ...], only: str | None = None) -> dict[int, _Entry]:
    """One answer memory per set of faults (a policy edit starts a fresh one)."""
    return {}


def match(node: NodeView, faults: tuple[Fault, ...], now: datetime) -> Match | None:
    """The most severe of `faults` the node shows now (see `Matcher` for many nodes)."""
    return Matcher(faults).match(node, now)


def match_fault(
    node: NodeView, fault: Fault, now: datetime, faults: tuple[Fault, ...] | None = None
) -> Match | None:
    """Whether the node shows this one fault now (the re-check before a step).

    `faults`: the policy's faults, whose `staleAfter` rules set the freshness windows (a
    status/reason match on a condition the policy deems stale is weak even when the
    `staleAfter` rule belongs to another fault). None: `fault` alone.
    """
    if faults is None or fault not in faults:
        return Matcher((fault,)).match(node, now)
    return Matcher(faults, only=fault.name).match(node, now)


def still_unhealthy(
    node: NodeView,
    fault: Fault,
    severity: int,
    kind: str,
    status: str,
    now: datetime,
    faults: tuple[Fault, ...],
) -> Match | None:
    """The condition `kind` still in the fault status `status` that one of `fault`'s rules
    asserts, whatever its reason now (a sticky source lets the newest finding overwrite the
    reason: docs/decisions.md D58); Unknown status: weak. None: the condition shows another
    status (or `status` is no fault status of `fault`, as a staleAfter rule's is not).

    A condition that is no longer on the node comes back as a weak, `vanished` match."""
    rule = next(
        (m for m in fault.match if m.type == kind and m.status == status and status != UNKNOWN),
        None,
    )
    if rule is None:
        return None
    condition = next((c for c in node.conditions if c.type == kind), None)
    if condition is None:
        return Match(fault, severity, None, True, rule, vanished=True)
    if condition.status not in (status, UNKNOWN):
        return None
    windows = _index(faults).windows.get(kind)
    observed = condition.observed_at
    stale = windows is not None and observed is not None and now - observed > windows[0]
    weak = stale or condition.status == UNKNOWN
    return Match(fault, severity, condition, weak, rule, stale, observed)


def strong_at(found: Match | None) -> datetime | None:
    """When this weak match turns strong with time alone: a `positiveAfter` rule's Unknown
    status once it has held that long (None: it will not, or it is strong already)."""
    if found is None or not found.weak:
        return None
    held = found.rule.positive_after
    condition = found.condition
    if held is None or condition is None or condition.status != UNKNOWN:
        return None
    if condition.observed_at is None:
        return None
    return condition.observed_at + held


def describe(found: Match, now: datetime) -> str:
    """The evidence in a few words, naming the condition the rule looked at (for messages):
    `GPUProblem=True (XID79)`, `GPUProblem=True (XID79), weak evidence: not seen to change for
    16m`, `condition GPUProblem never reported`."""
    condition = found.condition
    if condition is None and found.vanished:
        return (
            f"condition {found.condition_type} no longer reported (its agent may have"
            " restarted), weak evidence"
        )
    if condition is None:
        return f"condition {found.condition_type} never reported (whenMissing: Fault)"
    text = f"{condition.type}={condition.status} ({condition.reason or 'no reason'})"
    if found.stale and condition.observed_at is not None:
        age = durations.format(
            timedelta(seconds=int((now - condition.observed_at).total_seconds()))
        )
        return f"{text}, weak evidence: not seen to change for {age}"
    held = found.rule.positive_after
    if found.weak and held is not None and condition.status == UNKNOWN:
        return f"{text}, weak evidence until it has held for {durations.format(held)}"
    if found.weak:
        return f"{text}, weak evidence"
    return text
