"""One plan's working set: the fleet-wide aggregates computed once, and what the plan collects.

Every part of the planner (detection, the ladder, the gates, closing) reads the same
aggregates (faults by node, breaker health, budget counts, the rate window, the breaker's
small-pool slot) and appends to the same outputs (effects, changed states, wakes, reasons).
Keeping them in one object keeps those parts free of each other's internals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from itertools import chain

from remediation_operator.domain import breaker, budgets, matching, messages, ratelimit
from remediation_operator.domain.actions import ACTIONS
from remediation_operator.domain.effects import Announce, Effect, Severity
from remediation_operator.domain.fleet import BreakerState, NodeView, Snapshot
from remediation_operator.domain.policy import Action, Budget, Mode, Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import RemediationState
from remediation_operator.domain.tally import FleetTally

RECHECK = timedelta(minutes=5)
"""A safety-net re-check for waits that end on an event (approval, budget freed, unpause)."""


def last_disruptive(state: RemediationState) -> Action | None:
    for record in reversed(state.steps):
        if ACTIONS[record.action].disruptive:
            return record.action
    return None


class Context:
    """The aggregates of one plan and its outputs (effects, states, wakes, reasons)."""

    def __init__(
        self, snapshot: Snapshot, policy: Policy, now: datetime, tally: FleetTally | None
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
        self.freed: set[str] = set()
        """Breaker groups ("" ungrouped) in which an incident ended or a budget slot was freed
        during this plan: other waiting nodes there are planned in the same plan."""
        self.past: dict[str, list[RemediationState]] = defaultdict(list)
        """Finished Remediations by node: history, an admin's stop, a Failed incident."""
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
        self._wake_for_time(tally.next_change)

    def _match_all(self) -> None:
        """Match every selected node once: the breaker and the counts need all of them."""
        now = self.now
        nodes = self.snapshot.nodes
        config = self.policy.circuit_breaker
        group_by = None if config is None else config.group_by
        matcher = matching.Matcher(self.policy.faults)
        self.matches = matcher.faulty(nodes, now)
        change = matcher.next_change
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
                grown = node.created_at + self.policy.startup_grace
                change = grown if change is None else min(change, grown)
                continue
            unhealthy[breaker.group_of(node, config)] += 1
        self.health = {g: breaker.Health(total=totals[g], unhealthy=unhealthy[g]) for g in totals}
        self.unhealthy = sum(unhealthy.values())
        self._wake_for_time(change)

    def _wake_for_time(self, change: datetime | None) -> None:
        """Wake when some node's answer changes with time alone: a condition going stale is
        no event (the runtime also has a timer for it; the engine and the simulator have only
        the plan's wake). Only an instant after `now`: one at or before it would only plan
        the same answer again, at once, forever. The same instant with or without a tally."""
        if change is not None and change > self.now:
            self.wakes.append(change)

    def _count_disruption(self) -> None:
        """Budgets count a node from its first disruptive step until its Remediation ends."""
        self.limits = budgets.limits(self.policy.budgets, len(self.snapshot.nodes), self.now)
        self.counted: dict[str, Action | None] = {}
        for name, state in self.snapshot.active.items():
            action = last_disruptive(state)
            if action is not None:
                self.counted[name] = action
        for name in self.snapshot.not_ready_elsewhere:
            self.counted.setdefault(name, None)
        self.counts: dict[Budget, int] = defaultdict(int)
        for action in self.counted.values():
            self.tally(action, +1)
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

    def tally(self, action: Action | None, delta: int) -> None:
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
            opened = change.announce is Reason.CircuitOpen
            if not opened:
                self.freed.add(group)  # its waiting nodes are planned in this plan
            message = messages.breaker_changed(opened, group, health, config)
            severity = Severity.Warning if opened else Severity.Normal
            self.effects.append(Announce("", None, change.announce, message, severity, group=group))

    def group_of(self, node: NodeView) -> str:
        return breaker.group_of(node, self.policy.circuit_breaker)

    # ----------------------------------------------------------------- outputs

    def announce(
        self,
        state: RemediationState,
        reason: Reason,
        message: str,
        severity: Severity = Severity.Normal,
        action: Action | None = None,
    ) -> None:
        self.effects.append(Announce(state.node, state.name, reason, message, severity, action))

    def mutate(self, effect: Effect) -> None:
        """A mutating effect: applied in Enforce, only ever announced in DryRun."""
        if not self.dry_run:
            self.effects.append(effect)

    def undo(self, effect: Effect, state: RemediationState | None) -> None:
        """Undoing what an Enforce incident did (release, unprotect): whatever the policy's
        mode is now. An incident recorded in DryRun changed nothing, so it undoes nothing."""
        if state is None or not state.dry_run:
            self.effects.append(effect)

    def finish(self, state: RemediationState) -> None:
        """The state the incident rests in after this plan: written if it changed."""
        self.reasons[state.node] = state.reason
        if state.next_check_at is not None and not state.terminal:
            self.wakes.append(state.next_check_at)
        if state != self.snapshot.active.get(state.node):
            self.changed.append(state)
        if state.terminal:
            node = self.snapshot.nodes.get(state.node)
            held = [g for g, holder in self.slot.items() if holder == state.node]
            if node is not None:
                self.freed.add(self.group_of(node))
            else:  # a deleted node's group is unknown now: any group may have room
                self.freed.update(self.health)
            for slot in held:
                del self.slot[slot]
            if state.node in self.counted:
                self.tally(self.counted.pop(state.node), -1)

    def fallback(self, state: RemediationState, reason: Reason) -> datetime:
        """A safety-net re-check, stable while the state keeps showing `reason`."""
        if (
            state.reason is reason
            and state.next_check_at is not None
            and state.next_check_at > self.now
        ):
            return state.next_check_at
        return self.now + RECHECK

    def marked_ours(self, node: NodeView | None) -> bool:
        """The node itself says our cordon made it unschedulable (k8s annotations written in
        the cordon's own patch; docs/decisions.md D14)."""
        return (
            node is not None
            and node.uncordon_on_release
            and node.quarantined_by == self.policy.name
        )

    def handed_over(self, node: NodeView | None) -> bool:
        """Another policy's incident left its cordon on the node (it yielded, D76, or stopped
        before recording it) and the cordon made the node unschedulable: this policy's Cordon
        takes that quarantine over in one write, and with it the duty to uncordon at the end.
        Only the owner of the node starts a Cordon there (`engine.ownership`), so no open
        incident of that other policy still holds it."""
        return (
            node is not None
            and node.uncordon_on_release
            and node.quarantined_by not in ("", self.policy.name)
        )
