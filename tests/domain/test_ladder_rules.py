"""The ladder's rules in isolation: backoff, timeouts, the next step, repeat-offender jumps."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediation_operator.domain import ladder
from remediation_operator.domain.actions import ACTIONS
from remediation_operator.domain.policy import DISRUPTIVE, LADDER_ORDER, Action, OnTimeout, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome

from .fake_cluster import MIN, SEC, T0

FULL = tuple(
    Step(a) for a in (Action.Cordon, Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace)
)
NO_RESET = tuple(Step(a) for a in (Action.Cordon, Action.Drain, Action.Reboot))


@pytest.mark.parametrize(
    ("attempt", "pause"),
    [(1, 10 * SEC), (2, 20 * SEC), (3, 40 * SEC), (5, 160 * SEC), (6, 5 * MIN), (40, 5 * MIN)],
)
def test_backoff_doubles_and_caps_at_five_minutes(attempt: int, pause: timedelta) -> None:
    assert ladder.backoff(attempt) == pause


def test_retry_never_lands_after_the_timeout() -> None:
    step = Step(Action.GPUReset, timeout=MIN)
    assert ladder.retry_at(step, 3, T0 + 50 * SEC, T0) == T0 + MIN
    assert ladder.retry_at(Step(Action.GPUReset), 3, T0 + 50 * SEC, T0) == T0 + 90 * SEC


@pytest.mark.parametrize(
    ("outcome", "attempt", "move", "reason"),
    [
        (Outcome.Succeeded, 1, ladder.Move.Wait, Reason.StepSucceeded),
        (Outcome.TransientFailure, 1, ladder.Move.Retry, Reason.StepRetrying),
        (Outcome.TransientFailure, 2, ladder.Move.Retry, Reason.StepRetrying),
        (Outcome.TransientFailure, 3, ladder.Move.Climb, Reason.StepFailed),
        (Outcome.PermanentFailure, 1, ladder.Move.Climb, Reason.StepFailed),
    ],
)
def test_outcome_contract(
    outcome: Outcome, attempt: int, move: ladder.Move, reason: Reason
) -> None:
    transition = ladder.after(Step(Action.GPUReset, retries=2), attempt, outcome)
    assert (transition.move, transition.reason) == (move, reason)


def test_timeout_is_permanent_except_a_drain_told_to_force_once() -> None:
    assert ladder.timed_out(Step(Action.Drain), False).move is ladder.Move.Climb
    force = Step(Action.Drain, on_timeout=OnTimeout.Force)
    assert ladder.timed_out(force, False).move is ladder.Move.Force
    assert ladder.timed_out(force, True).reason is Reason.StepTimedOut


def test_next_step_climbs_one_rung() -> None:
    assert [ladder.next_after(FULL, s.action) for s in FULL] == [1, 2, 3, 4, None]
    assert ladder.first(FULL) == 0


def test_the_next_step_is_found_by_action_in_an_edited_ladder() -> None:
    """Issue 12, defect 10: an index into an edited ladder repeated a finished Reboot."""
    assert ladder.next_after(NO_RESET, Action.GPUReset) == 2  # GPUReset removed: Reboot next
    assert ladder.next_after(FULL, Action.Reboot) == 4  # never back down to a lower rung
    assert ladder.index_of(NO_RESET, Action.GPUReset) is None


@pytest.mark.parametrize(
    ("steps", "then", "expected"),
    [
        (FULL, Action.Replace, 4),
        (FULL, Action.GPUReset, 2),
        (NO_RESET, Action.GPUReset, 2),  # first rung at or above GPUReset is Reboot
        (NO_RESET, Action.Replace, 2),  # none is: the last step
    ],
)
def test_repeat_offender_jumps_after_the_cordon(
    steps: tuple[Step, ...], then: Action, expected: int
) -> None:
    assert ladder.first(steps, then) == 0
    assert ladder.next_after(steps, Action.Cordon, then) == expected


def test_repeat_offender_without_cordon_jumps_at_once() -> None:
    steps = tuple(Step(a) for a in (Action.Drain, Action.Reboot, Action.Replace))
    assert ladder.first(steps, Action.Replace) == 2


def test_pace_doubles_with_age_except_a_drains_evictions() -> None:
    reset = ACTIONS[Action.GPUReset]
    assert reset.pace(T0, T0) == 10 * SEC
    assert reset.pace(T0, T0 + 40 * SEC) == 40 * SEC
    assert reset.pace(T0, T0 + 60 * MIN) == 5 * MIN
    # Issue 12, defect 6: a PDB-blocked drain's retries stay frequent however old the step.
    assert ACTIONS[Action.Drain].pace(T0, T0 + 60 * MIN) == 5 * SEC


def test_every_action_has_one_entry_and_the_disruptive_set_agrees() -> None:
    # Every rung, the validation that may follow an in-place repair, the restart of the pods
    # before it and the diagnostics that may precede a destructive step (not rungs: D37, D39,
    # D71).
    around = {Action.Validate, Action.Diagnose, Action.RestartPods}
    assert set(ACTIONS) == set(Action)
    assert set(Action) - set(LADDER_ORDER) == around
    assert {a for a in ACTIONS if ACTIONS[a].checks_repair} == around
    assert {a for a, meaning in ACTIONS.items() if meaning.disruptive} == DISRUPTIVE
