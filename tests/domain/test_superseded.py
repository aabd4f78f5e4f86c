"""The planner's side of a hand-over (issue 21, D76): a cordon-only incident that another
policy's acting fault supersedes ends `SupersededByPolicy`, re-points its quarantine at that
policy before the record, and gives nothing back; an incident that acts, or one with a step in
flight, keeps its node. And an incident that ends while tolerating takes off a cordon of ours
its record does not show, unless another policy claims the node."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain import planner
from remediation_operator.domain.effects import Announce, Release, Requarantine
from remediation_operator.domain.fleet import Condition, NodeView, Snapshot
from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    OnExhausted,
    Policy,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    Outcome,
    Phase,
    RemediationState,
    StepRecord,
)
from tests.domain.fake_cluster import T0

NETWORK = Fault(
    name="node-networking",
    match=(ConditionMatch("NetworkingReady", "False"),),
    ladder=(Step(Action.Cordon),),
    on_exhausted=OnExhausted.Hold,
    tolerate=timedelta(minutes=1),
)
POLICY = Policy(name="network", faults=(NETWORK,))
DOWN = Condition("NetworkingReady", "False", "InterfaceNotUp", observed_at=T0)
UP = Condition("NetworkingReady", "True", "InterfaceUp", observed_at=T0)


def held(**changes: object) -> RemediationState:
    """The network incident after its cordon: waiting, the ladder exhausted and held."""
    cordon = StepRecord(
        Action.Cordon, 1, T0, Reason.StepSucceeded, "Cordoned.", T0, Outcome.Succeeded
    )
    fields: dict[str, object] = {
        "name": "gpu-0-20261130t1100",
        "node": "gpu-0",
        "policy": "network",
        "fault": NETWORK.name,
        "phase": Phase.Waiting,
        "reason": Reason.LadderExhausted,
        "message": "Held.",
        "started_at": T0,
        "step": Action.Cordon,
        "step_index": 0,
        "attempt": 1,
        "step_started_at": T0,
        "step_finished_at": T0,
        "step_outcome": Outcome.Succeeded,
        "steps": (cordon,),
        "cordoned_by_us": True,
    }
    fields.update(changes)
    return RemediationState(**fields)  # type: ignore[arg-type]


def cordoned(condition: Condition = DOWN) -> NodeView:
    return NodeView(
        "gpu-0",
        conditions=(condition,),
        unschedulable=True,
        quarantined=True,
        quarantined_by="network",
        uncordon_on_release=True,
    )


def plan(state: RemediationState | None, view: NodeView, **snapshot: object) -> planner.Plan:
    active = {} if state is None else {"gpu-0": state}
    return planner.plan(
        Snapshot(nodes={"gpu-0": view}, active=active, **snapshot),  # type: ignore[arg-type]
        POLICY,
        T0 + timedelta(minutes=5),
    )


def test_a_held_node_is_handed_to_the_acting_fault_without_a_release() -> None:
    result = plan(held(), cordoned(), superseding={"gpu-0": "gpu/gpu-xid-reset"})
    (closed,) = result.remediations
    assert (closed.phase, closed.reason) == (Phase.Cancelled, Reason.SupersededByPolicy)
    assert "gpu" in closed.message
    assert "gpu-xid-reset" in closed.message
    assert "stays cordoned" in closed.message
    effects = [e for e in result.effects if not isinstance(e, Announce)]
    assert effects == [Requarantine("gpu-0", policy="gpu", fault="gpu-xid-reset")]
    announced = [e.reason for e in result.effects if isinstance(e, Announce)]
    assert Reason.SupersededByPolicy in announced


def test_an_incident_whose_ladder_acts_keeps_its_node() -> None:
    acting = replace(
        POLICY, faults=(replace(NETWORK, ladder=(Step(Action.Cordon), Step(Action.Drain))),)
    )
    result = planner.plan(
        Snapshot(
            nodes={"gpu-0": cordoned()},
            active={"gpu-0": held(reason=Reason.WaitingToEscalate)},
            superseding={"gpu-0": "gpu/gpu-xid-reset"},
        ),
        acting,
        T0 + timedelta(minutes=5),
    )
    assert all(not s.terminal for s in result.remediations)
    assert not [e for e in result.effects if isinstance(e, Requarantine | Release)]


def test_a_cordon_in_flight_finishes_before_the_node_is_handed_over() -> None:
    running = held(
        phase=Phase.Running,
        reason=Reason.StepStarted,
        step_finished_at=None,
        step_outcome=None,
        steps=(StepRecord(Action.Cordon, 1, T0, Reason.StepStarted, "Cordoning."),),
    )
    view = replace(cordoned(), unschedulable=False, quarantined=False)
    result = plan(running, view, superseding={"gpu-0": "gpu/gpu-xid-reset"})
    assert all(not s.terminal for s in result.remediations)


def test_an_incident_ending_while_tolerating_takes_off_an_unrecorded_cordon() -> None:
    """Our cordon went on before the record (D14) and that write failed; at the replan the
    fault reads absent: the incident ends, and the cordon comes off with it."""
    tolerating = held(
        phase=Phase.Pending,
        reason=Reason.Tolerating,
        step=None,
        step_index=None,
        attempt=0,
        step_started_at=None,
        step_finished_at=None,
        step_outcome=None,
        steps=(),
        cordoned_by_us=False,
        healthy_since=T0,
    )
    result = plan(tolerating, cordoned(UP))
    (closed,) = result.remediations
    assert closed.reason is Reason.FaultGone
    assert Release("gpu-0", uncordon=True) in result.effects

    # Another policy claims the node (a hand-over to this policy whose fault then cleared,
    # while the other's shows): its fault takes the cordon over, nothing is released.
    result = plan(tolerating, cordoned(UP), claimed=frozenset({"gpu-0"}))
    assert not [e for e in result.effects if isinstance(e, Release)]
