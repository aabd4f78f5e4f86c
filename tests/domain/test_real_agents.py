"""Incidents read agents as they are (issue 21, D58-D60): real agents keep a fault condition
set until they restart, let the newest finding overwrite its reason, and heartbeat every few
minutes. A reason change is no recovery; the incident follows the most severe fault seen; a
condition that vanished is weak; only a repair makes earlier evidence old."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain import gates
from remediation_operator.domain.effects import Announce, Release, Replace
from remediation_operator.domain.fleet import Condition
from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    OnExhausted,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from tests.domain.fake_cluster import MIN, XID, FakeCluster, node, policy, run

CONTACT_SUPPORT = Fault(
    name="gpu-contact-support",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(54|61)Error"),),
    tolerate=MIN,
    ladder=(
        Step(Action.Cordon),
        Step(Action.Drain, timeout=30 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    ),
)
UNREACHABLE = Fault(
    name="gpu-unreachable",
    match=(ConditionMatch(XID, "False", r"NvidiaXID79Error"),),
    tolerate=MIN,
    ladder=(
        Step(Action.Cordon),
        Step(Action.Drain, timeout=30 * MIN),
        Step(Action.Reboot, timeout=30 * MIN, escalate_after=10 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    ),
)
DOUBLE_BIT = Fault(
    name="gpu-double-bit-ecc",
    match=(ConditionMatch(XID, "False", r"NvidiaXID48Error"),),
    tolerate=MIN,
    ladder=(
        Step(Action.Cordon),
        Step(Action.Drain, timeout=30 * MIN),
        Step(Action.GPUReset, timeout=10 * MIN, escalate_after=5 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    ),
)
NVLINK = Fault(
    name="gpu-nvlink",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(74|154)Error"),),
    tolerate=MIN,
    ladder=(
        Step(Action.Cordon),
        Step(Action.Drain, timeout=30 * MIN),
        Step(Action.GPUReset, timeout=10 * MIN, escalate_after=5 * MIN),
        Step(Action.Reboot, timeout=30 * MIN, escalate_after=10 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    ),
)
RESET = Fault(
    name="gpu-xid-reset",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(46|62)Error"),),
    tolerate=MIN,
    ladder=(
        Step(Action.Cordon, escalate_after=5 * MIN),
        Step(Action.Drain, timeout=30 * MIN),
        Step(Action.GPUReset, timeout=10 * MIN, escalate_after=5 * MIN),
        Step(Action.Reboot, timeout=30 * MIN, escalate_after=10 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    ),
)
CATCH_ALL = Fault(
    name="gpu-unknown-reason",
    # Every reason except the no-action XID 63 (a row remap), as the default policy's is.
    match=(ConditionMatch(XID, "False", r"NvidiaXID([0-57-9][0-9]?|6[0-24-9]|[0-9]{3,})Error"),),
    tolerate=MIN,
    ladder=(Step(Action.Cordon),),
    on_exhausted=OnExhausted.Hold,
)
FAULTS = (CONTACT_SUPPORT, UNREACHABLE, DOUBLE_BIT, NVLINK, RESET, CATCH_ALL)


def agent_reports(cluster: FakeCluster, xid: int | None, status: str = "False") -> None:
    """The agent's condition now: the newest finding's reason, the status and the
    lastTransitionTime kept while the status stays (the EKS agent's `Fatal`); a report the
    operator observes now. `xid` None: the condition is gone from the node."""
    view = cluster.nodes["gpu-1"]
    others = tuple(c for c in view.conditions if c.type != XID)
    if xid is None:
        cluster.edit("gpu-1", conditions=others)
        return
    old = next((c for c in view.conditions if c.type == XID), None)
    kept = old.last_transition_time if old is not None and old.status == status else None
    condition = Condition(
        XID,
        status,
        f"NvidiaXID{xid}Error" if status == "False" else "AcceleratedHardwareIsReady",
        last_transition_time=kept or cluster.now,
        last_heartbeat_time=cluster.now,
        observed_at=cluster.now,
    )
    cluster.edit("gpu-1", conditions=(*others, condition))


def real_fleet() -> FakeCluster:
    return FakeCluster(policy(faults=FAULTS), {"gpu-1": node()})


def announced(cluster: FakeCluster) -> list[Reason]:
    assert cluster.last is not None
    return [e.reason for e in cluster.last.effects if isinstance(e, Announce)]


def released(cluster: FakeCluster) -> bool:
    assert cluster.last is not None
    return any(isinstance(e, Release) for e in cluster.last.effects)


def draining(cluster: FakeCluster, xid: int) -> None:
    """Fault `xid` reported once, tolerated, cordoned; the drain is running."""
    agent_reports(cluster, xid)
    run(cluster, "plan +1m plan plan")
    if cluster.active["gpu-1"].step is Action.Cordon:  # a ladder that waits after its cordon
        run(cluster, "+5m plan")
    state = cluster.active["gpu-1"]
    assert (state.step, state.phase) == (Action.Drain, Phase.Running), state


def test_a_milder_reason_over_the_fault_is_no_recovery() -> None:
    """Finding 3: XID 48, then XID 63 (no action in the policy) on the same condition."""
    cluster = real_fleet()
    agent_reports(cluster, 48)
    run(cluster, "plan +1m plan")
    assert cluster.active["gpu-1"].step is Action.Cordon

    cluster.advance(timedelta(seconds=20))
    agent_reports(cluster, 63)  # the newest finding overwrites the reason
    for _ in range(2):
        run(cluster, "plan ok +10m")
        assert not released(cluster)
    run(cluster, "plan")

    state = cluster.active["gpu-1"]
    assert state.fault == "gpu-double-bit-ecc"
    assert state.healthy_since is None
    assert state.phase is not Phase.Recovering
    assert [r.action for r in state.steps] == [Action.Cordon, Action.Drain, Action.GPUReset]
    assert cluster.nodes["gpu-1"].unschedulable
    assert not cluster.finished


def test_a_milder_fault_after_a_severe_one_keeps_the_severe_ladder() -> None:
    """XID 74 from NVLink peers after an XID 79: still the reboot ladder, never a reset."""
    cluster = real_fleet()
    draining(cluster, 79)
    agent_reports(cluster, 74)
    run(cluster, "+10s plan ok plan")
    state = cluster.active["gpu-1"]
    assert state.fault == "gpu-unreachable"
    assert state.step is Action.Reboot
    assert Action.GPUReset not in [r.action for r in state.steps]


def test_a_more_severe_reason_moves_the_same_incident_onto_its_ladder() -> None:
    """Finding 6: XID 62 then 54: not closed and reopened; the same Remediation moves onto
    the replace ladder, and the drain that succeeded is not repeated."""
    cluster = real_fleet()
    draining(cluster, 62)
    name = cluster.active["gpu-1"].name
    agent_reports(cluster, 54)
    run(cluster, "+10s plan")
    assert cluster.active["gpu-1"].fault == "gpu-xid-reset", "a step in flight finishes first"
    run(cluster, "ok plan")

    state = cluster.active["gpu-1"]
    assert state.name == name
    assert state.fault == "gpu-contact-support"
    assert Reason.FaultWorsened in announced(cluster)
    assert not released(cluster)
    assert [r.action for r in state.steps] == [Action.Cordon, Action.Drain, Action.Replace]
    assert state.condition is not None
    assert state.condition.reason == "NvidiaXID54Error"
    assert not cluster.finished


def test_a_severe_fault_on_a_node_held_by_a_cordon_only_incident_is_acted_on() -> None:
    cluster = real_fleet()
    agent_reports(cluster, 33)  # a reason only the catch-all knows: cordon and hold
    run(cluster, "plan +1m plan plan")
    state = cluster.active["gpu-1"]
    assert (state.fault, state.reason) == ("gpu-unknown-reason", Reason.LadderExhausted)

    cluster.advance(MIN)
    agent_reports(cluster, 79)
    run(cluster, "plan")
    state = cluster.active["gpu-1"]
    assert state.fault == "gpu-unreachable"
    assert state.step is Action.Drain
    assert state.phase is Phase.Running


def test_a_drain_does_not_make_the_evidence_old() -> None:
    """Acceptance: an agent that reported once (and heartbeats every 5 min) does not hold a
    Drain -> Replace ladder with escalateAfter 0s: Replace starts as the drain ends."""
    cluster = real_fleet()
    draining(cluster, 54)
    cluster.advance(10 * MIN)  # heartbeats only: nothing new reported
    run(cluster, "ok plan")
    assert cluster.active["gpu-1"].step is Action.Replace
    assert cluster.last is not None
    assert any(isinstance(e, Replace) for e in cluster.last.effects)


def test_after_a_repair_the_fault_must_be_reported_again() -> None:
    cluster = real_fleet()
    draining(cluster, 48)
    run(cluster, "ok plan")
    assert cluster.active["gpu-1"].step is Action.GPUReset
    cluster.silent.add("gpu-1")  # no heartbeat either: the condition is as it was
    run(cluster, "ok plan +5m plan")
    state = cluster.active["gpu-1"]
    assert (state.phase, state.reason) == (Phase.Blocked, Reason.EvidenceInsufficient)
    assert {Action.GPUReset, Action.Reboot} == gates.REPAIRS
    cluster.silent.discard("gpu-1")
    agent_reports(cluster, 48)  # reported again after the reset
    run(cluster, "+10s plan")
    after = cluster.active["gpu-1"]
    assert after.step is Action.Replace


def test_a_condition_that_vanished_is_held_not_given_back() -> None:
    """Finding 4: the agent restarted mid-repair and its condition is gone."""
    cluster = real_fleet()
    draining(cluster, 48)
    run(cluster, "ok plan")
    assert cluster.active["gpu-1"].step is Action.GPUReset
    agent_reports(cluster, None)
    for _ in range(3):
        run(cluster, "+10m plan")
    state = cluster.active["gpu-1"]
    assert state.phase is Phase.Blocked
    assert state.reason is Reason.EvidenceInsufficient
    assert "missing condition" in state.message
    assert not released(cluster)
    assert cluster.nodes["gpu-1"].unschedulable
    assert state.step is Action.GPUReset  # held, neither disrupted further nor given back


def test_an_unknown_status_is_no_recovery() -> None:
    cluster = real_fleet()
    draining(cluster, 79)
    agent_reports(cluster, 79, status="Unknown")
    run(cluster, "+10m plan +10m plan")
    state = cluster.active["gpu-1"]
    assert state.healthy_since is None
    assert cluster.nodes["gpu-1"].unschedulable


def test_the_condition_back_in_its_healthy_status_is_recovery() -> None:
    cluster = real_fleet()
    draining(cluster, 79)
    agent_reports(cluster, 0, status="True")
    run(cluster, "+10s plan")
    assert cluster.active["gpu-1"].phase is Phase.Recovering
    run(cluster, "+11m plan")
    assert cluster.finished
    assert cluster.finished[-1].reason is Reason.Recovered
    assert not cluster.nodes["gpu-1"].unschedulable


def test_a_reason_change_before_the_first_step_keeps_the_incident() -> None:
    """Both findings in the tolerate window: the incident neither closes nor reopens."""
    cluster = real_fleet()
    agent_reports(cluster, 48)
    run(cluster, "plan +20s")
    name = cluster.active["gpu-1"].name
    agent_reports(cluster, 63)
    run(cluster, "plan +1m plan")
    state = cluster.active["gpu-1"]
    assert state.name == name
    assert state.step is Action.Cordon
    assert replace(state, name="x").fault == "gpu-double-bit-ecc"


def test_two_findings_in_one_report_still_open_an_incident() -> None:
    """XID 48 and XID 63 in one 15 s report: the reason shows only 63 (no action); the message
    keeps both, and a `message` rule (the default policy's) opens the incident on 48 (D62)."""
    by_message = replace(
        DOUBLE_BIT,
        match=(*DOUBLE_BIT.match, ConditionMatch(XID, "False", message="detected XID-48 on")),
    )
    faults = tuple(by_message if f is DOUBLE_BIT else f for f in FAULTS)
    cluster = FakeCluster(policy(faults=faults), {"gpu-1": node()})
    both = Condition(
        XID,
        "False",
        "NvidiaXID63Error",
        "detected XID-48 on the instance, review kernel logs for additional information.;"
        " detected XID-63 on the instance, review kernel logs for additional information.",
        last_transition_time=cluster.now,
        last_heartbeat_time=cluster.now,
        observed_at=cluster.now,
    )
    others = tuple(c for c in cluster.nodes["gpu-1"].conditions if c.type != XID)
    cluster.edit("gpu-1", conditions=(*others, both))
    run(cluster, "plan +1m plan")
    state = cluster.active["gpu-1"]
    assert state.fault == "gpu-double-bit-ecc"
    assert state.step is Action.Cordon


def test_after_an_unverified_repair_a_fault_reading_absent_is_validated_first() -> None:
    """Finding 4 with validation: the reset failed and the agent restarted (its condition back
    to its default, healthy): the validation decides, not the condition."""
    from remediation_operator.domain.policy import Validation

    check = Validation(after=frozenset({Action.GPUReset}), timeout=20 * MIN)
    cluster = FakeCluster(policy(faults=FAULTS, validation=check), {"gpu-1": node()})
    draining(cluster, 48)
    run(cluster, "ok plan")
    assert cluster.active["gpu-1"].step is Action.GPUReset
    run(cluster, "fail! plan")  # the reset failed for good
    agent_reports(cluster, 0, status="True")  # the agent restarted: healthy at start
    run(cluster, "+10s plan")
    state = cluster.active["gpu-1"]
    assert (state.step, state.reason) == (Action.Validate, Reason.ValidationStarted)
    assert not released(cluster)
    run(cluster, "fail! plan")  # the validation finds the fault
    after = cluster.active["gpu-1"]
    assert after.step is Action.Replace
