"""Validation before return to service (issue 15, D37): after an in-place repair succeeds, a
validation Job runs before probation; its failure is evidence and the ladder climbs at once."""

from __future__ import annotations

from dataclasses import replace

from remediation_operator.domain import stage
from remediation_operator.domain.effects import Announce, Release, Replace, RunExecutor
from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    Mode,
    Step,
    Validation,
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
CHECK = Validation(after=frozenset({Action.Reboot}), timeout=20 * MIN)


def rebooted(validation: Validation | None = CHECK, mode: Mode = Mode.Enforce) -> FakeCluster:
    """A node whose reboot has just been observed done (new bootID, Ready)."""
    cluster = FakeCluster(
        policy(faults=(REBOOT_THEN_REPLACE,), validation=validation, mode=mode),
        {"gpu-1": node()},
    )
    run(cluster, "fault plan plan ok")
    assert cluster.active["gpu-1"].step is Action.Reboot
    return cluster


def reasons(cluster: FakeCluster) -> list[Reason]:
    assert cluster.last is not None
    return [e.reason for e in cluster.last.effects if isinstance(e, Announce)]


def runs(cluster: FakeCluster) -> list[tuple[Action, int]]:
    assert cluster.last is not None
    return [(e.action, e.attempt) for e in cluster.last.effects if isinstance(e, RunExecutor)]


def test_a_reboot_that_succeeded_is_validated_before_anything_else() -> None:
    cluster = rebooted()
    run(cluster, "clear plan")
    state = cluster.active["gpu-1"]
    assert runs(cluster) == [(Action.Validate, 1)]
    assert (state.step, state.phase, state.reason) == (
        Action.Validate,
        Phase.Running,
        Reason.ValidationStarted,
    )
    assert stage.of(state) is stage.Stage.Running
    assert [r.action for r in state.steps] == [Action.Cordon, Action.Reboot, Action.Validate]
    assert state.steps[1].outcome is Outcome.Succeeded
    assert "Reboot succeeded; validating the node" in state.message
    assert Reason.ValidationStarted in reasons(cluster)
    # Nothing is released while the validation runs, even with the fault gone.
    assert cluster.nodes["gpu-1"].unschedulable


def test_a_failing_validation_escalates_even_when_the_condition_cleared() -> None:
    cluster = rebooted()
    run(cluster, "clear plan +3m fail plan")
    state = cluster.active["gpu-1"]
    validate = state.steps[2]
    assert (validate.action, validate.outcome, validate.reason) == (
        Action.Validate,
        Outcome.PermanentFailure,
        Reason.ValidationFailed,
    )
    assert validate.finished_at is not None
    assert validate.message.startswith("Validation failed after 3m: reported; escalating to")
    assert state.step is Action.Replace
    assert cluster.last is not None
    assert any(isinstance(e, Replace) for e in cluster.last.effects)
    assert [r for r in reasons(cluster) if r is Reason.ValidationFailed]


def test_a_passing_validation_starts_probation_and_then_releases() -> None:
    cluster = rebooted()
    run(cluster, "clear plan +2m ok plan")
    state = cluster.active["gpu-1"]
    validate = state.steps[-1]
    assert (validate.outcome, validate.reason) == (Outcome.Succeeded, Reason.ValidationPassed)
    assert validate.message.startswith("Validation passed in 2m (reported); the node may return")
    assert state.phase is Phase.Recovering
    assert cluster.nodes["gpu-1"].unschedulable
    run(cluster, "+10m plan")
    closed = cluster.finished[-1]
    assert (closed.phase, closed.reason) == (Phase.Succeeded, Reason.Recovered)
    assert cluster.last is not None
    assert Release("gpu-1", uncordon=True) in cluster.last.effects
    assert not cluster.nodes["gpu-1"].unschedulable


def test_a_validation_that_passes_while_the_fault_stays_escalates_after_the_repairs_wait() -> None:
    cluster = rebooted()
    run(cluster, "plan ok plan")
    state = cluster.active["gpu-1"]
    assert (state.phase, state.reason) == (Phase.Waiting, Reason.WaitingToEscalate)
    run(cluster, "+9m plan")
    assert cluster.active["gpu-1"].reason is Reason.WaitingToEscalate
    run(cluster, "+1m plan")
    assert cluster.active["gpu-1"].step is Action.Replace


def test_a_validation_that_does_not_finish_in_time_counts_as_failed() -> None:
    cluster = rebooted()
    run(cluster, "clear plan +20m plan")
    state = cluster.active["gpu-1"]
    validate = state.steps[2]
    assert (validate.outcome, validate.reason) == (
        Outcome.PermanentFailure,
        Reason.ValidationFailed,
    )
    assert validate.message == "Validation did not finish within 20m; escalating to Replace."
    assert state.step is Action.Replace


def test_without_validation_or_in_dry_run_a_reboot_goes_straight_to_probation() -> None:
    for cluster in (rebooted(validation=None), rebooted(mode=Mode.DryRun)):
        run(cluster, "clear plan")
        assert Action.Validate not in [r.action for r in cluster.active["gpu-1"].steps]
        assert cluster.active["gpu-1"].phase is Phase.Recovering
        assert runs(cluster) == []


def test_only_the_repairs_listed_in_after_are_validated() -> None:
    cluster = rebooted(validation=replace(CHECK, after=frozenset({Action.GPUReset})))
    run(cluster, "clear plan")
    assert cluster.active["gpu-1"].phase is Phase.Recovering
    assert runs(cluster) == []


def test_a_reset_and_a_reboot_are_each_validated_by_their_own_job() -> None:
    """Job names come from (remediation, action, attempt): the second validation of an
    incident must not find the first one's finished Job."""
    fault = Fault(
        name="gpu-xid",
        match=(ConditionMatch(XID, "False", r"NvidiaXID(46|62|64|79)Error"),),
        ladder=(
            Step(Action.Cordon),
            Step(Action.GPUReset, timeout=10 * MIN),
            Step(Action.Reboot, timeout=30 * MIN),
            Step(Action.Replace),
        ),
    )
    cluster = FakeCluster(policy(faults=(fault,), validation=Validation()), {"gpu-1": node()})
    run(cluster, "fault plan plan ok plan")  # the reset succeeded: first validation
    assert runs(cluster) == [(Action.Validate, 1)]
    run(cluster, "fail plan ok plan")  # it failed: Reboot, which succeeded: second validation
    assert runs(cluster) == [(Action.Validate, 2)]
    assert [r.action for r in cluster.active["gpu-1"].steps] == [
        Action.Cordon,
        Action.GPUReset,
        Action.Validate,
        Action.Reboot,
        Action.Validate,
    ]
