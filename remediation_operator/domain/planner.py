"""The planner: one pure function from (snapshot, policy, now) to what to do and when to look again.

It reads as a decision list per node (excluded? paused? fault present? tolerated long enough?
step done? budget? breaker? approval?) and returns effects to apply once, the status every
touched Remediation should show, and the exact time it next needs to be woken.

The state machine is derived from the Remediation's fields, not its phase (the phase is what
users read): no step yet, a step in flight (or between attempts), a step over, or probation.
Several transitions may happen in one plan (a zero `tolerate` and a cordon start together).
Counts that span the fleet (faults per breaker group, nodes per budget, recent step starts)
are computed once per plan; with a `FleetTally` kept by the caller, the per-node part of them
(which nodes show a fault, per-group health) is carried from plan to plan and only the nodes
that changed are matched again, so planning one focused node among 10,000 stays cheap.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import chain

from remediation_operator.domain import (
    breaker,
    budgets,
    durations,
    ladder,
    matching,
    ratelimit,
    remediation,
)
from remediation_operator.domain.effects import (
    Announce,
    Cordon,
    Effect,
    Evict,
    ProtectFromConsolidation,
    Release,
    Replace,
    RunExecutor,
    Severity,
)
from remediation_operator.domain.fleet import (
    EXCLUDE_LABEL,
    BreakerState,
    NodeView,
    Progress,
    Snapshot,
    StepObservation,
)
from remediation_operator.domain.policy import (
    DISRUPTIVE,
    Action,
    Budget,
    Fault,
    Mode,
    OnExhausted,
    Policy,
    ReplaceProvider,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    ObservedCondition,
    Outcome,
    Phase,
    RemediationState,
    StepRecord,
)


@dataclass(frozen=True)
class PolicySummary:
    """What the policy's status shows: counts, headroom, and the conditions' inputs."""

    observed: int
    """Nodes the policy selects."""
    unhealthy: int
    """Selected nodes on which a fault of the policy is present now (past their startup grace)."""
    in_flight: int
    """Nodes in a disruptive step (plus NotReady ones without a Remediation)."""
    headroom: Mapping[Action, int] = field(default_factory=dict)
    """How many more nodes each disruptive action may take now under the strictest budget.

    An action no active budget mentions is absent: it is unlimited."""
    circuit_open: tuple[str, ...] = ()
    """Groups whose breaker is open ("" when the policy has no groupBy)."""
    invalid_budgets: tuple[str, ...] = ()
    """One sentence per budget that could not be parsed (each allows zero: fail closed)."""
    paused: bool = False
    invalid_circuit_breaker: str | None = None
    """Why `circuitBreaker.maxUnhealthy` is unusable (it then trips on any fault), or None."""


@dataclass(frozen=True)
class Plan:
    effects: tuple[Effect, ...]
    remediations: tuple[RemediationState, ...]
    """New or changed Remediation states to write (created, advanced, finished)."""
    breakers: Mapping[str, BreakerState]
    summary: PolicySummary
    next_wake: datetime | None
    """The earliest deadline at which the plan could change without any new event."""
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    """By node: why each planned node is where it is now (for logs and tests)."""


RECHECK = timedelta(minutes=5)
"""A safety-net re-check for waits that end on an event (approval, budget freed, unpause)."""

UNRECORDED_GRACE = timedelta(seconds=60)
"""After a Remediation of a node ends, how long its node view may still show the quarantine
the ending released (our watch lags our writes); an unrecorded cordon is judged only after."""

IN_PLACE: frozenset[Action] = frozenset({Action.Drain, Action.GPUReset, Action.Reboot})
"""Disruptive steps that keep the node: Karpenter must not consolidate it meanwhile."""

_MAX_MOVES = 64
"""Transitions one node may take in one plan (a ladder is short; this only bounds a bug)."""


def plan(
    snapshot: Snapshot, policy: Policy, now: datetime, tally: FleetTally | None = None
) -> Plan:
    """Decide what to do for the snapshot's (focused) nodes at `now`; see the module docstring.

    `tally`: the caller's FleetTally for this policy and node source (None: count from scratch).
    The plan is the same either way."""
    return _Planner(snapshot, policy, now, tally).run()


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
    grace ends: a heap of those instants). Whatever it cannot vouch for (a different set of
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
        if found is None:
            wake = until
        else:
            self.matches[name] = found
            wake = until
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


def clock(moment: datetime, now: datetime) -> str:
    """`11:04:10Z`, with the date when it is not today's."""
    if moment.date() == now.date():
        return moment.strftime("%H:%M:%SZ")
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _protected(state: RemediationState) -> bool:
    return not state.dry_run and any(r.action in IN_PLACE for r in state.steps)


def _cordon_done(state: RemediationState) -> bool:
    return any(r.action is Action.Cordon and r.outcome is Outcome.Succeeded for r in state.steps)


def _step_outcome(state: RemediationState) -> Outcome:
    """How the finished current step ended; for a state written without `step_outcome`, from
    its last record (an attempt that had failed transiently then counts as interrupted, so the
    step runs again rather than being skipped)."""
    if state.step_outcome is not None:
        return state.step_outcome
    last = state.steps[-1].outcome if state.steps else None
    if last in (Outcome.Succeeded, Outcome.PermanentFailure):
        return last
    return Outcome.Cancelled


def _last_disruptive(state: RemediationState) -> Action | None:
    for record in reversed(state.steps):
        if record.action in DISRUPTIVE:
            return record.action
    return None


