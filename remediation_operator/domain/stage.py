"""The stage of an incident: one explicit value, derived in one place, with its transition table.

The phase is what users read; the stage is what the planner decides on. `of` derives it from
a RemediationState (which is all that survives a restart), every decision dispatches on it,
and `check` refuses a move the table does not list, the way h11's connection state machine
and Karpenter's node health controller make an impossible transition an error instead of a
silent corruption of state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from enum import StrEnum

from remediation_operator.domain import bounds
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, RemediationState, StepRecord


class Stage(StrEnum):
    Tolerating = "Tolerating"
    """The fault was seen; no step yet (the tolerate window runs, or a flap clears)."""
    Running = "Running"
    """An attempt of the current step is in flight."""
    Retrying = "Retrying"
    """The current step's last attempt failed transiently; the next one is due later."""
    StepOver = "StepOver"
    """The current step ended; the next one follows after `escalateAfter` if the fault stays."""
    Probation = "Probation"
    """The fault is absent after a step; `recovery.healthyFor` runs."""
    Closed = "Closed"
    """Terminal: Succeeded, Failed or Cancelled."""


TRANSITIONS: Mapping[Stage, frozenset[Stage]] = {
    Stage.Tolerating: frozenset(
        # A start may end at once: a DryRun step, or a cordon already in place.
        {Stage.Tolerating, Stage.Running, Stage.StepOver, Stage.Closed}
    ),
    Stage.Running: frozenset(
        # Force starts a new attempt of the same step; a fault gone ends the step.
        {Stage.Running, Stage.Retrying, Stage.StepOver, Stage.Closed}
    ),
    Stage.Retrying: frozenset({Stage.Retrying, Stage.Running, Stage.StepOver, Stage.Closed}),
    Stage.StepOver: frozenset(
        # The next step, the same step resumed after a flap, probation, or the end.
        {Stage.StepOver, Stage.Running, Stage.Probation, Stage.Closed}
    ),
    Stage.Probation: frozenset(
        # The fault returned: back to where the ladder was (a step over or still running).
        {Stage.Probation, Stage.StepOver, Stage.Closed}
    ),
    Stage.Closed: frozenset(),
}
"""From each stage, the stages one move of the planner may lead to."""


def of(state: RemediationState) -> Stage:
    """The incident's stage; the one place that reads which fields are set."""
    if state.terminal:
        return Stage.Closed
    if state.step is None or state.step_index is None:
        return Stage.Tolerating
    if state.healthy_since is not None:
        return Stage.Probation
    if state.step_finished_at is None:
        last = state.steps[-1].outcome if state.steps else None
        return Stage.Retrying if last is Outcome.TransientFailure else Stage.Running
    return Stage.StepOver


class IllegalTransitionError(AssertionError):
    """A planner bug: a move the transition table does not allow."""


def check(before: RemediationState, after: RemediationState) -> Stage:
    """The stage of `after`, after checking that `before` may move there."""
    old, new = of(before), of(after)
    if new not in TRANSITIONS[old]:
        raise IllegalTransitionError(f"{before.name}: {old} may not move to {new}")
    return new


def accompany(
    state: RemediationState,
    action: Action,
    attempt: int,
    now: datetime,
    reason: Reason,
    message: str,
    check: datetime,
    location: str = "",
    timeout: timedelta | None = None,
) -> RemediationState:
    """Enter Running with a step that accompanies a rung (Validate after a repair, Diagnose
    before one): a new record, the rung's ladder position kept, its timeout recorded."""
    record = StepRecord(action, attempt, now, reason, message, location=location, timeout=timeout)
    steps, dropped = bounds.appended(state.steps, record, state.steps_dropped)
    return replace(
        state,
        phase=Phase.Running,
        reason=reason,
        message=message,
        step=action,
        attempt=attempt,
        step_started_at=now,
        step_finished_at=None,
        step_outcome=None,
        steps=steps,
        steps_dropped=dropped,
        next_check_at=check,
    )
