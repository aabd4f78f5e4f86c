"""The one ordered list of gates every start, retry and escalation of a step passes.

paused, ownership, evidence, breaker, approval, budget, rate: the first gate that holds says
why in one Reason and one clause ("Drain is due but <clause>"), and the step does not start.
Nothing else in the planner decides whether a step may start, so a retry or an escalation
can never skip a check a first start makes.

The evidence rule (docs/decisions.md, D60): a disruptive step needs strong evidence (not a
stale heartbeat, a missing condition or an Unknown status); after a repair step (GPUReset,
Reboot; never after a Cordon or a Drain, which change nothing on the hardware) that evidence
must be observed by the operator, on its own clock, after the repair ended, and the node must
have reported again since then: its remote heartbeat, transition, status or reason differ
from those recorded in the Remediation when that step ended (remote times compared only
with remote times). The second half survives an operator restart, which makes every
condition "first seen" at start-up. A condition whose observation time is unknown
(`observed_at` None: a caller that does not track it) counts as seen now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from remediation_operator.domain import bounds, breaker, budgets, matching, messages, remediation
from remediation_operator.domain.actions import ACTIONS
from remediation_operator.domain.context import Context
from remediation_operator.domain.fleet import BreakerState, Condition, NodeView
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    ObservedCondition,
    Outcome,
    RemediationState,
    StepRecord,
)

APPROVE_ANNOTATION = remediation.APPROVE_ANNOTATION


@dataclass(frozen=True)
class Request:
    """A step about to start (first attempt, retry or escalation)."""

    state: RemediationState
    node: NodeView
    action: Action
    found: matching.Match | None


@dataclass(frozen=True)
class Hold:
    """A gate that holds: why, and when to look again (None: on an event or the safety net)."""

    reason: Reason
    why: str
    until: datetime | None = None


Gate = Callable[[Context, Request], Hold | None]


def paused(ctx: Context, req: Request) -> Hold | None:
    """A paused policy, or one switched to DryRun while this Enforce incident ran: nothing
    new starts (what the incident already did is still undone when it ends)."""
    if ctx.policy.is_paused:
        return Hold(Reason.Paused, "the policy is paused")
    if ctx.dry_run and not req.state.dry_run:
        return Hold(Reason.DryRun, "the policy switched to DryRun after this incident began")
    return None


def ownership(ctx: Context, req: Request) -> Hold | None:
    owner = ctx.snapshot.foreign.get(req.node.name)
    if owner is not None:
        return Hold(Reason.OwnedByOtherPolicy, messages.owned_elsewhere(owner))
    return None


REPAIRS: frozenset[Action] = frozenset({Action.GPUReset, Action.Reboot})
"""The steps that change the hardware's state: evidence from before one ended is old. A
Cordon or a Drain changes nothing on the hardware, so the evidence that started them still
stands after them (D60)."""


def _boundary(record: StepRecord) -> datetime | None:
    """When `record` made earlier evidence old: a repair when it ended; a restart of the
    node's agents (RestartPods, D71) when it began (what they showed before it is their old
    processes' word, and what they report after it may come before the step ends)."""
    if record.action is Action.RestartPods:
        return record.started_at
    if record.action in REPAIRS:
        return record.finished_at
    return None


def evidence_ended(state: RemediationState) -> datetime | None:
    """When the incident's last repair step (attempt: GPUReset, Reboot) ended, or the pods of
    its agents were last restarted after it (D71); None: neither happened. A DryRun step
    changed nothing on the node, so it leaves the evidence as it was."""
    if state.dry_run:
        return None
    for record in reversed(state.steps):
        boundary = _boundary(record)
        if boundary is not None:
            return boundary
    return None


def failed_validation(state: RemediationState) -> bool:
    """The incident's last record is a validation that failed (or timed out): positive
    evidence of the fault, observed by us after the repair ended (D37)."""
    last = state.steps[-1] if state.steps else None
    return (
        last is not None
        and last.action is Action.Validate
        and last.outcome is Outcome.PermanentFailure
    )