class _Planner:
    """One plan's working set: aggregates computed once, then a decision list per node."""

    def __init__(
        self, snapshot: Snapshot, policy: Policy, now: datetime, tally: FleetTally | None = None
    ) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.now = now
        self.dry_run = policy.mode is Mode.DryRun
        self.faults = {f.name: f for f in policy.faults}
        self.effects: list[Effect] = []
        self.changed: list[RemediationState] = []
        self.reasons: dict[str, Reason] = {}
        self.wakes: list[datetime] = []
        self.past: dict[str, list[RemediationState]] = defaultdict(list)
        """Finished Remediations by node: history, names taken, an admin's stop."""
        for finished in snapshot.finished:
            self.past[finished.node].append(finished)
        if tally is None:
            self._match_all()
        else:
            self._take_tally(tally)
        self._count_disruption()
        self._evolve_breakers()
        window = policy.rate
        self.rate: ratelimit.Window | None = None
        if window is not None:
            # A Remediation that finished before the window started no step inside it.
            cut = now - window.per
            recent = (s for s in snapshot.finished if s.finished_at is None or s.finished_at > cut)
            self.rate = ratelimit.Window(
                window, ratelimit.starts(chain(snapshot.active.values(), recent))
            )

    # ----------------------------------------------------------------- aggregates

    def _take_tally(self, tally: FleetTally) -> None:
        """`_match_all`'s results from the caller's tally, brought up to date first."""
        tally.refresh(self.snapshot, self.policy, self.now)
        config = self.policy.circuit_breaker
        self.matches = tally.matches
        self.starting = tally.starting
        self.health = tally.health(
            None if config is None else config.group_by, len(self.snapshot.nodes)
        )
        self.unhealthy = tally.unhealthy

    def _match_all(self) -> None:
        """Match every selected node once: the breaker and the counts need all of them."""
        now = self.now
        nodes = self.snapshot.nodes
        config = self.policy.circuit_breaker
        group_by = None if config is None else config.group_by
        self.matches = matching.Matcher(self.policy.faults).faulty(nodes, now)
        if group_by is None:
            totals = Counter({breaker.UNGROUPED: len(nodes)})
        else:
            totals = Counter(n.labels.get(group_by, breaker.UNGROUPED) for n in nodes.values())
        born_after = now - self.policy.startup_grace
        self.starting = set()
        unhealthy: Counter[str] = Counter()
        for name in self.matches:
            node = nodes[name]
            if node.created_at is not None and node.created_at > born_after:
                self.starting.add(name)
                continue
            unhealthy[breaker.group_of(node, config)] += 1
        self.health = {g: breaker.Health(total=totals[g], unhealthy=unhealthy[g]) for g in totals}
        self.unhealthy = sum(unhealthy.values())

    def _count_disruption(self) -> None:
        """Budgets count a node from its first disruptive step until its Remediation ends."""
        self.limits = budgets.limits(self.policy.budgets, len(self.snapshot.nodes), self.now)
        self.counted: dict[str, Action | None] = {}
        for name, state in self.snapshot.active.items():
            action = _last_disruptive(state)
            if action is not None:
                self.counted[name] = action
        for name in self.snapshot.not_ready_elsewhere:
            self.counted.setdefault(name, None)
        self.counts: dict[Budget, int] = defaultdict(int)
        for action in self.counted.values():
            self._tally(action, +1)
        # The small-pool exception's slot: the oldest active Remediation of each group (only
        # the breaker reads it; one pass, as this runs on every reconcile).
        self.slot: dict[str, str] = {}
        config = self.policy.circuit_breaker
        if config is None:
            return
        oldest: dict[str, tuple[datetime, str]] = {}
        for state in self.snapshot.active.values():
            node = self.snapshot.nodes.get(state.node)
            if node is None:
                continue
            group, key = breaker.group_of(node, config), (state.started_at, state.name)
            if group not in oldest or key < oldest[group]:
                oldest[group] = key
                self.slot[group] = state.node

    def _tally(self, action: Action | None, delta: int) -> None:
        """Count a node under every budget its action falls in (None: NotReady, all of them)."""
        for limit in self.limits:
            if action is None or action in limit.budget.actions:
                self.counts[limit.budget] += delta

    def _evolve_breakers(self) -> None:
        self.breakers: dict[str, BreakerState] = {}
        config = self.policy.circuit_breaker
        if config is None:
            return
        groups = sorted(set(self.health) | set(self.snapshot.breakers))
        for group in groups:
            previous = self.snapshot.breakers.get(group, BreakerState())
            health = self.health.get(group, breaker.Health())
            change = breaker.evolve(config, previous, health, self.now)
            self.breakers[group] = change.state
            closes = breaker.closes_at(config, change.state)
            if closes is not None:
                self.wakes.append(closes)
            if change.announce is None:
                continue
            label = f"group {group!r}" if group else "the policy's nodes"
            if change.announce is Reason.CircuitOpen:
                message = (
                    f"Circuit breaker opened for {label}: {health.unhealthy} of {health.total}"
                    f" nodes show a fault (more than {config.max_unhealthy}); no new"
                    " remediation starts until it closes."
                )
                severity = Severity.Warning
            else:
                message = (
                    f"Circuit breaker closed for {label}: {health.unhealthy} of {health.total}"
                    f" nodes show a fault, within {config.max_unhealthy} for"
                    f" {durations.format(config.cooldown)}; remediation resumes."
                )
                severity = Severity.Normal
            self.effects.append(Announce("", None, change.announce, message, severity, group=group))

    # ----------------------------------------------------------------- the plan

    def run(self) -> Plan:
        snapshot = self.snapshot
        focus = snapshot.focus
        if focus is None:
            active_names: Iterable[str] = snapshot.active
            detect_names: Iterable[str] = self.matches
        else:
            active_names = [n for n in focus if n in snapshot.active]
            detect_names = [n for n in focus if n in self.matches]
        ordered = sorted(
            (snapshot.active[n] for n in active_names), key=lambda s: (s.started_at, s.name)
        )
        for state in ordered:
            self._advance(state, snapshot.nodes.get(state.node))
        if self.policy.deleted:
            detect_names = ()  # a deleted policy opens nothing new
        fresh = sorted(
            (n for n in detect_names if n not in snapshot.active),
            key=lambda n: (self.matches[n].severity, n),
        )
        for name in fresh:
            self._detect(snapshot.nodes[name], self.matches[name])
        self._release_unrecorded(focus)
        if any(b.schedule is not None for b in self.policy.budgets):
            change = budgets.next_change(self.policy.budgets, self.now)
            if change is not None:
                self.wakes.append(change)
        next_wake = max(min(self.wakes), self.now) if self.wakes else None
        return Plan(
            effects=tuple(self.effects),
            remediations=tuple(self.changed),
            breakers=self.breakers,
            summary=self._summary(),
            next_wake=next_wake,
            reasons=self.reasons,
        )

    def _summary(self) -> PolicySummary:
        problems = [p for p in map(budgets.problem, self.policy.budgets) if p is not None]
        config = self.policy.circuit_breaker
        return PolicySummary(
            observed=len(self.snapshot.nodes),
            unhealthy=self.unhealthy,
            in_flight=len(self.counted),
            headroom=budgets.headroom(self.limits, self.counts),
            circuit_open=tuple(g for g, s in self.breakers.items() if s.open),
            invalid_budgets=tuple(problems),
            paused=self.policy.is_paused,
            invalid_circuit_breaker=None if config is None else breaker.problem(config),
        )

    def _announce(
        self,
        state: RemediationState,
        reason: Reason,
        message: str,
        severity: Severity = Severity.Normal,
        action: Action | None = None,
    ) -> None:
        self.effects.append(Announce(state.node, state.name, reason, message, severity, action))

    def _mutate(self, effect: Effect) -> None:
        """A mutating effect: applied in Enforce, only ever announced in DryRun."""
        if not self.dry_run:
            self.effects.append(effect)

    def _finish(self, state: RemediationState) -> None:
        self.reasons[state.node] = state.reason
        if state.next_check_at is not None and not state.terminal:
            self.wakes.append(state.next_check_at)
        if state != self.snapshot.active.get(state.node):
            self.changed.append(state)
        if state.terminal and state.node in self.counted:
            self._tally(self.counted.pop(state.node), -1)

    # ----------------------------------------------------------------- new incidents

    def _detect(self, node: NodeView, found: matching.Match) -> None:
        policy, now = self.policy, self.now
        if node.name in self.starting:
            assert node.created_at is not None
            self.reasons[node.name] = Reason.NodeStarting
            self.wakes.append(node.created_at + policy.startup_grace)
            return
        if node.excluded:
            self.reasons[node.name] = Reason.NodeExcluded
            return
        if policy.is_paused:
            self.reasons[node.name] = Reason.Paused
            return
        if self._admin_said_stop(node.name, found):
            self.reasons[node.name] = Reason.AdminUncordoned
            return
        config = policy.circuit_breaker
        if config is not None:
            group = breaker.group_of(node, config)
            group_state = self.breakers.get(group, BreakerState())
            holds = self.slot.get(group, node.name) == node.name
            if breaker.blocks(config, group_state, self.health[group], holds) is not None:
                self.reasons[node.name] = Reason.CircuitOpen
                return
            self.slot.setdefault(group, node.name)
        condition = found.condition
        observed = None
        if condition is not None:
            observed = ObservedCondition(
                condition.type,
                condition.status,
                condition.reason,
                condition.message,
                condition.last_transition_time,
                condition.last_heartbeat_time,
            )
        fault = found.fault
        history = self._history(node.name)
        taken = {s.name for s in self.past.get(node.name, ())}
        name = remediation.name_for(node.name, now, taken)
        evidence = (
            f"{condition.type}={condition.status} ({condition.reason or 'no reason'})"
            if condition is not None
            else f"condition {fault.match[0].type} missing"
        )
        if found.weak and condition is not None:
            evidence += ", weak evidence"
        message = f"Fault {fault.name} detected: {evidence}."
        state = RemediationState(
            name=name,
            node=node.name,
            policy=policy.name,
            fault=fault.name,
            phase=Phase.Pending,
            reason=Reason.Tolerating,
            message=message,
            started_at=now,
            condition=observed,
            dry_run=self.dry_run,
            repeat_offender=history is not None,
        )
        self._announce(state, Reason.FaultDetected, message)
        if node.quarantined and node.quarantined_by == policy.name and not node.unschedulable:
            # Our taint goes on only with our cordon, so a schedulable node carrying it was
            # uncordoned after a cordon of ours that no Remediation recorded (D14). The
            # administrator's uncordon stands (D12); recording the incident as cancelled keeps
            # `_admin_said_stop` from reopening it until the fault changes.
            self._close(
                state,
                Phase.Cancelled,
                Reason.AdminUncordoned,
                "An administrator uncordoned the node after a cordon of ours that no"
                " Remediation had recorded yet; this incident is cancelled and the node is left"
                " alone.",
                release=not self.dry_run,
                uncordon=False,
            )
            return
        if history is not None:
            self._announce(state, Reason.RepeatOffender, history, Severity.Warning)
        self._finish(self._progress(state, node, fault, found))

    def _marked_ours(self, node: NodeView | None) -> bool:
        """The node itself says our cordon made it unschedulable (k8s annotations written in
        the cordon's own patch; docs/decisions.md D14)."""
        return (
            node is not None
            and node.uncordon_on_release
            and node.quarantined_by == self.policy.name
        )

    def _release_unrecorded(self, focus: frozenset[str] | None) -> None:
        """Give back a node whose cordon by this policy no Remediation records.

        The engine cordons before it writes the Remediation (D14); if the operator stopped in
        between and the fault has cleared since, nothing else would ever undo that cordon. A
        node that still shows a fault keeps its quarantine: `_detect` opened (or will open, once
        a pause, breaker or grace period allows) the Remediation that owns it.
        """
        if self.dry_run:
            return
        nodes = self.snapshot.nodes
        names = nodes if focus is None else [n for n in focus if n in nodes]
        for name in names:
            node = nodes[name]
            if node.quarantined_by != self.policy.name or name in self.snapshot.active:
                continue
            if name in self.matches and not self.policy.deleted:
                continue
            if any(s.node == name for s in self.changed):
                continue
            settled = self._settled_at(name)
            if settled is not None and settled > self.now:
                self.wakes.append(settled)
                continue
            uncordon = node.uncordon_on_release and node.unschedulable
            self._mutate(Release(name, uncordon=uncordon))
            message = (
                f"Node {name} carried a cordon of policy {self.policy.name} that no Remediation"
                " records (the operator stopped between the cordon and its record) and shows no"
                f" fault; our taint is removed{' and the node uncordoned' if uncordon else ''}."
            )
            self.effects.append(
                Announce(name, None, Reason.UnrecordedCordonReleased, message, Severity.Normal)
            )
            self.reasons[name] = Reason.UnrecordedCordonReleased

    def _settled_at(self, node: str) -> datetime | None:
        """Until when the node's view may still predate the release that ended its last
        Remediation (the watch lags our own writes): no unrecorded cordon is judged before."""
        ended = [s.finished_at for s in self.past.get(node, ()) if s.finished_at is not None]
        return max(ended) + UNRECORDED_GRACE if ended else None

    def _admin_said_stop(self, node: str, found: matching.Match) -> bool:
        """An administrator uncordoned this node mid-incident and the fault has not changed since.

        Opening a new incident at once would cordon the node again: fighting the admin. A new
        one opens only when the matching condition transitions after the cancellation (the
        fault cleared and came back, or changed), which its lastTransitionTime shows.
        """
        condition = found.condition
        changed_at = None if condition is None else condition.last_transition_time
        for state in self.past.get(node, ()):
            if (
                state.reason is Reason.AdminUncordoned
                and state.fault == found.fault.name
                and state.finished_at is not None
                and (changed_at is None or changed_at <= state.finished_at)
            ):
                return True
        return False

    def _history(self, node: str) -> str | None:
        """Why this new episode is a repeat offender, or None."""
        history = self.policy.history
        if history is None:
            return None
        since = self.now - history.window
        episodes = sum(1 for s in self.past.get(node, ()) if s.steps and s.started_at >= since)
        if episodes < history.max_episodes:
            return None
        return (
            f"Node had {episodes} incidents in the last {durations.format(history.window)};"
            f" after the cordon the ladder skips ahead to {history.then}."
        )

    # ----------------------------------------------------------------- open incidents

    def _advance(self, state: RemediationState, node: NodeView | None) -> None:
        now = self.now
        if node is None:
            if state.step is Action.Replace and state.step_started_at is not None:
                self._close(
                    state,
                    Phase.Succeeded,
                    Reason.NodeReplaced,
                    "The node is gone; the incident is closed.",
                    release=False,
                )
            else:
                self._close(
                    state,
                    Phase.Cancelled,
                    Reason.NodeDeleted,
                    "The node was deleted (or is no longer selected) before the incident ended.",
                    release=False,
                )
            return
        if self.policy.deleted:
            self._close(
                state,
                Phase.Cancelled,
                Reason.PolicyDeleted,
                f"RemediationPolicy {self.policy.name} was deleted; the incident is closed and"
                " the node is given back (our taint removed, uncordoned if we cordoned it).",
                release=not state.dry_run,
            )
            return
        fault = self.faults.get(state.fault)
        if fault is None:
            self._close(
                state,
                Phase.Cancelled,
                Reason.FaultRemoved,
                f"The policy no longer"
                f" defines fault {state.fault}; the node is returned to service.",
                release=True,
            )
            return
        # Our cordon writes spec.unschedulable and our taint together, so our taint on a node
        # that is schedulable means someone uncordoned it after us, even if we had not yet
        # recorded the cordon as done.
        cordoned = _cordon_done(state) or (state.step is Action.Cordon and node.quarantined)
        if cordoned and not state.dry_run and not node.unschedulable:
            self._close(
                state,
                Phase.Cancelled,
                Reason.AdminUncordoned,
                "An administrator"
                " uncordoned the node; this incident is cancelled and the node is left"
                " alone.",
                release=True,
                uncordon=False,
            )
            return
        if state.dry_run and not self.dry_run:
            self._close(
                state,
                Phase.Cancelled,
                Reason.ModeChanged,
                "The policy now enforces; this DryRun incident is closed and a real one opens.",
                release=False,
            )
            self.wakes.append(now)  # detect again at once, under the new mode
            return
        if node.excluded or self.policy.is_paused or self.dry_run != state.dry_run:
            self._hold(state, node)
            return
        found = self.matches.get(node.name)
        if found is None or found.fault.name != fault.name:
            found = matching.match_fault(node, fault, now)
        self._finish(self._progress(state, node, fault, found))

    def _hold(self, state: RemediationState, node: NodeView) -> None:
        """Paused policy, excluded node, or an Enforce incident under a policy now in DryRun:
        stay where we are, undo nothing, start nothing."""
        if node.excluded:
            reason = Reason.NodeExcluded
            why = f"the node is labelled {EXCLUDE_LABEL}=true"
        elif not self.policy.is_paused:
            reason = Reason.DryRun
            why = "the policy switched to DryRun after this incident began"
        else:
            reason = Reason.Paused
            why = "the policy is paused"
        step = f"after step {state.step}" if state.step is not None else "before its first step"
        message = (
            f"Held {step} because {why}; nothing is undone and nothing new starts until that"
            " changes."
        )
        held = replace(
            state,
            phase=Phase.Blocked,
            reason=reason,
            message=message,
            next_check_at=self._fallback(state, reason),
        )
        if state.reason is not reason:
            self._announce(held, reason, message)
        self._finish(held)

    def _close(
        self,
        state: RemediationState,
        phase: Phase,
        reason: Reason,
        message: str,
        *,
        release: bool,
        uncordon: bool | None = None,
    ) -> None:
        """End the incident; `release` gives the node back (taint off, maybe uncordon)."""
        closed = self._ended(state, phase, reason, message)
        if release:
            self._release(closed, state.cordoned_by_us if uncordon is None else uncordon)
        severity = Severity.Normal if phase is Phase.Succeeded else Severity.Warning
        self._announce(closed, reason, message, severity)
        self._finish(closed)

    def _ended(
        self, state: RemediationState, phase: Phase, reason: Reason, message: str
    ) -> RemediationState:
        """The terminal state; a step still open ends Succeeded (the node was replaced, which
        is what Replace does) or Cancelled (abandoned)."""
        steps = state.steps
        outcome = state.step_outcome
        finished_at = state.step_finished_at
        if steps and steps[-1].outcome is None:
            replaced = reason is Reason.NodeReplaced and steps[-1].action is Action.Replace
            outcome = Outcome.Succeeded if replaced else Outcome.Cancelled
            finished_at = self.now
            closed = replace(steps[-1], finished_at=self.now, outcome=outcome, reason=reason)
            steps = (*steps[:-1], closed)
        return replace(
            state,
            phase=phase,
            reason=reason,
            message=message,
            finished_at=self.now,
            next_check_at=None,
            step_outcome=outcome,
            step_finished_at=finished_at,
            steps=steps,
        )

    def _release(self, state: RemediationState, uncordon: bool) -> None:
        node = state.node
        ours = state.cordoned_by_us or self._marked_ours(self.snapshot.nodes.get(node))
        self._mutate(Release(node, uncordon=uncordon and ours))
        if _protected(state):
            self._mutate(ProtectFromConsolidation(node, on=False))

    def _fallback(self, state: RemediationState, reason: Reason) -> datetime:
        """A safety-net re-check, stable while the state keeps showing `reason`."""
        if (
            state.reason is reason
            and state.next_check_at is not None
            and state.next_check_at > self.now
        ):
            return state.next_check_at
        return self.now + RECHECK

    # ----------------------------------------------------------------- the ladder

    def _progress(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        found: matching.Match | None,
    ) -> RemediationState:
        """Take every transition due now; return the state the incident rests in."""
        for _ in range(_MAX_MOVES):
            moved, done = self._move(state, node, fault, found)
            if done:
                return moved
            state = moved
        raise AssertionError(f"{state.name}: the ladder did not settle in {_MAX_MOVES} moves")

    def _move(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        found: matching.Match | None,
    ) -> tuple[RemediationState, bool]:
        now = self.now
        if state.healthy_since is not None:
            return self._probation(state, found)
        if state.step_index is None:
            if found is None:
                message = (
                    f"Fault {fault.name} cleared within its tolerate window; nothing was done."
                )
                ended = self._ended(state, Phase.Cancelled, Reason.FaultGone, message)
                self._announce(ended, Reason.FaultGone, message)
                return ended, True
            tolerated = state.started_at + fault.tolerate
            if now < tolerated:
                message = (
                    f"Fault {fault.name} present; tolerating it until {clock(tolerated, now)}"
                    " before the first step."
                )
                return replace(
                    state,
                    phase=Phase.Pending,
                    reason=Reason.Tolerating,
                    message=message,
                    next_check_at=tolerated,
                ), True
            skip = self._skip(state)
            first = ladder.first(fault.ladder, skip)
            if first is None:
                return self._exhausted(state, fault), True
            return self._start(state, node, fault, found, first, escalating=False)
        if state.step_finished_at is None:
            return self._in_flight(state, node, fault, found)
        return self._after_step(state, node, fault, found)

    def _skip(self, state: RemediationState) -> Action | None:
        history = self.policy.history
        return history.then if state.repeat_offender and history is not None else None

    def _probation(
        self, state: RemediationState, found: matching.Match | None
    ) -> tuple[RemediationState, bool]:
        now = self.now
        assert state.healthy_since is not None
        if found is not None:
            message = (
                f"Fault {state.fault} returned during probation; the ladder resumes after"
                f" step {state.step}."
            )
            self._announce(state, Reason.FaultReturned, message, Severity.Warning)
            return replace(
                state, healthy_since=None, reason=Reason.FaultReturned, message=message
            ), False
        ends = state.healthy_since + self.policy.recovery.healthy_for
        if now >= ends:
            uncordon = " and uncordoned" if state.cordoned_by_us else ""
            message = (
                f"Fault {state.fault} stayed absent for"
                f" {durations.format(self.policy.recovery.healthy_for)}; the node is back in"
                f" service (our taint removed{uncordon})."
            )
            recovered = self._ended(state, Phase.Succeeded, Reason.Recovered, message)
            self._release(recovered, uncordon=True)
            self._announce(recovered, Reason.Recovered, message)
            return recovered, True
        message = (
            f"Fault {state.fault} absent since {clock(state.healthy_since, now)}; the node"
            f" returns to service at {clock(ends, now)} if it stays absent."
        )
        return replace(
            state,
            phase=Phase.Recovering,
            reason=Reason.FaultCleared,
            message=message,
            next_check_at=ends,
        ), True

    def _recovering(self, state: RemediationState) -> tuple[RemediationState, bool]:
        """The fault is absent after a step: begin probation."""
        message = f"Fault {state.fault} is absent; probation begins."
        self._announce(state, Reason.FaultCleared, message)
        return replace(
            state, healthy_since=self.now, reason=Reason.FaultCleared, message=message
        ), False

    def _exhausted(self, state: RemediationState, fault: Fault) -> RemediationState:
        if fault.on_exhausted is OnExhausted.Fail:
            message = (
                f"Every step of the {fault.name} ladder ran and the fault remains; the node is"
                " left cordoned for a human."
            )
            failed = self._ended(state, Phase.Failed, Reason.LadderExhausted, message)
            self._announce(failed, Reason.LadderExhausted, message, Severity.Warning)
            return failed
        message = (
            f"Every step of the {fault.name} ladder ran and the fault remains; the node stays"
            " quarantined until the fault clears."
        )
        held = replace(
            state,
            phase=Phase.Waiting,
            reason=Reason.LadderExhausted,
            message=message,
            next_check_at=self._fallback(state, Reason.LadderExhausted),
        )
        if state.reason is not Reason.LadderExhausted:
            self._announce(held, Reason.LadderExhausted, message, Severity.Warning)
        return held

    def _blocked(
        self,
        state: RemediationState,
        action: Action,
        reason: Reason,
        why: str,
        until: datetime | None = None,
    ) -> tuple[RemediationState, bool]:
        """The next step is due but may not start; say why and until when."""
        at = until if until is not None and until > self.now else self._fallback(state, reason)
        when = (
            f"next check at {clock(at, self.now)}"
            if until is None
            else (f"retrying at {clock(at, self.now)}")
        )
        message = f"{action} is due but {why}; {when}."
        blocked = replace(
            state, phase=Phase.Blocked, reason=reason, message=message, next_check_at=at
        )
        if state.reason is not reason or state.phase is not Phase.Blocked:
            self._announce(blocked, reason, message, action=action)
        return blocked, True

    def _start(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        found: matching.Match | None,
        index: int,
        *,
        escalating: bool,
    ) -> tuple[RemediationState, bool]:
        """Start step `index` if nothing holds it back (fault present is checked by callers)."""
        policy, now = self.policy, self.now
        step = fault.ladder[index]
        action = step.action
        config = policy.circuit_breaker
        if config is not None:
            group = breaker.group_of(node, config)
            group_state = self.breakers.get(group, BreakerState())
            holds = self.slot.get(group, node.name) == node.name
            reason = breaker.blocks(config, group_state, self.health[group], holds)
            if reason is not None:
                label = f"group {group!r}" if group else "the policy's nodes"
                if reason is Reason.CircuitCooldown:
                    why = f"the circuit breaker for {label} is cooling down"
                elif breaker.small(config, self.health[group]):
                    why = f"{label} is a small pool over its unhealthy limit: one node at a time"
                else:
                    why = f"the circuit breaker for {label} is open"
                return self._blocked(
                    state, action, reason, why, breaker.closes_at(config, group_state)
                )
        disruptive = action in DISRUPTIVE
        if disruptive and (found is None or found.weak):
            return self._blocked(
                state,
                action,
                Reason.EvidenceInsufficient,
                "the only"
                " evidence is a stale heartbeat or an Unknown status, which"
                " may cordon but never disrupt",
            )
        if action in policy.require_approval and action not in self.snapshot.approvals.get(
            node.name, frozenset()
        ):
            return self._blocked(
                state,
                action,
                Reason.AwaitingApproval,
                f"it needs approval (annotate the Remediation to approve {action})",
            )
        if disruptive:
            mine = node.name in self.counted
            if mine:  # the node moves from one disruptive step to the next: not one more
                self._tally(self.counted[node.name], -1)
            limit = budgets.blocking(self.limits, action, self.counts)
            if mine:
                self._tally(self.counted[node.name], +1)
            if limit is not None:
                if limit.invalid is not None:
                    return self._blocked(state, action, Reason.BudgetInvalid, limit.invalid)
                return self._blocked(
                    state,
                    action,
                    Reason.BudgetExhausted,
                    f"its budget (nodes={limit.budget.nodes}, {limit.nodes} at once) is used up",
                )
            if self.rate is not None and not self.rate.has_room(now):
                rate = self.rate.rate
                return self._blocked(
                    state,
                    action,
                    Reason.RateLimited,
                    f"{rate.max}"
                    f" disruptive steps already started in the last"
                    f" {durations.format(rate.per)}",
                    self.rate.room_at(now),
                )
        return self._begin(state, node, fault, index, attempt=1, escalating=escalating)

    def _begin(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        index: int,
        *,
        attempt: int,
        escalating: bool,
    ) -> tuple[RemediationState, bool]:
        """Start attempt `attempt` of step `index`: record it and emit its effect."""
        now = self.now
        step = fault.ladder[index]
        action = step.action
        name = node.name
        cordoned_by_us = state.cordoned_by_us
        already = False
        if action is Action.Cordon:
            # The node's own mark counts: our cordon may have been written before a crash
            # kept its Remediation from recording it (D14).
            cordoned_by_us = (
                state.cordoned_by_us
                or (not node.unschedulable and not self.dry_run)
                or self._marked_ours(node)
            )
            already = node.unschedulable and not cordoned_by_us
            self._mutate(Cordon(name))
        elif action is Action.Drain:
            self._mutate(Evict(name))
        elif action is Action.Replace:
            self._mutate(Replace(name, self.policy.actions.replace))
        else:
            self._mutate(RunExecutor(name, state.name, action, attempt))
        if action in IN_PLACE and not any(r.action in IN_PLACE for r in state.steps):
            self._mutate(ProtectFromConsolidation(name, on=True))
        if action in DISRUPTIVE:
            if name in self.counted:
                self._tally(self.counted[name], -1)
            self.counted[name] = action
            self._tally(action, +1)
            if attempt == 1 and self.rate is not None:
                self.rate.record(now)
        first_started = now if attempt == 1 else state.step_started_at
        assert first_started is not None
        position = f"step {index + 1} of {len(fault.ladder)}, attempt {attempt}"
        boot = node.boot_id if action is Action.Reboot else state.boot_id_at_step_start
        if self.dry_run:
            message = (
                f"DryRun: would start {action} ({position}); nothing was changed and the step"
                " counts as done."
            )
            record = StepRecord(
                action, attempt, now, Reason.DryRun, message, now, Outcome.Succeeded
            )
            started = replace(
                state,
                phase=Phase.Waiting,
                reason=Reason.DryRun,
                message=message,
                step_index=index,
                step=action,
                attempt=attempt,
                step_started_at=first_started,
                step_finished_at=now,
                step_outcome=Outcome.Succeeded,
                steps=(*state.steps, record),
                boot_id_at_step_start=boot,
            )
            self._announce(started, Reason.DryRun, message, action=action)
            return started, False
        limit = ladder.deadline(step, first_started)
        check = now + ladder.pace(now, now)
        check = check if limit is None else min(check, limit)
        verb = "Escalating to" if escalating else "Started"
        message = f"{verb} {action} ({position}); {self._waits(action, check, limit)}."
        record = StepRecord(action, attempt, now, Reason.StepStarted, message)
        started = replace(
            state,
            phase=Phase.Running,
            reason=Reason.StepStarted,
            message=message,
            step_index=index,
            step=action,
            attempt=attempt,
            step_started_at=first_started,
            step_finished_at=None,
            step_outcome=None,
            steps=(*state.steps, record),
            boot_id_at_step_start=boot,
            cordoned_by_us=cordoned_by_us,
            next_check_at=check,
        )
        self._announce(started, Reason.StepStarted, message, action=action)
        if already:
            self._announce(
                started,
                Reason.AlreadyCordoned,
                "The node was already cordoned by"
                " someone else; it will not be uncordoned when the incident ends.",
            )
        return started, True

    def _waits(self, action: Action, check: datetime, limit: datetime | None) -> str:
        now = self.now
        timeout = "" if limit is None else f", timeout at {clock(limit, now)}"
        return f"next check at {clock(check, now)}{timeout}"

    def _in_flight(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        found: matching.Match | None,
    ) -> tuple[RemediationState, bool]:
        """A step has started and not finished: observe it, retry it, time it out."""
        now = self.now
        index = state.step_index
        assert index is not None
        assert state.step is not None
        assert state.steps
        in_policy = index < len(fault.ladder) and fault.ladder[index].action is state.step
        step = fault.ladder[index] if in_policy else Step(state.step)
        record = state.steps[-1]
        first_started = state.step_started_at or record.started_at
        limit = ladder.deadline(step, first_started)
        forced = record.reason is Reason.DrainForced
        if forced:
            limit = ladder.deadline(step, record.started_at)
        if record.outcome is Outcome.TransientFailure:
            return self._between_attempts(state, node, fault, found, step, limit)
        if found is None and step.action is Action.Drain:
            # Nothing left to move work away from: stop evicting, begin probation.
            return self._end_step(
                state,
                Outcome.Cancelled,
                Reason.FaultGone,
                "Fault cleared during the drain; the drain was stopped.",
            ), False
        obs = self.snapshot.observations.get(node.name)
        if obs is not None and (obs.action is not state.step or obs.attempt != state.attempt):
            obs = None
        outcome = self._observe(state, node, obs)
        detail = obs.message if obs is not None and obs.message else ""
        if outcome is Outcome.Succeeded:
            if step.action is Action.Replace:
                message = "The node's replacement was handed off and the node is gone."
                closed = self._ended(state, Phase.Succeeded, Reason.NodeReplaced, message)
                self._announce(closed, Reason.NodeReplaced, message)
                return closed, True
            message = f"{step.action} succeeded{': ' + detail if detail else ''}."
            self._announce(state, Reason.StepSucceeded, message, action=step.action)
            return self._end_step(state, Outcome.Succeeded, Reason.StepSucceeded, message), False
        if outcome is not None:
            move = ladder.after(step, state.attempt, outcome)
            what = detail or "the executor reported a failure"
            if move.move is ladder.Move.Retry:
                message = f"{step.action} attempt {state.attempt} failed: {what}."
                self._announce(state, Reason.StepRetrying, message, Severity.Warning, step.action)
                finished = replace(
                    record,
                    finished_at=now,
                    outcome=move.outcome,
                    reason=move.reason,
                    message=message,
                )
                return replace(state, steps=(*state.steps[:-1], finished)), False
            message = f"{step.action} failed for good (attempt {state.attempt}): {what}."
            self._announce(state, Reason.StepFailed, message, Severity.Warning, step.action)
            return self._end_step(state, move.outcome, move.reason, message), False
        if limit is not None and now >= limit:
            move = ladder.timed_out(step, forced)
            if move.move is ladder.Move.Force:
                return self._force(state, step, record), True
            took = durations.format(step.timeout or timedelta(0))
            message = f"{step.action} did not complete within {took}; escalating."
            self._announce(state, Reason.StepTimedOut, message, Severity.Warning, step.action)
            return self._end_step(state, move.outcome, move.reason, message), False
        return self._still_running(state, node, step, record, obs, limit), True

    def _between_attempts(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        found: matching.Match | None,
        step: Step,
        limit: datetime | None,
    ) -> tuple[RemediationState, bool]:
        now = self.now
        record = state.steps[-1]
        if found is None:
            return self._end_step(
                state,
                Outcome.Cancelled,
                Reason.FaultGone,
                f"Fault cleared before {step.action} was retried; not retried.",
            ), False
        if limit is not None and now >= limit:
            message = f"{step.action} did not succeed before its timeout; escalating."
            self._announce(state, Reason.StepTimedOut, message, Severity.Warning, step.action)
            return self._end_step(
                state, Outcome.PermanentFailure, Reason.StepTimedOut, message
            ), False
        assert record.finished_at is not None
        assert state.step_started_at is not None
        at = ladder.retry_at(step, record.attempt, record.finished_at, state.step_started_at)
        if now >= at:
            if step.action in DISRUPTIVE and found.weak:
                return self._blocked(
                    state,
                    step.action,
                    Reason.EvidenceInsufficient,
                    "the"
                    " only evidence left is a stale heartbeat or an Unknown"
                    " status, which may cordon but never disrupt",
                )
            assert state.step_index is not None
            return self._begin(
                state, node, fault, state.step_index, attempt=record.attempt + 1, escalating=False
            )
        message = (
            f"{step.action} attempt {record.attempt} failed; retrying at {clock(at, now)}"
            f"{'' if limit is None else ', timeout at ' + clock(limit, now)}."
        )
        return replace(
            state,
            phase=Phase.Running,
            reason=Reason.StepRetrying,
            message=message,
            next_check_at=at,
        ), True

    def _force(self, state: RemediationState, step: Step, record: StepRecord) -> RemediationState:
        """The drain timed out under `onTimeout: Force`: delete the remaining pods, once."""
        now = self.now
        self._mutate(Evict(state.node, force=True))
        attempt = state.attempt + 1
        check = now + ladder.pace(now, now)
        limit = ladder.deadline(step, now)
        message = (
            f"Drain timed out; the remaining pods are being deleted (forced);"
            f" {self._waits(step.action, check if limit is None else min(check, limit), limit)}."
        )
        timed_out = replace(
            record, finished_at=now, outcome=Outcome.PermanentFailure, reason=Reason.StepTimedOut
        )
        forced = StepRecord(step.action, attempt, now, Reason.DrainForced, message)
        updated = replace(
            state,
            phase=Phase.Running,
            reason=Reason.DrainForced,
            message=message,
            attempt=attempt,
            steps=(*state.steps[:-1], timed_out, forced),
            next_check_at=check if limit is None else min(check, limit),
        )
        self._announce(updated, Reason.DrainForced, message, Severity.Warning, step.action)
        return updated

    def _observe(
        self, state: RemediationState, node: NodeView, obs: StepObservation | None
    ) -> Outcome | None:
        """The step's outcome as observed now, or None while it is still going."""
        action = state.step
        if action is Action.Cordon:
            return Outcome.Succeeded if node.unschedulable and node.quarantined else None
        if (
            action is Action.Reboot
            and node.ready
            and node.boot_id != (state.boot_id_at_step_start or "")
        ):
            return Outcome.Succeeded
        if obs is None:
            return None
        if obs.progress is Progress.Failed:
            return Outcome.PermanentFailure if obs.permanent else Outcome.TransientFailure
        if obs.progress is Progress.Succeeded and action is not Action.Reboot:
            return Outcome.Succeeded
        return None

    def _still_running(
        self,
        state: RemediationState,
        node: NodeView,
        step: Step,
        record: StepRecord,
        obs: StepObservation | None,
        limit: datetime | None,
    ) -> RemediationState:
        """Nothing finished yet: re-issue the (idempotent) effect when a check is due."""
        now = self.now
        action = step.action
        check = state.next_check_at
        if check is not None and now < check:
            if state.phase is Phase.Running and self._same_wait(state, obs):
                return state  # replanned before anything changed: nothing to write
        else:
            started = obs is not None and obs.progress is not Progress.Absent
            if action is Action.Cordon:
                self._mutate(Cordon(node.name))
            elif action is Action.Drain:
                self._mutate(Evict(node.name, force=record.reason is Reason.DrainForced))
            elif not started and action is Action.Replace:
                self._mutate(Replace(node.name, self.policy.actions.replace))
            elif not started and action in (Action.GPUReset, Action.Reboot):
                self._mutate(RunExecutor(node.name, state.name, action, state.attempt))
            check = now + ladder.pace(record.started_at, now)
            if limit is not None:
                check = min(check, limit)
        reason = state.reason
        timeout = "" if limit is None else f", timeout at {clock(limit, now)}"
        waits = f"next check at {clock(check, now)}{timeout}"
        message = state.message
        if action is Action.Drain and obs is not None and obs.blocked_by_pdb:
            reason = Reason.DrainBlockedByPDB
            message = (
                f"Drain blocked by PodDisruptionBudget; retrying at {clock(check, now)}{timeout}."
            )
        elif action is Action.Drain:
            reason = record.reason if record.reason is Reason.DrainForced else Reason.StepStarted
            message = f"Draining the node (attempt {state.attempt}); {waits}."
        elif action is Action.Reboot and obs is not None and obs.progress is not Progress.Absent:
            reason = Reason.WaitingForReboot
            message = f"Reboot requested; waiting for a new bootID and Ready=True; {waits}."
        elif action is Action.Replace and obs is not None and obs.progress is Progress.InProgress:
            provider = self.policy.actions.replace
            if provider is ReplaceProvider.Karpenter:
                reason = Reason.NodeClaimDeleted
                message = f"NodeClaim deleted; waiting for Karpenter to remove the node; {waits}."
            elif provider is ReplaceProvider.Manual:
                reason = Reason.ManualReplaceRequested
                message = f"Waiting for a human to replace the node; {waits}."
            else:
                message = f"Node deletion requested; waiting for it to go; {waits}."
        else:
            message = f"Waiting for {action} (attempt {state.attempt}) to complete; {waits}."
        updated = replace(
            state, phase=Phase.Running, reason=reason, message=message, next_check_at=check
        )
        if reason is not state.reason and reason is not Reason.StepStarted:
            self._announce(updated, reason, message, action=action)
        return updated

    def _same_wait(self, state: RemediationState, obs: StepObservation | None) -> bool:
        """Whether what we observe still supports the reason the running step shows."""
        blocked = obs is not None and obs.blocked_by_pdb
        if state.step is Action.Drain:
            return blocked == (state.reason is Reason.DrainBlockedByPDB)
        acknowledged = obs is not None and obs.progress is not Progress.Absent
        if state.step is Action.Reboot:
            return acknowledged == (state.reason is Reason.WaitingForReboot)
        if state.step is Action.Replace:
            return (
                acknowledged
                == (state.reason in (Reason.NodeClaimDeleted, Reason.ManualReplaceRequested))
                or self.policy.actions.replace is ReplaceProvider.DeleteNode
            )
        return True

    def _end_step(
        self, state: RemediationState, outcome: Outcome, reason: Reason, message: str
    ) -> RemediationState:
        """Close the current step with `outcome` (the next move decides the phase)."""
        now = self.now
        record = state.steps[-1]
        if record.outcome is None:
            record = replace(
                record, finished_at=now, outcome=outcome, reason=reason, message=message
            )
        return replace(
            state,
            reason=reason,
            message=message,
            step_finished_at=now,
            step_outcome=outcome,
            steps=(*state.steps[:-1], record),
        )

    def _after_step(
        self,
        state: RemediationState,
        node: NodeView,
        fault: Fault,
        found: matching.Match | None,
    ) -> tuple[RemediationState, bool]:
        """The current step is over: probation, wait to escalate, or the next step."""
        now = self.now
        if found is None:
            return self._recovering(state)
        index = state.step_index
        assert index is not None
        assert state.step_finished_at is not None
        if index >= len(fault.ladder):
            return self._exhausted(state, fault), True
        outcome = _step_outcome(state)
        if outcome is Outcome.Cancelled:
            # Interrupted (the fault had cleared): the same step again, from its first attempt.
            return self._start(state, node, fault, found, index, escalating=False)
        step = fault.ladder[index]
        if outcome is Outcome.Succeeded:
            if state.step is Action.Replace:
                message = (
                    "DryRun: the node would have been handed off for replacement; holding"
                    " until the fault clears."
                )
                return replace(
                    state,
                    phase=Phase.Waiting,
                    reason=Reason.DryRun,
                    message=message,
                    next_check_at=self._fallback(state, Reason.DryRun),
                ), True
            due = state.step_finished_at + step.escalate_after
            if now < due:
                nxt = ladder.following(fault.ladder, index, self._skip(state))
                then = (
                    f"{fault.ladder[nxt].action} follows"
                    if nxt is not None
                    else "the ladder is exhausted"
                )
                message = (
                    f"{step.action} done; if fault {fault.name} is still present at"
                    f" {clock(due, now)}, {then}."
                )
                return replace(
                    state,
                    phase=Phase.Waiting,
                    reason=Reason.WaitingToEscalate,
                    message=message,
                    next_check_at=due,
                ), True
        nxt = ladder.following(fault.ladder, index, self._skip(state))
        if nxt is None:
            return self._exhausted(state, fault), True
        return self._start(state, node, fault, found, nxt, escalating=True)
