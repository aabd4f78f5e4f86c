"""Diagnostics before a destructive step (issue 15, D39): a Diagnose step runs first, its
record says where it wrote, and the step goes on whatever it did, at its timeout at the latest."""

from __future__ import annotations

from dataclasses import replace

from remediation_operator.domain.effects import Announce, RunExecutor
from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    ConditionMatch,
    Diagnostics,
    Fault,
    Mode,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase
from tests.domain.fake_cluster import MIN, XID, FakeCluster, node, policy, run

REBOOT_THEN_REPLACE = Fault(
    name="gpu-unreachable",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(46|62|64|79)Error"),),
    ladder=(
        Step(Action.Cordon),
        Step(Action.Reboot, timeout=30 * MIN, escalate_after=10 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    ),
)
TO_PVC = Diagnostics("pvc://gpu-diagnostics/bug-reports", timeout=10 * MIN)


def cordoned(diagnostics: Diagnostics | None = TO_PVC, mode: Mode = Mode.Enforce) -> FakeCluster:
    cluster = FakeCluster(
        policy(faults=(REBOOT_THEN_REPLACE,), diagnostics=diagnostics, mode=mode),
        {"gpu-1": node()},
    )
    run(cluster, "fault plan")
    return cluster


def step(cluster: FakeCluster) -> Action | None:
    return cluster.active["gpu-1"].step


def runs(cluster: FakeCluster) -> list[tuple[Action, int]]:
    assert cluster.last is not None
    return [(e.action, e.attempt) for e in cluster.last.effects if isinstance(e, RunExecutor)]


def reasons(cluster: FakeCluster) -> list[Reason]:
    assert cluster.last is not None
    return [e.reason for e in cluster.last.effects if isinstance(e, Announce)]


def test_diagnostics_run_before_the_reboot_and_their_location_is_recorded() -> None:
    cluster = cordoned()
    run(cluster, "plan")
    state = cluster.active["gpu-1"]
    assert runs(cluster) == [(Action.Diagnose, 1)]
    assert (state.step, state.phase, state.reason) == (
        Action.Diagnose,
        Phase.Running,
        Reason.CollectingDiagnostics,
    )
    location = f"pvc://gpu-diagnostics/bug-reports/{state.name}/diagnose-1"
    assert state.steps[-1].location == location
    assert state.message.startswith(f"Reboot is due; collecting diagnostics to {location} first")
    run(cluster, "+2m ok plan")
    state = cluster.active["gpu-1"]
    diagnose = state.steps[-2]
    assert (diagnose.outcome, diagnose.reason) == (Outcome.Succeeded, Reason.DiagnosticsCollected)
    # What the Job said (the node program: what it wrote and what it could not) is kept.
    assert (
        diagnose.message == f"Diagnostics collected to {location} in 2m (reported); Reboot follows."
    )
    assert state.step is Action.Reboot
    assert runs(cluster) == [(Action.Reboot, 1)]


def test_failed_diagnostics_are_recorded_and_the_reboot_goes_on() -> None:
    cluster = cordoned()
    run(cluster, "plan +1m fail plan")
    state = cluster.active["gpu-1"]
    diagnose = state.steps[-2]
    assert (diagnose.outcome, diagnose.reason) == (
        Outcome.PermanentFailure,
        Reason.DiagnosticsFailed,
    )
    assert "failed after 1m: reported; Reboot goes on without them" in diagnose.message
    assert Reason.DiagnosticsFailed in reasons(cluster)
    assert state.step is Action.Reboot


def test_diagnostics_never_hold_the_step_past_their_timeout() -> None:
    cluster = cordoned()
    run(cluster, "plan +9m plan")
    assert cluster.active["gpu-1"].step is Action.Diagnose
    run(cluster, "+1m plan")
    state = cluster.active["gpu-1"]
    assert state.steps[-2].reason is Reason.DiagnosticsFailed
    assert "(timed out)" in state.steps[-2].message
    assert state.step is Action.Reboot


def test_removing_diagnostics_while_they_run_keeps_their_timeout() -> None:
    """Issue 22: the running step keeps the timeout it started with (`steps[].timeout`), so
    editing the policy cannot leave it running for ever."""
    cluster = cordoned()
    run(cluster, "plan")
    assert cluster.active["gpu-1"].steps[-1].timeout == 10 * MIN
    cluster.policy = replace(cluster.policy, diagnostics=None)
    run(cluster, "+9m plan")
    assert cluster.active["gpu-1"].step is Action.Diagnose
    run(cluster, "+1m plan")
    state = cluster.active["gpu-1"]
    assert (state.steps[-2].reason, state.step) == (Reason.DiagnosticsFailed, Action.Reboot)
    assert "(timed out)" in state.steps[-2].message


def test_each_destructive_step_gets_its_own_run_and_retries_get_none() -> None:
    cluster = cordoned()
    run(cluster, "plan ok plan ok plan")  # diagnostics, reboot done (new bootID)
    assert step(cluster) is Action.Reboot
    run(cluster, "+10m plan")  # the fault stayed: Replace is due, diagnostics first
    assert runs(cluster) == [(Action.Diagnose, 2)]
    state = cluster.active["gpu-1"]
    assert state.steps[-1].location.endswith(f"{state.name}/diagnose-2")
    run(cluster, "ok plan")
    assert step(cluster) is Action.Replace
    actions = [r.action for r in cluster.active["gpu-1"].steps]
    assert actions == [
        Action.Cordon,
        Action.Diagnose,
        Action.Reboot,
        Action.Diagnose,
        Action.Replace,
    ]


def test_only_the_chosen_steps_and_never_in_dry_run() -> None:
    reboot_only = Diagnostics("s3://bucket/gpu", before=frozenset({Action.Replace}))
    cluster = cordoned(reboot_only)
    run(cluster, "plan")
    assert runs(cluster) == [(Action.Reboot, 1)]
    dry = cordoned(mode=Mode.DryRun)
    run(dry, "plan")
    assert Action.Diagnose not in [r.action for r in dry.active["gpu-1"].steps]


def test_the_job_gets_the_location_and_the_claim() -> None:
    job = TO_PVC.job("rem-1", 2)
    assert job.claim == "gpu-diagnostics"
    assert job.env == {
        "REMEDIATION_DIAGNOSTICS_LOCATION": "pvc://gpu-diagnostics/bug-reports/rem-1/diagnose-2",
        "REMEDIATION_DIAGNOSTICS_DIR": "/diagnostics/bug-reports/rem-1/diagnose-2",
    }
    upload = Diagnostics("s3://bucket/gpu/", executor=ActionExecutor(job_template={"spec": {}}))
    job = upload.job("rem-1", 1)
    assert job.claim is None
    assert job.env == {"REMEDIATION_DIAGNOSTICS_LOCATION": "s3://bucket/gpu/rem-1/diagnose-1"}
    assert job.job_template == {"spec": {}}