def evidence(ctx: Context, req: Request) -> Hold | None:
    if not ACTIONS[req.action].disruptive or failed_validation(req.state):
        return None
    found = req.found
    if found is None or found.weak:
        strong_at = matching.strong_at(found)
        if found is not None and strong_at is not None and found.condition is not None:
            return Hold(
                Reason.EvidenceInsufficient,
                messages.unknown_until_held(found.condition, found.rule, strong_at, ctx.now),
                until=strong_at,
            )
        return Hold(Reason.EvidenceInsufficient, messages.weak_evidence())
    ended = evidence_ended(req.state)
    if ended is None:
        return None
    last = next(r.action for r in reversed(req.state.steps) if _boundary(r) == ended)
    seen = found.observed_at
    if seen is not None and seen <= ended:
        return Hold(
            Reason.EvidenceInsufficient, messages.evidence_predates(last, seen, ended, ctx.now)
        )
    state = req.state
    if (
        seen is not None
        and seen != state.evidence_seen_at
        and unchanged_since(state.evidence_at_step_end, found.condition)
    ):
        # Our clock saw a change since the step ended that the node's own values do not show:
        # a restart's first sighting, not a new report.
        return Hold(
            Reason.EvidenceInsufficient, messages.evidence_not_renewed(last, ended, ctx.now)
        )
    return None


def fresh_evidence(
    ctx: Context, state: RemediationState, node: NodeView, found: matching.Match | None
) -> bool:
    """The fault is shown by strong evidence reported after the last disruptive step ended:
    what the evidence gate would accept for a next step (a fault back during a validation)."""
    if found is None or found.weak:
        return False
    return evidence(ctx, Request(state, node, Action.Reboot, found)) is None


def unchanged_since(then: ObservedCondition | None, now: Condition | None) -> bool:
    """The condition is still the one recorded when the last disruptive step ended: same
    remote heartbeat and transition times, status and reason. Remote times are compared only
    with remote times. Our observation time cannot tell this after a restart (every condition
    is first seen at start-up), so a Reboot followed by a restart would otherwise let the
    pre-reboot condition decide a Replace. A recording without any remote time says nothing.
    The gate asks this only when our clock saw the condition change since the step ended
    (`observed_at` moved from `evidence_seen_at`); otherwise the clock rule alone decides
    (the in-memory cluster's agents that beat "until U" show one heartbeat value meanwhile).
    A caller that tracks no observation (`observed_at` None) is taken as seeing it now."""
    if then is None or now is None or not bounds.same(then.type, now.type):
        return False
    if then.last_heartbeat_time is None and then.last_transition_time is None:
        return False
    return (
        now.last_heartbeat_time == then.last_heartbeat_time
        and now.last_transition_time == then.last_transition_time
        and bounds.same(then.status, now.status)  # stored text was cut (domain.bounds)
        and bounds.same(then.reason, now.reason)
    )


def circuit(ctx: Context, req: Request) -> Hold | None:
    config = ctx.policy.circuit_breaker
    if config is None or ACTIONS[req.action].checks_repair:
        return None
    node = req.node
    group = breaker.group_of(node, config)
    group_state = ctx.breakers.get(group, BreakerState())
    health = ctx.health.get(group, breaker.Health())
    holds = ctx.slot.get(group, node.name) == node.name
    reason = breaker.blocks(config, group_state, health, holds)
    if reason is None:
        ctx.slot.setdefault(group, node.name)
        return None
    why = messages.breaker_holds(reason, group, breaker.small(config, health))
    return Hold(reason, why, breaker.closes_at(config, group_state))


def approval(ctx: Context, req: Request) -> Hold | None:
    action = req.action
    if action not in ctx.policy.require_approval:
        return None
    if action in ctx.snapshot.approvals.get(req.node.name, frozenset()):
        return None
    return Hold(Reason.AwaitingApproval, messages.needs_approval(action, req.state.name))


def budget(ctx: Context, req: Request) -> Hold | None:
    action, name = req.action, req.node.name
    if not ACTIONS[action].disruptive:
        return None
    mine = name in ctx.counted
    if mine:  # the node moves from one disruptive step to the next: not one more
        ctx.tally(ctx.counted[name], -1)
    limit = budgets.blocking(ctx.limits, action, ctx.counts)
    if mine:
        ctx.tally(ctx.counted[name], +1)
    if limit is None:
        return None
    if limit.invalid is not None:
        return Hold(Reason.BudgetInvalid, limit.invalid)
    return Hold(Reason.BudgetExhausted, messages.budget_used(limit.budget.nodes, limit.nodes))


def rate(ctx: Context, req: Request) -> Hold | None:
    window = ctx.rate
    if window is None or not ACTIONS[req.action].disruptive or window.has_room(ctx.now):
        return None
    return Hold(Reason.RateLimited, messages.rate_used(window.rate), window.room_at(ctx.now))


GATES: tuple[Gate, ...] = (paused, ownership, evidence, circuit, approval, budget, rate)
"""In order: the first that holds is the reason shown."""


def first_hold(ctx: Context, req: Request) -> Hold | None:
    for gate in GATES:
        hold = gate(ctx, req)
        if hold is not None:
            return hold
    return None
