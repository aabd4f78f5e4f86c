"""The planner's structure (issue 12): the stage table refuses impossible moves, and every
start, retry and escalation of a step passes the same gates (ownership, evidence, history)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from remediation_operator.domain import gates, planner, stage
from remediation_operator.domain.fleet import Snapshot
from remediation_operator.domain.policy import Action, History
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState, StepRecord

from .fake_cluster import MIN, SEC, T0, XID, FakeCluster, faulty_conditions, node, policy, run

CORDONED = "fault plan +2m plan plan"
RESETTING = CORDONED + " +5m plan ok plan"


def seen_at(cluster: FakeCluster, name: str, moment: datetime) -> None:
    """The operator last saw the XID condition change at `moment` (its own clock)."""
    view = cluster.nodes[name]
    conditions = tuple(
        replace(c, observed_at=moment) if c.type == XID else c for c in view.conditions
    )
    cluster.edit(name, conditions=conditions)


def reported(cluster: FakeCluster, name: str) -> None:
    """The agent reports the XID condition again (a new heartbeat), seen by the operator now."""
    view = cluster.nodes[name]
    conditions = tuple(
        replace(c, observed_at=cluster.now, last_heartbeat_time=cluster.now) if c.type == XID else c
        for c in view.conditions
    )
    cluster.edit(name, conditions=conditions)


def test_the_gates_run_in_the_documented_order() -> None:
    assert [g.__name__ for g in gates.GATES] == [
        "paused",
        "ownership",
        "evidence",
        "circuit",
        "approval",
        "budget",
        "rate",
    ]


def test_no_incident_opens_on_a_node_another_policy_owns() -> None:
    faulty = node(conditions=faulty_conditions(T0))
    snapshot = Snapshot(nodes={"gpu-1": faulty}, foreign={"gpu-1": "gpu-default"})

    result = planner.plan(snapshot, policy(), T0)

    assert result.remediations == ()
    assert result.reasons["gpu-1"] is Reason.OwnedByOtherPolicy
    assert result.summary.overlapped == {"gpu-1": "gpu-default"}
    assert result.effects == ()


def test_evidence_from_before_the_last_disruptive_step_never_escalates() -> None:
    """Defect 4: Replace ran 20 s after a successful reboot on evidence from before it."""
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, RESETTING)
    seen_at(cluster, "gpu-1", T0)  # the XID was last reported before the reset began
    plan = run(cluster, "ok plan +5m plan")

    state = cluster.active["gpu-1"]
    assert (state.phase, state.reason) == (Phase.Blocked, Reason.EvidenceInsufficient)
    assert state.step is Action.GPUReset
    assert "before GPUReset ended" in state.message
    assert plan.reasons["gpu-1"] is Reason.EvidenceInsufficient

    reported(cluster, "gpu-1")  # the agent reports the fault again
    run(cluster, "+1m plan")
    assert cluster.active["gpu-1"].step is Action.Reboot


def test_a_retry_passes_the_evidence_gate_too() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, RESETTING)
    seen_at(cluster, "gpu-1", T0)
    run(cluster, "fail plan +10s plan")

    state = cluster.active["gpu-1"]
    assert state.reason is Reason.EvidenceInsufficient
    assert [r.attempt for r in state.steps if r.action is Action.GPUReset] == [1]


def _past(count: int, *actions: Action) -> list[RemediationState]:
    return [
        RemediationState(
            name=f"gpu-1-old{i}",
            node="gpu-1",
            policy="gpu",
            fault="gpu-xid-reset",
            phase=Phase.Succeeded,
            reason=Reason.Recovered,
            message="old",
            started_at=T0 - timedelta(days=1 + i),
            steps=tuple(
                StepRecord(a, 1, T0 - timedelta(days=1 + i), Reason.StepStarted, "")
                for a in actions
            ),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("actions", "repeat"),
    [
        ((Action.Cordon,), False),
        ((Action.Cordon, Action.Drain), True),
        ((), False),
    ],
    ids=["cordon-only incidents do not count", "drained incidents count", "blips do not count"],
)
def test_history_counts_only_incidents_that_reached_a_disruptive_step(
    actions: tuple[Action, ...], repeat: bool
) -> None:
    """Defect 7: weak and transient incidents made the first real XID skip to Replace."""
    cluster = FakeCluster(policy(history=History()), {"gpu-1": node()}, finished=_past(3, *actions))
    run(cluster, "fault plan")
    assert cluster.active["gpu-1"].repeat_offender is repeat


def test_the_stage_table_refuses_an_impossible_move() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED + " +5m plan")
    running = cluster.active["gpu-1"]
    closed = replace(running, phase=Phase.Cancelled, finished_at=T0 + 8 * MIN)

    assert stage.of(running) is stage.Stage.Running
    assert stage.of(closed) is stage.Stage.Closed
    with pytest.raises(stage.IllegalTransitionError, match="Closed may not move to Running"):
        stage.check(closed, running)


def test_a_drain_blocked_by_a_pdb_is_evented_again_every_ten_minutes() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED + " +5m plan pdb plan")
    announced = 0
    for _ in range(int(20 * MIN / (5 * SEC))):
        result = run(cluster, "+5s pdb plan")
        announced += sum(
            1 for e in result.effects if getattr(e, "reason", None) is Reason.DrainBlockedByPDB
        )
    assert announced == 2


def test_finished_records_say_how_they_ended_and_approval_names_the_annotation() -> None:
    cluster = FakeCluster(policy(require_approval=frozenset({Action.Drain})), {"gpu-1": node()})
    run(cluster, CORDONED + " +5m plan")
    waiting = cluster.active["gpu-1"]
    assert waiting.reason is Reason.AwaitingApproval
    assert gates.APPROVE_ANNOTATION + "=Drain" in waiting.message
    run(cluster, "approve:Drain plan ok plan")
    for record in cluster.active["gpu-1"].steps:
        if record.outcome is not None:
            assert not record.message.startswith(("Escalating", "Started")), record


def test_a_resumed_drain_reads_its_observation_at_once() -> None:
    """Found by tests/domain/test_invariants.py: a drain blocked by a PDB, interrupted by a
    flap and resumed, showed StepStarted and changed to DrainBlockedByPDB on a replan with
    nothing new. The resumed step keeps its attempt, record and timeout (defect 15)."""
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED + " +5m plan pdb plan")
    drain = cluster.active["gpu-1"]
    run(cluster, "+1m clear plan +1m fault pdb")
    cluster.record(cluster.decide())  # written; its effects not applied yet

    state = cluster.active["gpu-1"]
    assert (state.step, state.reason) == (Action.Drain, Reason.DrainBlockedByPDB)
    assert (state.attempt, state.step_started_at) == (drain.attempt, drain.step_started_at)
    assert len(state.steps) == len(drain.steps)
    assert cluster.decide().remediations == ()


def test_the_last_eviction_at_the_deadline_gets_its_grace_before_the_timeout() -> None:
    """Found by tests/domain/test_invariants.py: a replan during the grace of the eviction made
    at the deadline timed the drain out at once instead of waiting for its check."""
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED + " +5m plan +30m plan")
    last = cluster.active["gpu-1"]
    assert (last.step, last.next_check_at) == (Action.Drain, cluster.now + 30 * SEC)

    assert run(cluster, "+10s plan").remediations == ()
    run(cluster, "+20s plan")
    assert cluster.active["gpu-1"].step is Action.GPUReset


def test_our_own_release_before_a_lost_recovered_record_is_no_administrator_action() -> None:
    """Found by the safety model: recovery releases the node before it writes `Recovered`; a
    crash in between made the next plan close the incident as an administrator's uncordon."""
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED + " clear plan +10m")
    lost = cluster.decide()  # the release is applied, the Recovered record never written
    for effect in lost.effects:
        cluster.apply(effect)
    assert not cluster.nodes["gpu-1"].unschedulable

    run(cluster, "+5s plan")

    (state,) = cluster.finished
    assert (state.phase, state.reason) == (Phase.Succeeded, Reason.Recovered)


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ({"excluded_by_annotation": True}, "annotated remediation.gpuops.io/exclude=true"),
        ({"labels": {"remediation.gpuops.io/exclude": "true"}}, "labelled"),
    ],
    ids=["annotation", "label"],
)
def test_a_node_opting_out_mid_ladder_is_told_how_it_opted_out(
    how: dict[str, object], says: str
) -> None:
    """Defect 14: a node excluded by annotation was said to be labelled."""
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED)
    cluster.edit("gpu-1", **how)
    run(cluster, "+5m plan")

    state = cluster.active["gpu-1"]
    assert (state.phase, state.reason) == (Phase.Blocked, Reason.NodeExcluded)
    assert says in state.message
