"""The planner: one pure function from (snapshot, policy, now) to what to do and when to look again.

It returns effects to apply once, the status every touched Remediation should show, and the
exact time it next needs to be woken. The work is split by concept:

- `context`: the fleet-wide aggregates, computed once per plan (with a `tally.FleetTally`
  kept by the caller, only the nodes that changed are matched again);
- `detection`: whether a faulty node opens an incident;
- `incident` with `stage`: an open incident moved through its explicit stages, each move
  checked against the transition table;
- `gates`: the one ordered list every start, retry and escalation passes;
- `starting`, `running`, `closing`: steps started, observed and ended;
- `actions`: what each action means; `messages`: every sentence shown to a human.

Several transitions may happen in one plan (a zero `tolerate` and a cordon start together).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from remediation_operator.domain import breaker, budgets, detection, incident
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import Effect
from remediation_operator.domain.fleet import BreakerState, Snapshot
from remediation_operator.domain.policy import Action, Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.domain.tally import FleetTally

__all__ = ["UNRECORDED_GRACE", "FleetTally", "Plan", "PolicySummary", "plan"]

UNRECORDED_GRACE = detection.UNRECORDED_GRACE


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
    overlapped: Mapping[str, str] = field(default_factory=dict)
    """Selected nodes another policy owns (node -> owning policy): this policy opens nothing
    there (docs/decisions.md, the ownership rule)."""


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


def plan(
    snapshot: Snapshot, policy: Policy, now: datetime, tally: FleetTally | None = None
) -> Plan:
    """Decide what to do for the snapshot's (focused) nodes at `now`; see the module docstring.

    `tally`: the caller's FleetTally for this policy and node source (None: count from scratch).
    The plan is the same either way."""
    ctx = Context(snapshot, policy, now, tally)
    focus = snapshot.focus
    if focus is None:
        active_names: Iterable[str] = snapshot.active
        detect_names: Iterable[str] = ctx.matches
    else:
        active_names = [n for n in focus if n in snapshot.active]
        detect_names = [n for n in focus if n in ctx.matches]
    _advance_all(ctx, active_names)
    if focus is not None and ctx.freed:
        # An incident ended: its breaker slot and budget are free now, so the nodes that
        # waited for them are planned in this plan, not at their next event or safety net.
        blocked, waiting = _waiting_elsewhere(ctx, focus)
        _advance_all(ctx, blocked)
        detect_names = [*detect_names, *waiting]
    _detect_all(ctx, detect_names)
    detection.release_unrecorded(ctx, focus)
    if any(b.schedule is not None for b in policy.budgets):
        change = budgets.next_change(policy.budgets, now)
        if change is not None:
            ctx.wakes.append(change)
    next_wake = max(min(ctx.wakes), now) if ctx.wakes else None
    return Plan(
        effects=tuple(ctx.effects),
        remediations=tuple(ctx.changed),
        breakers=ctx.breakers,
        summary=_summary(ctx),
        next_wake=next_wake,
        reasons=ctx.reasons,
    )


def _advance_all(ctx: Context, names: Iterable[str]) -> None:
    active = ctx.snapshot.active
    ordered = sorted((active[n] for n in names), key=lambda s: (s.started_at, s.name))
    for state in ordered:
        incident.advance(ctx, state, ctx.snapshot.nodes.get(state.node))


def _detect_all(ctx: Context, names: Iterable[str]) -> None:
    if ctx.policy.deleted:
        return  # a deleted policy opens nothing new
    active = ctx.snapshot.active
    fresh = sorted(
        (n for n in names if n not in active),
        key=lambda n: (ctx.matches[n].severity, n),
    )
    for name in fresh:
        detection.detect(ctx, ctx.snapshot.nodes[name], ctx.matches[name])


def _waiting_elsewhere(ctx: Context, focus: frozenset[str]) -> tuple[list[str], list[str]]:
    """Outside the focus: Blocked incidents (a budget may have freed) and faulty nodes without
    an incident in a group whose breaker slot may have freed."""
    snapshot = ctx.snapshot
    blocked = [n for n, s in snapshot.active.items() if n not in focus and s.phase is Phase.Blocked]
    config = ctx.policy.circuit_breaker
    waiting = [
        n
        for n in ctx.matches
        if n not in focus
        and n not in snapshot.active
        and breaker.group_of(snapshot.nodes[n], config) in ctx.freed
    ]
    return blocked, waiting


def _summary(ctx: Context) -> PolicySummary:
    policy, snapshot = ctx.policy, ctx.snapshot
    problems = [p for p in map(budgets.problem, policy.budgets) if p is not None]
    config = policy.circuit_breaker
    return PolicySummary(
        observed=len(snapshot.nodes),
        unhealthy=ctx.unhealthy,
        in_flight=len(ctx.counted),
        headroom=budgets.headroom(ctx.limits, ctx.counts),
        circuit_open=tuple(g for g, s in ctx.breakers.items() if s.open),
        invalid_budgets=tuple(problems),
        paused=policy.is_paused,
        invalid_circuit_breaker=None if config is None else breaker.problem(config),
        overlapped={n: o for n, o in snapshot.foreign.items() if n in snapshot.nodes},
    )
