"""The invariant checker itself: it must fail on a broken promise, not only pass on kept ones."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from remediation_operator.domain.fleet import BreakerState
from remediation_operator.domain.policy import (
    Action,
    Budget,
    CircuitBreaker,
    Fault,
    Policy,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState, StepRecord
from remediation_operator.engine.ports import PolicyState, StepTransition
from remediation_operator.engine.reconciler import Reconciled
from remediation_operator.sim.invariants import Checker, InvariantViolation, ladder_problem
from remediation_operator.sim.memory_cluster import MemoryCluster

T0 = datetime(2026, 1, 5, tzinfo=UTC)
LADDER = (
    Step(Action.Cordon),
    Step(Action.Drain),
    Step(Action.GPUReset),
    Step(Action.Reboot),
    Step(Action.Replace),
)
POLICY = Policy(name="p", faults=(Fault(name="xid", match=(), ladder=LADDER),))


def state(
    *actions: Action, reason: Reason = Reason.StepStarted, fault: str = "xid"
) -> RemediationState:
    steps = tuple(
        StepRecord(a, 1, T0 + timedelta(minutes=i), reason, "m") for i, a in enumerate(actions)
    )
    return RemediationState(
        name="n-1",
        node="n",
        policy="p",
        fault=fault,
        phase=Phase.Running,
        reason=reason,
        message="m",
        started_at=T0,
        steps=steps,
    )


@pytest.mark.parametrize(
    "actions",
    [
        (),
        (Action.Cordon,),
        (Action.Cordon, Action.Drain, Action.Drain, Action.GPUReset),
        (Action.Cordon, Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace),
        # Validation after a repair and diagnostics before a destructive step are not rungs.
        (
            Action.Cordon,
            Action.Drain,
            Action.GPUReset,
            Action.Validate,
            Action.Diagnose,
            Action.Reboot,
            Action.Validate,
            Action.Diagnose,
            Action.Replace,
        ),
    ],
)
def test_a_ladder_climbed_in_order_passes(actions: tuple[Action, ...]) -> None:
    assert ladder_problem(state(*actions), POLICY) is None


@pytest.mark.parametrize(
    ("actions", "words"),
    [
        ((Action.Cordon, Action.GPUReset), "skip a rung"),
        ((Action.Cordon, Action.Drain, Action.Cordon), "back down"),
        ((Action.Drain, Action.Cordon), "back down"),
    ],
)
def test_a_skipped_or_reversed_step_is_reported(actions: tuple[Action, ...], words: str) -> None:
    problem = ladder_problem(state(*actions), POLICY)
    assert problem is not None
    assert words in problem


def test_a_step_outside_the_ladder_is_reported() -> None:
    short = Policy(
        name="p",
        faults=(Fault(name="xid", match=(), ladder=(Step(Action.Cordon), Step(Action.Replace))),),
    )
    problem = ladder_problem(state(Action.Cordon, Action.Reboot), short)
    assert problem is not None
    assert "not in the ladder" in problem


def test_a_repeat_offender_may_jump_ahead_but_not_back() -> None:
    jump = state(Action.Cordon, Action.Replace, reason=Reason.RepeatOffender)
    assert ladder_problem(jump, POLICY) is None
    back = state(Action.Replace, Action.Cordon, reason=Reason.RepeatOffender)
    assert ladder_problem(back, POLICY) is not None


def test_an_unknown_fault_is_reported() -> None:
    problem = ladder_problem(state(Action.Cordon, fault="gone"), POLICY)
    assert problem is not None
    assert "not in policy" in problem


class _Sim:
    """The parts of a Simulation the checker reads, set up by hand."""

    def __init__(self, policy: Policy, active: dict[str, RemediationState]) -> None:
        self.policy = policy
        self.moment = T0
        self.active = active
        self.cluster = MemoryCluster(T0)
        for i in range(10):
            self.cluster.add_node(f"n{i}", created_at=T0 - timedelta(days=1))


def _started(node: str, action: Action) -> Reconciled:
    transition = StepTransition("p", node, f"{node}-1", "xid", action, 1, Reason.StepStarted)
    return Reconciled(next_wake=None, transitions=(transition,))


def _draining(node: str) -> RemediationState:
    return replace(state(Action.Cordon, Action.Drain), name=f"{node}-1", node=node)


def test_a_step_beyond_the_budget_is_reported() -> None:
    policy = replace(POLICY, budgets=(Budget(nodes="1", actions=frozenset({Action.Drain})),))
    sim = _Sim(policy, {"n1": _draining("n1"), "n2": _draining("n2")})
    with pytest.raises(InvariantViolation, match="allows 1"):
        Checker()(cast(Any, sim), _started("n2", Action.Drain))
    within = _Sim(policy, {"n2": _draining("n2")})
    Checker()(cast(Any, within), _started("n2", Action.Drain))


def test_a_step_while_the_breaker_is_open_is_reported() -> None:
    policy = replace(POLICY, circuit_breaker=CircuitBreaker(max_unhealthy="20%"))
    sim = _Sim(policy, {"n2": _draining("n2")})
    opened = PolicyState(breakers={"": BreakerState(open=True, opened_at=T0)})
    asyncio.run(sim.cluster.write_policy_state("p", 1, opened, T0))
    with pytest.raises(InvariantViolation, match="circuit breaker"):
        Checker()(cast(Any, sim), _started("n2", Action.Drain))
