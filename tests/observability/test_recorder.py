"""The engine's Recorder: one log line per fact, and metrics labelled by policy and outcome.

Real: `handlers.recorder.Recorder`, `observability.metrics.Metrics`. Faked: the structlog
logger, by a hand-written one that keeps (event, fields) of every line.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.effects import Severity
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome
from remediation_operator.engine.ports import Explanation, StepTransition
from remediation_operator.handlers.recorder import Recorder
from remediation_operator.observability.metrics import Metrics

NOW = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    warning = debug = info


def started(attempt: int = 1) -> tuple[Explanation, StepTransition]:
    explanation = Explanation(
        policy="gpu",
        node="gpu-1",
        remediation="gpu-1-r",
        reason=Reason.StepStarted,
        message=f"Started Drain (attempt {attempt}).",
        severity=Severity.Normal,
        action=Action.Drain,
        at=NOW,
    )
    transition = StepTransition(
        policy="gpu",
        node="gpu-1",
        remediation="gpu-1-r",
        fault="xid",
        action=Action.Drain,
        attempt=attempt,
        reason=Reason.StepStarted,
    )
    return explanation, transition


def test_a_step_start_is_logged_once_and_counted_once() -> None:
    lines, metrics = Lines(), Metrics()
    recorder = Recorder(metrics, lines)
    explanation, transition = started()

    recorder.announced(explanation)
    recorder.step(transition)

    assert [event for event, _ in lines.lines] == ["step_started"]
    [(_, fields)] = lines.lines
    assert fields["message"] == "Started Drain (attempt 1)."
    assert fields["step"] == "Drain"
    count = metrics.registry.get_sample_value(
        "gpuops_remediation_steps_started_total", {"policy": "gpu", "action": "Drain"}
    )
    assert count == 1


def test_a_step_end_is_logged_and_counted_with_the_outcome_vocabulary() -> None:
    lines, metrics = Lines(), Metrics()
    recorder = Recorder(metrics, lines)

    end = StepTransition(
        policy="gpu",
        node="gpu-1",
        remediation="gpu-1-r",
        fault="xid",
        action=Action.Drain,
        attempt=1,
        reason=Reason.StepTimedOut,
        outcome=Outcome.PermanentFailure,
        duration=timedelta(minutes=30),
    )

    recorder.step(end)

    [(event, fields)] = lines.lines
    assert event == "step_finished"
    assert fields["outcome"] == "PermanentFailure"
    assert fields["reason"] == "StepTimedOut"
    labels = {"policy": "gpu", "action": "Drain", "outcome": "PermanentFailure"}
    finished = metrics.registry.get_sample_value(
        "gpuops_remediation_steps_finished_total", {**labels, "reason": "StepTimedOut"}
    )
    assert finished == 1
    duration = metrics.registry.get_sample_value(
        "gpuops_remediation_step_duration_seconds_sum", labels
    )
    assert duration == 1800
