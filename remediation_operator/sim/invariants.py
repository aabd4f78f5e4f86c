"""Safety properties checked after every decision of a simulation (tests and `--check-invariants`).

The simulator's figures are only trustworthy if the operator behaved as promised while
producing them, so these checks restate the promises independently of the planner's code:
a disruptive step never starts beyond the strictest active budget, nothing starts in a group
whose circuit breaker is open, and a ladder is climbed in order without skipping a rung (a
repeat offender may jump ahead, as `history` says). A violation stops the run with the time,
node and numbers involved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from remediation_operator.domain import breaker, budgets
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import DISRUPTIVE, LADDER_ORDER, Action, Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import RemediationState
from remediation_operator.engine import reconciler
from remediation_operator.engine.ports import StepTransition
from remediation_operator.engine.reconciler import Reconciled

if TYPE_CHECKING:
    from remediation_operator.sim.simulator import Simulation


class InvariantViolation(AssertionError):  # noqa: N818 - reads as invariants.InvariantViolation
    """The operator broke one of its promises during a simulation."""


def _last_disruptive(state: RemediationState) -> Action | None:
    for record in reversed(state.steps):
        if record.action in DISRUPTIVE:
            return record.action
    return None


def ladder_problem(state: RemediationState, policy: Policy) -> str | None:
    """Why the steps taken so far break the fault's ladder order, or None when they do not."""
    fault = next((f for f in policy.faults if f.name == state.fault), None)
    if fault is None:
        return f"fault {state.fault!r} is not in policy {policy.name}"
    ladder = [s.action for s in fault.ladder]
    taken: list[Action] = []
    for record in state.steps:
        if record.action not in LADDER_ORDER:
            continue  # Validate and Diagnose accompany rungs; they are not rungs (D37, D39)
        if not taken or taken[-1] is not record.action:
            taken.append(record.action)
    order = [LADDER_ORDER.index(a) for a in taken]
    if order != sorted(order) or len(set(taken)) != len(taken):
        return f"steps {[a.value for a in taken]} go back down the ladder"
    unknown = [a.value for a in taken if a not in ladder]
    if unknown:
        return f"steps {unknown} are not in the ladder {[a.value for a in ladder]}"
    repeat = state.reason is Reason.RepeatOffender or any(
        r.reason is Reason.RepeatOffender for r in state.steps
    )
    if not repeat and taken != ladder[: len(taken)]:
        return f"steps {[a.value for a in taken]} skip a rung of {[a.value for a in ladder]}"
    return None


class Checker:
    """An observer for `Simulation`: call it after each reconcile; raises InvariantViolation."""

    def __init__(self) -> None:
        self.checks = 0
        self._known: set[str] = set()

    def __call__(self, sim: Simulation, result: Reconciled) -> None:
        self.checks += 1
        policy = sim.policy
        where = f"at {sim.moment:%Y-%m-%dT%H:%M:%SZ} (policy {policy.name})"
        started = [t for t in result.transitions if t.outcome is None and t.attempt == 1]
        created = [s for s in result.written if s.name not in self._known]
        self._known.update(s.name for s in result.written)
        for state in result.written:
            problem = ladder_problem(state, policy)
            if problem is not None:
                raise InvariantViolation(f"{where}: Remediation {state.name}: {problem}")
        if not started and not created:
            return
        views = reconciler.select(policy, sim.cluster.views())
        self._check_budgets(sim, views, started, where)
        self._check_breaker(sim, views, started, created, where)

    def _check_budgets(
        self,
        sim: Simulation,
        views: Mapping[str, NodeView],
        started: list[StepTransition],
        where: str,
    ) -> None:
        policy = sim.policy
        new_actions = {t.action for t in started if t.action in DISRUPTIVE}
        if not new_actions:
            return
        counted: dict[str, Action | None] = {}
        for node, state in sim.active.items():
            action = _last_disruptive(state)
            if action is not None:
                counted[node] = action
        for name, view in views.items():
            if name not in sim.active and not view.ready:
                counted.setdefault(name, None)
        for limit in budgets.limits(policy.budgets, len(views), sim.moment):
            if not new_actions & limit.budget.actions:
                continue
            count = sum(1 for a in counted.values() if a is None or a in limit.budget.actions)
            if count > limit.nodes:
                raise InvariantViolation(
                    f"{where}: a {'/'.join(sorted(a.value for a in new_actions))} step started"
                    f" while {count} nodes count against budget nodes={limit.budget.nodes!r}"
                    f" for {sorted(a.value for a in limit.budget.actions)}, which allows"
                    f" {limit.nodes}"
                )

    def _check_breaker(
        self,
        sim: Simulation,
        views: Mapping[str, NodeView],
        started: list[StepTransition],
        created: list[RemediationState],
        where: str,
    ) -> None:
        config = sim.policy.circuit_breaker
        if config is None:
            return
        states = sim.cluster.policy_state(sim.policy.name).breakers
        open_groups = {g for g, s in states.items() if s.open}
        if not open_groups:
            return
        totals: dict[str, int] = {}
        for each in views.values():
            group = breaker.group_of(each, config)
            totals[group] = totals.get(group, 0) + 1
        for node, what in [(t.node, f"step {t.action}") for t in started] + [
            (s.node, "a new Remediation") for s in created
        ]:
            view = views.get(node)
            if view is None:
                continue
            group = breaker.group_of(view, config)
            if group in open_groups and totals.get(group, 0) >= config.min_nodes:
                raise InvariantViolation(
                    f"{where}: {what} started on node {node} while the circuit breaker of group"
                    f" {group!r} is open"
                )
