"""Where availability goes: each lost node-hour, by the fault class and the stage that cost it.

Availability alone says how much was lost, not what to tune. A node slot that is not
schedulable-and-healthy is, at every instant, in exactly one *stage*: its fault is not seen
(or no rule matches it), its Remediation tolerates it, a step runs or waits for its
`escalateAfter`, a budget or the breaker holds it back, it is on probation, it waits for a
replacement machine or for a human. Each lost node-second is charged to one stage and to the
*fault class* that started the incident (the fault mix's cause, or a false-positive storm), so
the per-stage and per-class sums both add up to the node-time lost.

The stage is read from what the operator wrote (the Remediation's phase, step and reason, the
planner's reason for a node it held back) and from the simulated world (a machine being
replaced, a node left cordoned for a human); `classify` is a pure function of those facts.
"""

from __future__ import annotations

from enum import StrEnum

from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState


class Stage(StrEnum):
    """Why a node slot is not schedulable-and-healthy right now."""

    Undetected = "undetected (no signal)"
    """A fault no agent publishes (silent data corruption): nothing can act before a human."""
    Unmatched = "shown, no rule matched"
    """The agent shows a condition the policy has no rule for (or a ladder gave up on it)."""
    StartupGrace = "start-up grace"
    Tolerating = "tolerating"
    """Remediation Pending: the fault's `tolerate` window runs, nothing is done yet."""
    Cordoned = "cordoned, watching"
    """After the Cordon step, until its `escalateAfter` passes or the fault clears."""
    Draining = "draining"
    BlockedBudget = "blocked by budget or rate"
    BlockedBreaker = "blocked by breaker"
    BlockedOther = "blocked (approval, evidence, pause)"
    Reset = "GPU reset"
    """The GPUReset step and the `escalateAfter` watch after it."""
    Reboot = "reboot"
    Validation = "validation"
    """The verification after an in-place repair (a policy's `validation`): its RestartPods
    step (the agent's and device plugin's pods restarted and back Ready), then Validate."""
    Diagnostics = "diagnostics"
    """The Diagnose step before Reboot or Replace (a policy's `diagnostics`)."""
    Replacement = "waiting for a replacement"
    """The Replace step, then the empty slot until Karpenter's successor joins."""
    Probation = "probation"
    """The fault is gone; `recovery.healthyFor` runs before the node returns."""
    Held = "held (ladder exhausted)"
    Human = "waiting for a human"
    """Left cordoned (ladder ended in Fail), or a fault only a human repairs."""
    TransientWait = "waiting for a transient fault to clear"
    """The oracle's choice when waiting is cheaper than any repair."""
    OtherStep = "other step"
    """A ladder step this accounting does not know yet."""


REPORTED: tuple[Stage, ...] = (
    Stage.Tolerating,
    Stage.Draining,
    Stage.BlockedBudget,
    Stage.BlockedBreaker,
    Stage.Reset,
    Stage.Reboot,
    Stage.Validation,
    Stage.Replacement,
)
"""Stages every report shows, even at zero (the ones issue 15 asks a user to see)."""

STORM = "false-positive storm"
"""Fault class of node-time lost to a storm (a condition shown with nothing wrong)."""

NO_FAULT = "no fault"
"""Fault class of node-time lost with neither a fault nor a storm (e.g. probation after a
storm flag cleared before the node became unavailable)."""

_STEP_STAGE: dict[Action, Stage] = {
    Action.Cordon: Stage.Cordoned,
    Action.Drain: Stage.Draining,
    Action.GPUReset: Stage.Reset,
    Action.Reboot: Stage.Reboot,
    Action.Replace: Stage.Replacement,
    Action.Diagnose: Stage.Diagnostics,
    Action.RestartPods: Stage.Validation,
}

_BUDGET = frozenset({Reason.BudgetExhausted, Reason.BudgetInvalid, Reason.RateLimited})
_BREAKER = frozenset({Reason.CircuitOpen, Reason.CircuitCooldown})


def step_stage(action: Action) -> Stage:
    """The stage of a step (Validate is validation, Diagnose diagnostics)."""
    stage = _STEP_STAGE.get(action)
    if stage is not None:
        return stage
    return Stage.Validation if action.value.lower().startswith("valid") else Stage.OtherStep


def classify(
    *,
    present: bool,
    replacing: bool,
    rebooting: bool,
    unschedulable: bool,
    faulty: bool,
    signalled: bool,
    remediation: RemediationState | None,
    planner_reason: Reason | None,
) -> Stage:
    """The stage of a node slot that is not schedulable-and-healthy.

    `faulty`: a real fault is present; `signalled`: an agent shows a condition (a real fault's
    or a storm's); `planner_reason`: what the planner last said about a node it did not open a
    Remediation for (CircuitOpen when the breaker held it, NodeStarting in start-up grace).
    """
    if not present or replacing:
        return Stage.Replacement
    if remediation is not None and not remediation.terminal:
        return _remediation_stage(remediation)
    if rebooting:
        return Stage.Reboot
    if planner_reason in _BREAKER and signalled:
        return Stage.BlockedBreaker
    if planner_reason is Reason.NodeStarting and signalled:
        return Stage.StartupGrace
    if unschedulable:
        return Stage.Human
    if faulty and not signalled:
        return Stage.Undetected
    return Stage.Unmatched


def _remediation_stage(state: RemediationState) -> Stage:
    phase = state.phase
    if phase is Phase.Pending:
        return Stage.Tolerating
    if phase is Phase.Recovering:
        return Stage.Probation
    if phase is Phase.Blocked:
        if state.reason in _BUDGET:
            return Stage.BlockedBudget
        if state.reason in _BREAKER:
            return Stage.BlockedBreaker
        return Stage.BlockedOther
    if state.reason is Reason.LadderExhausted:
        return Stage.Held
    if state.step is None:
        return Stage.Tolerating
    return step_stage(state.step)
