"""Events, logs and metrics tell the same story as the Remediation's steps[]."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain.effects import Announce, Severity
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, StepRecord
from remediation_operator.engine import explain
from tests.engine.conftest import T0, state


def test_a_new_step_is_a_start_and_a_finished_one_an_end_with_its_duration() -> None:
    before = state("gpu-0", step=Action.Drain, phase=Phase.Running)
    drained = replace(
        before.steps[0],
        finished_at=T0 + timedelta(minutes=7),
        outcome=Outcome.Succeeded,
        reason=Reason.StepSucceeded,
    )
    reset = StepRecord(Action.GPUReset, 1, T0 + timedelta(minutes=7), Reason.StepStarted, "")
    after = replace(before, steps=(drained, reset))

    ended, started = explain.transitions(before, after)

    assert (ended.action, ended.outcome, ended.duration) == (
        Action.Drain,
        Outcome.Succeeded,
        timedelta(minutes=7),
    )
    assert (started.action, started.outcome, started.attempt) == (Action.GPUReset, None, 1)
    assert [explain.action_result(t) for t in (ended, started)] == ["succeeded", "started"]
    assert list(explain.transitions(after, after)) == []


def test_a_new_remediation_reports_every_step_it_already_holds() -> None:
    created = state("gpu-0", step=Action.Cordon, phase=Phase.Running)
    (started,) = explain.transitions(None, created)
    assert (started.remediation, started.fault, started.reason) == (
        created.name,
        "gpu-xid-reset",
        Reason.StepStarted,
    )


def test_a_timeout_is_counted_apart_from_other_permanent_failures() -> None:
    running = state("gpu-0", step=Action.GPUReset, phase=Phase.Running)
    timed_out = replace(
        running,
        steps=(
            replace(
                running.steps[0],
                finished_at=T0 + timedelta(minutes=10),
                outcome=Outcome.PermanentFailure,
                reason=Reason.StepTimedOut,
            ),
        ),
    )
    (ended,) = explain.transitions(running, timed_out)
    assert explain.action_result(ended) == "timed_out"
    assert set(explain.ACTION_RESULTS) >= {explain.action_result(ended), "cancelled"}


def test_announcements_carry_what_logs_bind() -> None:
    said = Announce(
        "gpu-0", "gpu-0-x", Reason.DrainBlockedByPDB, "Blocked.", Severity.Warning, Action.Drain
    )
    record = explain.explanation(said, "gpu", T0)
    assert explain.log_fields(record) == {
        "policy": "gpu",
        "node": "gpu-0",
        "reason": "DrainBlockedByPDB",
        "severity": "Warning",
        "step": "Drain",
        "remediation": "gpu-0-x",
    }
    assert record.at == T0


def test_log_event_names_are_snake_case_facts() -> None:
    assert explain.event_name(Reason.StepStarted) == "step_started"
    assert explain.event_name(Reason.DrainBlockedByPDB) == "drain_blocked_by_pdb"
    assert explain.event_name(Reason.NodeClaimDeleted) == "node_claim_deleted"
    assert explain.event_name(Reason.DryRun) == "dry_run"
