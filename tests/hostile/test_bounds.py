"""Bounded writes (issue 24, item 5): text from outside is cut with a marker before it reaches
a status, an Event or a log line; step records do not grow with retries; the largest
Remediation the operator can write stays under `bounds.REMEDIATION_BYTES`."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import structlog

from remediation_operator.api.remediation_status import from_status, to_status
from remediation_operator.domain import bounds
from remediation_operator.domain.fleet import Progress, StepObservation
from remediation_operator.domain.policy import (
    LADDER_ORDER,
    Action,
    ConditionMatch,
    Fault,
    Policy,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    ObservedCondition,
    Outcome,
    Phase,
    RemediationState,
    StepRecord,
)
from remediation_operator.observability import logs
from tests.engine.conftest import Harness

T0 = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
HUGE = "NVRM: Xid 79, GPU has fallen off the bus. " * 21_000  # ~900,000 characters


def test_cut_keeps_short_text_and_marks_what_it_cut() -> None:
    assert bounds.cut("short") == "short"
    assert bounds.cut("x" * bounds.TEXT) == "x" * bounds.TEXT
    cut = bounds.cut(HUGE)
    assert len(cut) <= bounds.TEXT
    assert cut.startswith(HUGE[:900])
    kept = cut.index(" …[")
    assert cut.endswith(f" …[{len(HUGE) - kept} more characters]")


def test_lists_of_names_keep_twenty_and_count_the_rest() -> None:
    pods = tuple(f"training/worker-{i}" for i in range(500))
    seen = bounds.observation(
        StepObservation(Action.Drain, 1, Progress.InProgress, HUGE, blocked_pods=pods)
    )
    assert seen.blocked_pods == (*pods[:20], "…and 480 more")
    assert len(seen.message) <= bounds.TEXT


def record(
    action: Action, attempt: int, outcome: Outcome | None = Outcome.TransientFailure
) -> StepRecord:
    return StepRecord(action, attempt, T0, Reason.StepRetrying, "", T0, outcome)


def test_retries_keep_the_first_and_the_latest_attempt_and_count_the_others() -> None:
    steps: tuple[StepRecord, ...] = (record(Action.Cordon, 1, Outcome.Succeeded),)
    dropped = 0
    for attempt in range(1, 51):
        steps, dropped = bounds.appended(steps, record(Action.GPUReset, attempt), dropped)
    assert [(r.action, r.attempt) for r in steps] == [
        (Action.Cordon, 1),
        (Action.GPUReset, 1),
        (Action.GPUReset, 50),
    ]
    assert dropped == 48
    # Validation runs are never compacted: their count names the next validation Job.
    for attempt in range(1, 4):
        steps, dropped = bounds.appended(steps, record(Action.Validate, attempt), dropped)
    assert [r.attempt for r in steps if r.action is Action.Validate] == [1, 2, 3]


def test_the_largest_remediation_stays_under_its_bound() -> None:
    """Every field at its largest: the longest names, one record of each kind per ladder
    step (Diagnose, first and latest attempt, Validate), every message four times the text
    bound (outside text plus the operator's own sentence around it)."""
    long = "n" * 253
    text = "m" * (4 * bounds.TEXT)
    condition = ObservedCondition(
        bounds.cut(HUGE), bounds.cut(HUGE), bounds.cut(HUGE), bounds.cut(HUGE), T0, T0
    )
    steps = []
    for action in LADDER_ORDER:
        steps += [
            StepRecord(
                Action.Diagnose,
                1,
                T0,
                Reason.DiagnosticsCollected,
                text,
                T0,
                Outcome.Succeeded,
                location="pvc://" + "d" * 500,
            ),
            StepRecord(action, 1, T0, Reason.StepRetrying, text, T0, Outcome.TransientFailure),
            StepRecord(action, 100, T0, Reason.StepFailed, text, T0, Outcome.PermanentFailure),
            StepRecord(
                Action.Validate, 1, T0, Reason.ValidationFailed, text, T0, Outcome.PermanentFailure
            ),
        ]
    state = RemediationState(
        name=long,
        node=long,
        policy=long,
        fault=long,
        phase=Phase.Failed,
        reason=Reason.LadderExhausted,
        message=text,
        started_at=T0,
        condition=condition,
        step_index=len(LADDER_ORDER) - 1,
        step=Action.Replace,
        attempt=100,
        step_started_at=T0,
        step_finished_at=T0,
        finished_at=T0,
        steps=tuple(steps),
        steps_dropped=10**6,
        evidence_at_step_end=condition,
        boot_id_at_step_start=long,
    )
    size = len(json.dumps(to_status(state, generation=1)))
    assert size < bounds.REMEDIATION_BYTES, size


async def test_a_step_failing_with_a_huge_message_a_hundred_times_stays_small(
    harness: Harness,
) -> None:
    """The engine end to end (manual clock): a GPU reset whose Job fails over and over with a
    900,000-character message; the Remediation written stays small and keeps two records of
    the reset, the Events and log lines it produced are cut."""
    fault = Fault(
        name="gpu-xid",
        match=(ConditionMatch("AcceleratedHardwareReady", "False", r"NvidiaXID79Error"),),
        ladder=(
            Step(Action.Cordon),
            Step(Action.GPUReset, timeout=timedelta(days=30), retries=100),
        ),
    )
    policy = Policy(name="gpu", faults=(fault,))
    cluster, clock = harness.cluster, harness.clock
    cluster.set_condition("gpu-0", "AcceleratedHardwareReady", "False", "NvidiaXID79Error", HUGE)
    largest = 0
    for _ in range(120):
        await harness.reconcile(policy)
        running = [e for e in cluster.executions("gpu-0") if e.progress is Progress.InProgress]
        if running:
            finished = cluster.finish_execution("gpu-0", Action.GPUReset, succeed=False)
            finished.message = HUGE
        for record in cluster.remediations():
            largest = max(largest, len(json.dumps(to_status(record.state))))
        clock.advance(timedelta(minutes=10))
        cluster.beat("gpu-0")
    (record,) = cluster.remediations()
    resets = [r for r in record.state.steps if r.action is Action.GPUReset]
    assert len(resets) == 2, [r.attempt for r in resets]
    assert resets[-1].attempt > 50
    assert record.state.steps_dropped == resets[-1].attempt - 2
    assert largest < 32 * 1024, largest
    assert (
        from_status(to_status(record.state), name=record.state.name, node="gpu-0", policy="gpu")
        == record.state
    )
    for event in cluster.events_for("Node", "gpu-0"):
        assert len(event.message) <= 4 * bounds.TEXT


def test_a_log_line_never_carries_a_megabyte() -> None:
    sink = io.StringIO()
    structlog.configure(
        processors=[logs.bounded, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(file=sink),
    )
    try:
        structlog.get_logger().warning(
            "reconcile_incomplete", error=HUGE, applied=["x"] * 10_000, count=3
        )
    finally:
        structlog.reset_defaults()
    line = json.loads(sink.getvalue())
    assert len(line["error"]) <= bounds.LOG_TEXT
    assert line["error"].endswith("more characters]")
    assert len(line["applied"]) == logs.LIST_ITEMS + 1
    assert line["count"] == 3
    assert len(sink.getvalue()) < 2 * bounds.LOG_TEXT


def test_a_condition_past_the_bound_still_equals_its_stored_copy() -> None:
    """The holds that keep the operator from fighting an administrator (AdminUncordoned,
    Failed) and the evidence gate compare the stored (cut) condition with the one seen now."""
    from remediation_operator.domain import detection, gates
    from remediation_operator.domain.fleet import Condition

    seen = Condition("T" * 2000, "False" * 300, "R" * 5000, HUGE, T0, T0)
    stored = ObservedCondition(
        bounds.cut(seen.type),
        bounds.cut(seen.status),
        bounds.cut(seen.reason),
        bounds.cut(seen.message),
        T0,
        T0,
    )
    assert detection._same_condition(stored, seen)
    assert gates.unchanged_since(stored, seen)
    moved = Condition(seen.type, seen.status, "R" * 4999, "", T0, T0)
    assert not gates.unchanged_since(stored, moved)
    assert bounds.same("short", "short")
    assert not bounds.same("short", "other")
