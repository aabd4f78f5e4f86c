"""Every transition of the ladder, one table row each: a script of world events, then what the
last plan must show (phase, step, reason, effects, next wake).

Default policy (see fake_cluster): tolerate 2m; Cordon (escalate after 5m); Drain (timeout
30m); GPUReset (timeout 10m, escalate after 5m); Reboot (timeout 30m, escalate after 10m);
Replace (timeout 60m); 2 retries per step; probation 10m. The node turns faulty at T0.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from remediation_operator.domain import remediation
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import (
    Action,
    Actions,
    History,
    OnExhausted,
    OnPDBBlocked,
    OnTimeout,
    Policy,
    ReplaceProvider,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState, StepRecord

from .fake_cluster import (
    MIN,
    SEC,
    T0,
    FakeCluster,
    describe,
    node,
    policy,
    run,
    silent_fault,
    sooner_silence,
    xid_fault,
)

DETECT = "fault plan"
CORDONING = DETECT + " +2m plan"
CORDONED = CORDONING + " plan"
DRAINING = CORDONED + " +5m plan"
RESETTING = DRAINING + " ok plan"
RESET_DONE = RESETTING + " ok plan"
REBOOTING = RESET_DONE + " +5m plan"
REBOOTED = REBOOTING + " ok plan"
REPLACING = REBOOTED + " +10m plan"

DEFAULT_POLICY = policy()
DEFAULT_NODE = node()


@dataclass(frozen=True)
class Row:
    script: str
    phase: Phase | None
    """None: no Remediation exists for the node after the script."""
    step: Action | None
    reason: Reason
    effects: list[str]
    wake: timedelta | None
    """Expected next_wake as an offset from T0 (None: nothing pending)."""
    policy: Policy = DEFAULT_POLICY
    node: NodeView = DEFAULT_NODE
    history: int = 0
    """Finished Remediations (each with a step) the node already had this week."""


def _past_episodes(count: int) -> list[RemediationState]:
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
            steps=(
                StepRecord(Action.Cordon, 1, T0 - timedelta(days=1 + i), Reason.StepStarted, ""),
                StepRecord(Action.Drain, 1, T0 - timedelta(days=1 + i), Reason.StepStarted, ""),
            ),
        )
        for i in range(count)
    ]


ROWS: dict[str, Row] = {
    "fault seen: tolerate": Row(
        DETECT, Phase.Pending, None, Reason.Tolerating, ["!FaultDetected"], 2 * MIN
    ),
    "zero tolerate: cordon at once": Row(
        DETECT,
        Phase.Running,
        Action.Cordon,
        Reason.StepStarted,
        ["!FaultDetected", "Cordon", "Protect", "!StepStarted"],
        10 * SEC,
        policy=policy(faults=(xid_fault(tolerate=timedelta(0)), silent_fault())),
    ),
    "tolerated: cordon starts": Row(
        CORDONING,
        Phase.Running,
        Action.Cordon,
        Reason.StepStarted,
        ["Cordon", "Protect", "!StepStarted"],
        2 * MIN + 10 * SEC,
    ),
    "cordon observed: wait escalateAfter": Row(
        CORDONED,
        Phase.Waiting,
        Action.Cordon,
        Reason.WaitingToEscalate,
        ["!StepSucceeded"],
        7 * MIN,
    ),
    "replan before any deadline: nothing": Row(
        CORDONED + " +1m plan", Phase.Waiting, Action.Cordon, Reason.WaitingToEscalate, [], 7 * MIN
    ),
    "fault outlives escalateAfter: drain, evictions re-tried every 5s": Row(
        DRAINING,
        Phase.Running,
        Action.Drain,
        Reason.StepStarted,
        ["Evict", "!StepStarted"],
        7 * MIN + 5 * SEC,
    ),
    "drain blocked by PDB: evict again, paced": Row(
        DRAINING + " pdb +10s plan",
        Phase.Running,
        Action.Drain,
        Reason.DrainBlockedByPDB,
        ["Evict", "!DrainBlockedByPDB"],
        7 * MIN + 15 * SEC,
    ),
    "drain done, escalateAfter 0: reset at once": Row(
        RESETTING,
        Phase.Running,
        Action.GPUReset,
        Reason.StepStarted,
        ["!StepSucceeded", "Run(GPUReset#1)", "!StepStarted"],
        7 * MIN + 10 * SEC,
    ),
    "drain at its deadline: one last eviction": Row(
        DRAINING + " +30m plan",
        Phase.Running,
        Action.Drain,
        Reason.StepStarted,
        ["Evict"],
        37 * MIN + 30 * SEC,
    ),
    "drain timeout (no PDB): escalate after the last eviction": Row(
        DRAINING + " +30m plan +30s plan",
        Phase.Running,
        Action.GPUReset,
        Reason.StepStarted,
        ["!StepTimedOut", "Run(GPUReset#1)", "!StepStarted"],
        37 * MIN + 40 * SEC,
    ),
    "drain timeout blocked by a PDB: waits (onPDBBlocked Wait)": Row(
        DRAINING + " pdb +30m plan",
        Phase.Blocked,
        Action.Drain,
        Reason.DrainBlockedByPDB,
        ["Evict", "!DrainBlockedByPDB"],
        37 * MIN + 5 * SEC,
    ),
    "drain timeout blocked by a PDB, onPDBBlocked Escalate: escalates": Row(
        DRAINING + " pdb +30m plan",
        Phase.Running,
        Action.GPUReset,
        Reason.StepStarted,
        ["!StepTimedOut", "Run(GPUReset#1)", "!StepStarted"],
        37 * MIN + 10 * SEC,
        policy=policy(faults=(xid_fault(on_pdb_blocked=OnPDBBlocked.Escalate),)),
    ),
    "drain timeout with Force: force once": Row(
        DRAINING + " +30m plan",
        Phase.Running,
        Action.Drain,
        Reason.DrainForced,
        ["Evict(force)", "!DrainForced"],
        37 * MIN + 5 * SEC,
        policy=policy(faults=(xid_fault(on_timeout=OnTimeout.Force),)),
    ),
    "forced drain completes: next step": Row(
        DRAINING + " +30m plan ok plan",
        Phase.Running,
        Action.GPUReset,
        Reason.StepStarted,
        ["!StepSucceeded", "Run(GPUReset#1)", "!StepStarted"],
        37 * MIN + 10 * SEC,
        policy=policy(faults=(xid_fault(on_timeout=OnTimeout.Force),)),
    ),
    "transient failure: retry after backoff": Row(
        RESETTING + " fail plan",
        Phase.Running,
        Action.GPUReset,
        Reason.StepRetrying,
        ["!StepRetrying"],
        7 * MIN + 10 * SEC,
    ),
    "backoff over: attempt 2": Row(
        RESETTING + " fail plan +10s plan",
        Phase.Running,
        Action.GPUReset,
        Reason.StepStarted,
        ["Run(GPUReset#2)", "!StepStarted"],
        7 * MIN + 20 * SEC,
    ),
    "retries used up: escalate": Row(
        RESETTING + " fail plan +10s plan fail plan +20s plan fail plan",
        Phase.Running,
        Action.Reboot,
        Reason.StepStarted,
        ["!StepFailed", "Run(Reboot#1)", "!StepStarted"],
        7 * MIN + 40 * SEC,
    ),
    "permanent failure: escalate at once": Row(
        RESETTING + " fail! plan",
        Phase.Running,
        Action.Reboot,
        Reason.StepStarted,
        ["!StepFailed", "Run(Reboot#1)", "!StepStarted"],
        7 * MIN + 10 * SEC,
    ),
    "reset timeout: escalate": Row(
        RESETTING + " +10m plan",
        Phase.Running,
        Action.Reboot,
        Reason.StepStarted,
        ["!StepTimedOut", "Run(Reboot#1)", "!StepStarted"],
        17 * MIN + 10 * SEC,
    ),
    "reset done: wait escalateAfter": Row(
        RESET_DONE,
        Phase.Waiting,
        Action.GPUReset,
        Reason.WaitingToEscalate,
        ["!StepSucceeded"],
        12 * MIN,
    ),
    "reboot starts (no second do-not-disrupt)": Row(
        REBOOTING,
        Phase.Running,
        Action.Reboot,
        Reason.StepStarted,
        ["Run(Reboot#1)", "!StepStarted"],
        12 * MIN + 10 * SEC,
    ),
    "new bootID and Ready: reboot done": Row(
        REBOOTED,
        Phase.Waiting,
        Action.Reboot,
        Reason.WaitingToEscalate,
        ["!StepSucceeded"],
        22 * MIN,
    ),
    "reboot executor failed: transient": Row(
        REBOOTING + " fail plan",
        Phase.Running,
        Action.Reboot,
        Reason.StepRetrying,
        ["!StepRetrying"],
        12 * MIN + 10 * SEC,
    ),
    "replace starts": Row(
        REPLACING,
        Phase.Running,
        Action.Replace,
        Reason.StepStarted,
        ["Replace(Karpenter)", "!StepStarted"],
        22 * MIN + 10 * SEC,
    ),
    "node gone after replace: succeeded": Row(
        REPLACING + " ok plan",
        Phase.Succeeded,
        Action.Replace,
        Reason.NodeReplaced,
        ["!NodeReplaced"],
        None,
    ),
    "ladder exhausted, Hold: stay quarantined": Row(
        "silence plan plan",
        Phase.Waiting,
        Action.Cordon,
        Reason.LadderExhausted,
        ["!StepSucceeded", "!LadderExhausted"],
        5 * MIN,
    ),
    "ladder exhausted, Fail: failed, left cordoned": Row(
        "silence plan plan",
        Phase.Failed,
        Action.Cordon,
        Reason.LadderExhausted,
        ["!StepSucceeded", "!LadderExhausted"],
        None,
        policy=policy(faults=(xid_fault(), silent_fault(OnExhausted.Fail))),
    ),
    "fault absent after a step: probation": Row(
        CORDONED + " clear plan",
        Phase.Recovering,
        Action.Cordon,
        Reason.FaultCleared,
        ["!FaultCleared"],
        12 * MIN,
    ),
    "re-check before drain: fault gone, no drain": Row(
        CORDONED + " +4m clear +1m plan",
        Phase.Recovering,
        Action.Cordon,
        Reason.FaultCleared,
        ["!FaultCleared"],
        17 * MIN,
    ),
    "probation passed: release and uncordon": Row(
        CORDONED + " clear plan +10m plan",
        Phase.Succeeded,
        Action.Cordon,
        Reason.Recovered,
        ["Release(uncordon)", "Unprotect", "!Recovered"],
        None,
    ),
    "recovered after a reset: drop do-not-disrupt": Row(
        RESET_DONE + " clear plan +10m plan",
        Phase.Succeeded,
        Action.GPUReset,
        Reason.Recovered,
        ["Release(uncordon)", "Unprotect", "!Recovered"],
        None,
    ),
    "fault returns in probation: escalate clock continues": Row(
        CORDONED + " clear plan +3m fault plan",
        Phase.Waiting,
        Action.Cordon,
        Reason.WaitingToEscalate,
        ["!FaultReturned"],
        7 * MIN,
    ),
    "fault returns after the escalate deadline: next step": Row(
        CORDONED + " clear plan +6m fault plan",
        Phase.Running,
        Action.Drain,
        Reason.StepStarted,
        ["!FaultReturned", "Evict", "!StepStarted"],
        8 * MIN + 5 * SEC,
    ),
    "fault clears mid-drain: drain stopped, probation": Row(
        DRAINING + " clear plan",
        Phase.Recovering,
        Action.Drain,
        Reason.FaultCleared,
        ["!FaultCleared"],
        17 * MIN,
    ),
    "fault returns after a stopped drain: drain again": Row(
        DRAINING + " clear plan +1m fault plan",
        Phase.Running,
        Action.Drain,
        Reason.StepStarted,
        ["!FaultReturned", "Evict", "!StepStarted"],
        8 * MIN + 5 * SEC,
    ),
    "fault gone while tolerating: absent for tolerate before it counts as cleared": Row(
        DETECT + " +1m clear plan", Phase.Pending, None, Reason.Tolerating, [], 3 * MIN
    ),
    "fault gone for its tolerate window: cancelled, nothing done": Row(
        DETECT + " +1m clear plan +2m plan",
        Phase.Cancelled,
        None,
        Reason.FaultGone,
        ["!FaultGone"],
        None,
    ),
    "fault flapping under tolerate: one incident, cordoned": Row(
        DETECT + " +30s clear plan +30s fault plan +30s clear plan +30s fault plan",
        Phase.Running,
        Action.Cordon,
        Reason.StepStarted,
        ["Cordon", "Protect", "!StepStarted"],
        2 * MIN + 10 * SEC,
    ),
    "admin uncordons: cancelled, our taint removed, no re-cordon": Row(
        CORDONED + " uncordon plan",
        Phase.Cancelled,
        Action.Cordon,
        Reason.AdminUncordoned,
        ["Release", "Unprotect", "!AdminUncordoned"],
        None,
    ),
    "admin uncordons before the cordon is recorded: cancelled, never re-cordoned": Row(
        CORDONING + " uncordon +1m plan",
        Phase.Cancelled,
        Action.Cordon,
        Reason.AdminUncordoned,
        ["Release", "Unprotect", "!AdminUncordoned"],
        None,
    ),
    "admin cordoned first: noted": Row(
        "cordon " + CORDONING,
        Phase.Running,
        Action.Cordon,
        Reason.StepStarted,
        ["Cordon", "Protect", "!StepStarted", "!AlreadyCordoned"],
        2 * MIN + 10 * SEC,
    ),
    "admin cordoned first: never uncordoned": Row(
        "cordon " + CORDONED + " clear plan +10m plan",
        Phase.Succeeded,
        Action.Cordon,
        Reason.Recovered,
        ["Release", "Unprotect", "!Recovered"],
        None,
    ),
    "node deleted mid-drain: cancelled": Row(
        DRAINING + " delete plan",
        Phase.Cancelled,
        Action.Drain,
        Reason.NodeDeleted,
        ["!NodeDeleted"],
        None,
    ),
    "repeat offender: cordon, then straight to replace": Row(
        CORDONED + " +5m plan",
        Phase.Running,
        Action.Replace,
        Reason.StepStarted,
        ["Replace(Karpenter)", "!StepStarted"],
        7 * MIN + 10 * SEC,
        policy=policy(history=History()),
        history=3,
    ),
    "two episodes only: no skip-ahead": Row(
        DRAINING,
        Phase.Running,
        Action.Drain,
        Reason.StepStarted,
        ["Evict", "!StepStarted"],
        7 * MIN + 5 * SEC,
        policy=policy(history=History()),
        history=2,
    ),
    "cordon lost in a crash: cordon again at the check": Row(
        "fault plan +2m crash plan +10s plan",
        Phase.Running,
        Action.Cordon,
        Reason.StepStarted,
        ["Cordon"],
        2 * MIN + 20 * SEC,
    ),
    "executor lost in a crash: run it again at the check": Row(
        DRAINING + " ok crash plan +10s plan",
        Phase.Running,
        Action.GPUReset,
        Reason.StepStarted,
        ["Run(GPUReset#1)"],
        7 * MIN + 20 * SEC,
    ),
    "manual replace: waiting for a human": Row(
        REPLACING + " +10s plan",
        Phase.Running,
        Action.Replace,
        Reason.ManualReplaceRequested,
        ["!ManualReplaceRequested"],
        22 * MIN + 20 * SEC,
        policy=policy(actions=Actions(replace=ReplaceProvider.Manual)),
    ),
    "node still starting: no remediation": Row(
        DETECT, None, None, Reason.NodeStarting, [], 4 * MIN, node=node(created_at=T0 - MIN)
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_transition(row: Row) -> None:
    cluster = FakeCluster(row.policy, {"gpu-1": row.node}, finished=_past_episodes(row.history))
    plan = run(cluster, row.script)
    state = cluster.active.get("gpu-1") or next(
        (
            s
            for s in reversed(cluster.finished)
            if s.node == "gpu-1" and not s.name.startswith("gpu-1-old")
        ),
        None,
    )
    assert describe(plan.effects) == row.effects
    # The row gives the incident's wake; the plan also wakes when a heartbeat would go stale.
    expected = None if row.wake is None else T0 + row.wake
    assert plan.next_wake == sooner_silence(cluster, expected)
    assert plan.reasons["gpu-1"] is row.reason
    if row.phase is None:
        assert state is None
        return
    assert state is not None
    assert (state.phase, state.step, state.reason) == (row.phase, row.step, row.reason)
    assert state.message.endswith(".")
    if not state.terminal:
        assert state.next_check_at is not None


def test_unchanged_replan_writes_nothing() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED)
    before = cluster.active["gpu-1"]
    again = run(cluster, "+1m plan")
    assert again.remediations == ()
    assert cluster.active["gpu-1"] == before


def test_running_step_replanned_early_writes_nothing() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, DRAINING)
    again = run(cluster, "+3s plan")
    assert again.remediations == ()
    assert describe(again.effects) == []


def test_pdb_message_says_what_and_until_when() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, DRAINING + " pdb +10s plan")
    assert cluster.active["gpu-1"].message == (
        "Drain blocked by PodDisruptionBudget training/trainer-pdb refusing evicting pod"
        " training/trainer-0; retrying evictions; next check at 11:07:15Z, timeout at 11:37:00Z."
    )


def test_episode_clock_is_ours_not_the_conditions() -> None:
    """A reason flapping between two XIDs does not restart tolerate or the incident."""
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, DETECT)
    started = cluster.active["gpu-1"].started_at
    cluster.advance(MIN)
    cluster.edit("gpu-1", conditions=replace_xid(cluster, 46))
    run(cluster, "plan +1m plan")
    state = cluster.active["gpu-1"]
    assert state.started_at == started
    assert state.step is Action.Cordon


def replace_xid(cluster: FakeCluster, xid: int) -> tuple:  # type: ignore[type-arg]
    from .fake_cluster import faulty_conditions

    return faulty_conditions(cluster.now, xid)


def test_admin_cordon_is_recorded_as_not_ours() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, "cordon " + CORDONING)
    assert cluster.active["gpu-1"].cordoned_by_us is False
    cluster2 = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster2, CORDONING)
    assert cluster2.active["gpu-1"].cordoned_by_us is True


def test_reboot_remembers_the_boot_id() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, REBOOTING)
    assert cluster.active["gpu-1"].boot_id_at_step_start == "boot-1"


def test_step_records_tell_the_story() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, RESETTING + " fail plan +10s plan ok plan")
    steps = cluster.active["gpu-1"].steps
    assert [(s.action, s.attempt, s.outcome and s.outcome.value) for s in steps] == [
        (Action.Cordon, 1, "Succeeded"),
        (Action.Drain, 1, "Succeeded"),
        (Action.GPUReset, 1, "TransientFailure"),
        (Action.GPUReset, 2, "Succeeded"),
    ]


def test_do_not_disrupt_is_set_once_and_removed_on_recovery() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, RESETTING)
    assert cluster.protected == {"gpu-1"}
    run(cluster, "ok plan clear plan +10m plan")
    assert cluster.protected == set()
    assert cluster.nodes["gpu-1"].unschedulable is False


def test_repeat_offender_is_announced() -> None:
    cluster = FakeCluster(policy(history=History()), {"gpu-1": node()}, finished=_past_episodes(3))
    plan = run(cluster, DETECT)
    assert describe(plan.effects) == ["!FaultDetected", "!RepeatOffender"]
    assert cluster.active["gpu-1"].repeat_offender


def test_blips_inside_tolerate_do_not_make_a_repeat_offender() -> None:
    cluster = FakeCluster(policy(history=History(max_episodes=2)), {"gpu-1": node()})
    for _ in range(3):
        run(cluster, "fault plan +1m clear plan +1m")
    run(cluster, DETECT)
    assert not cluster.active["gpu-1"].repeat_offender


POLICY_TAG = hashlib.sha256(b"gpu").hexdigest()[:5]


def test_same_minute_second_episode_gets_a_distinct_name() -> None:
    first = remediation.name_for("gpu-1", T0, (), "gpu")
    second = remediation.name_for("gpu-1", T0 + 20 * SEC, {first}, "gpu")
    assert first == f"gpu-1-{POLICY_TAG}-20261130t1100"
    assert second == f"gpu-1-{POLICY_TAG}-20261130t110020"


def test_two_policies_never_compete_for_a_name() -> None:
    """Remediations are cluster-wide: the same node, minute and taken-set under two policies
    give two names (issue 12: a collision made the engine spin on AlreadyExists)."""
    assert remediation.name_for("gpu-1", T0, (), "gpu") != remediation.name_for(
        "gpu-1", T0, (), "gpu-default"
    )


def test_admin_uncordon_is_not_fought_until_the_fault_changes() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED + " uncordon plan")
    plan = run(cluster, "+5m plan +5m plan")
    assert "gpu-1" not in cluster.active
    assert plan.reasons["gpu-1"] is Reason.AdminUncordoned
    assert cluster.nodes["gpu-1"].unschedulable is False
    # The fault clears and comes back (a new lastTransitionTime): a new incident opens.
    run(cluster, "clear plan +1m fault plan")
    assert cluster.active["gpu-1"].phase is Phase.Pending


def test_a_state_written_without_step_outcome_resumes_from_its_records() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, CORDONED)
    cluster.active["gpu-1"] = replace(cluster.active["gpu-1"], step_outcome=None)
    run(cluster, "+5m plan")
    assert cluster.active["gpu-1"].step is Action.Drain
