"""The ladder as a transition table: what follows a step's outcome, and which step comes next.

DESIGN section 3's step outcome contract in one place: Succeeded waits `escalateAfter` and
then climbs; TransientFailure retries with backoff within the step's timeout, up to `retries`;
PermanentFailure and timeout climb at once. A drain that times out under `onTimeout: Force`
is forced once instead. Repeat offenders (history) jump ahead after the cordon. The next step
is found by action (`next_after`), so an edited ladder never repeats a step that ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from remediation_operator.domain.policy import LADDER_ORDER, Action, OnTimeout, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome

BACKOFF_BASE = timedelta(seconds=10)
BACKOFF_CAP = timedelta(minutes=5)


class Move(StrEnum):
    """What the ladder does after a step ends (or a step's attempt ends)."""

    Wait = "Wait"
    """The step succeeded: watch the fault for `escalateAfter`, then climb."""
    Retry = "Retry"
    """A transient failure with retries left: the same step again after a backoff."""
    Climb = "Climb"
    """The step failed for good (or timed out): the next step, at once."""
    Force = "Force"
    """A drain timed out and the policy says force: delete the remaining pods once."""


@dataclass(frozen=True)
class Transition:
    move: Move
    outcome: Outcome
    """What the StepRecord of the attempt that just ended says."""
    reason: Reason


TABLE: dict[tuple[Outcome, bool], Transition] = {
    # (outcome of the attempt, retries left?) -> transition; timeouts are handled by `timed_out`.
    (Outcome.Succeeded, True): Transition(Move.Wait, Outcome.Succeeded, Reason.StepSucceeded),
    (Outcome.Succeeded, False): Transition(Move.Wait, Outcome.Succeeded, Reason.StepSucceeded),
    (Outcome.TransientFailure, True): Transition(
        Move.Retry, Outcome.TransientFailure, Reason.StepRetrying
    ),
    (Outcome.TransientFailure, False): Transition(
        Move.Climb, Outcome.PermanentFailure, Reason.StepFailed
    ),
    (Outcome.PermanentFailure, True): Transition(
        Move.Climb, Outcome.PermanentFailure, Reason.StepFailed
    ),
    (Outcome.PermanentFailure, False): Transition(
        Move.Climb, Outcome.PermanentFailure, Reason.StepFailed
    ),
}


def after(step: Step, attempt: int, outcome: Outcome) -> Transition:
    """The transition after attempt `attempt` (1-based) of `step` ended with `outcome`."""
    if outcome is Outcome.Cancelled:
        raise ValueError("a cancelled step does not move the ladder")
    return TABLE[(outcome, attempt <= step.retries)]


def timed_out(step: Step, forced_already: bool) -> Transition:
    """The transition when `step` ran past its timeout."""
    if step.action is Action.Drain and step.on_timeout is OnTimeout.Force and not forced_already:
        return Transition(Move.Force, Outcome.Succeeded, Reason.DrainForced)
    return Transition(Move.Climb, Outcome.PermanentFailure, Reason.StepTimedOut)


def deadline(step: Step, first_started_at: datetime) -> datetime | None:
    """When the step times out, measured from its first attempt; None: no limit."""
    return None if step.timeout is None else first_started_at + step.timeout


def backoff(attempt: int) -> timedelta:
    """The pause after failed attempt `attempt`: 10s, 20s, 40s ... capped at 5m."""
    exponent = max(0, min(attempt - 1, 16))
    return min(BACKOFF_BASE * (1 << exponent), BACKOFF_CAP)


def retry_at(step: Step, attempt: int, failed_at: datetime, first_started_at: datetime) -> datetime:
    """When the next attempt starts; never after the step's timeout (which then fires first)."""
    at = failed_at + backoff(attempt)
    limit = deadline(step, first_started_at)
    return at if limit is None else min(at, limit)


def _rank(action: Action) -> int:
    return LADDER_ORDER.index(action)


def first(ladder: tuple[Step, ...], skip_to: Action | None = None) -> int | None:
    """Index of the episode's first step; with `skip_to` (repeat offender) after the cordon."""
    if not ladder:
        return None
    if skip_to is None or ladder[0].action is Action.Cordon:
        return 0
    return _jump(ladder, 0, skip_to)


def _jump(ladder: tuple[Step, ...], start: int, skip_to: Action) -> int:
    target = _rank(skip_to)
    for i in range(start, len(ladder)):
        if _rank(ladder[i].action) >= target:
            return i
    return len(ladder) - 1


def index_of(ladder: tuple[Step, ...], action: Action | None) -> int | None:
    """Where `action` is in the (possibly edited) ladder; None: not there (or no action)."""
    if action is None:
        return None
    return next((i for i, step in enumerate(ladder) if step.action is action), None)


def next_after(
    ladder: tuple[Step, ...], action: Action, skip_to: Action | None = None
) -> int | None:
    """Index of the first step whose action comes after `action` in LADDER_ORDER.

    An incident's position is the action it reached, not an index: a ladder edited
    mid-incident (a rung inserted or removed) is followed on from that action, so a step that
    already ran is never run again. A repeat offender (`skip_to`) jumps after its cordon.
    """
    rank = _rank(action)
    for i, step in enumerate(ladder):
        if _rank(step.action) > rank:
            if skip_to is not None and action is Action.Cordon:
                return _jump(ladder, i, skip_to)
            return i
    return None
