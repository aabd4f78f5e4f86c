"""Validation before return to service: an active check after an in-place repair.

Passive probation (`recovery.healthyFor`) only shows that the agent reports no fault; a GPU
that a reset or reboot brought back can still fail its first real load (NVIDIA's guidance is
to run DCGM diagnostics after a repair). With a policy `validation`, a GPUReset or Reboot that
succeeded is followed by a Validate step: a Job pinned to the node (DCGM diagnostics by
default). It is not a rung of the ladder (a ladder never goes down, and the check follows
either repair), so the incident's position stays the repair it checks (`reached`).

With `restartPods`, a RestartPods step restarts the node's sticky agents and device plugin
first (`domain/restarting.py`, D71). Pass: the step ends Succeeded and the incident goes on
as after the repair (probation, then release, if the fault is absent; with a restart, a fault
still shown counts only when reported since the restart). Fail or timeout: the step ends
PermanentFailure, which is positive evidence observed now (the evidence gate accepts it,
`caught`), and the ladder climbs at once, even when the node's condition shows no fault.
"""

from __future__ import annotations

from datetime import timedelta

from remediation_operator.domain import gates, matching, messages, restarting, stage
from remediation_operator.domain.actions import ACTIONS, Start
from remediation_operator.domain.closing import blocked
from remediation_operator.domain.context import Context
from remediation_operator.domain.fleet import NodeView, StepObservation
from remediation_operator.domain.policy import LADDER_ORDER, Action, Policy, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, RemediationState, StepRecord


def step_for(policy: Policy, action: Action, record: StepRecord | None = None) -> Step:
    """The Step a running Validate or Diagnose is judged by: the timeout recorded when it
    started (`record.timeout`), else the policy's (a record written before it was recorded);
    other actions off the ladder get a Step with no limit, as before."""
    if record is not None and record.timeout is not None:
        return Step(action, timeout=record.timeout, retries=0)
    if action is Action.Validate and policy.validation is not None:
        return Step(Action.Validate, timeout=policy.validation.timeout, retries=0)
    if action is Action.RestartPods and policy.validation is not None:
        return Step(Action.RestartPods, timeout=policy.validation.timeout, retries=0)
    if action is Action.Diagnose and policy.diagnostics is not None:
        return Step(Action.Diagnose, timeout=policy.diagnostics.timeout, retries=0)
    return Step(action)


def reached(state: RemediationState) -> Action:
    """The ladder action the incident reached: for a Validate step, the repair it checks; for
    a Diagnose step, the rung before the step it precedes."""
    assert state.step is not None
    if state.step in LADDER_ORDER:
        return state.step
    for record in reversed(state.steps):
        if record.action in LADDER_ORDER:
            return record.action
    raise AssertionError(f"{state.name}: a {state.step} with no rung before it")


def due(ctx: Context, state: RemediationState) -> bool:
    """The current step is an in-place repair the policy validates, and it succeeded."""
    config = ctx.policy.validation
    return (
        config is not None
        and not state.dry_run
        and not ctx.dry_run
        and state.step in config.after
        and state.step_outcome is Outcome.Succeeded
    )


def caught(state: RemediationState) -> bool:
    """The incident's last record is a failed validation: the ladder climbs even if the
    node's condition shows no fault (the evidence gate accepts it too)."""
    return gates.failed_validation(state)


def verify(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    found: matching.Match | None,
) -> tuple[RemediationState, bool]:
    """Check the repair the incident reached: first restart what holds stale state on the
    node, when the policy names it and it was not restarted since the repair (D71), else run
    the validation."""
    if restarting.wanted(ctx, state):
        return restarting.begin(ctx, state, node, found, reached(state))
    return begin(ctx, state, node, found)


def begin(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    found: matching.Match | None,
) -> tuple[RemediationState, bool]:
    """Start the validation of the repair that just succeeded (unless a gate holds it)."""
    config = ctx.policy.validation
    assert config is not None
    repaired = reached(state)
    hold = gates.first_hold(ctx, gates.Request(state, node, Action.Validate, found))
    if hold is not None:
        return blocked(ctx, state, Action.Validate, hold.reason, hold.why, hold.until)
    now = ctx.now
    meaning = ACTIONS[Action.Validate]
    # Each validation of the incident is its own Job (a reset's and a reboot's never share a
    # name): the attempt counts the incident's validations.
    attempt = sum(1 for r in state.steps if r.action is Action.Validate) + 1
    ctx.mutate(meaning.start(Start(node.name, state.name, attempt, ctx.policy)))
    limit = now + config.timeout
    check = min(now + meaning.pace(now, now), limit)
    message = messages.validation_started(repaired, messages.waits(check, limit, now))
    started = stage.accompany(
        state,
        Action.Validate,
        attempt,
        now,
        Reason.ValidationStarted,
        message,
        check,
        timeout=config.timeout,
    )
    ctx.announce(started, Reason.ValidationStarted, message, action=Action.Validate)
    return started, True


def no_verdict(outcome: Outcome | None, obs: StepObservation | None) -> str | None:
    """Why a validation that ended without passing gave no verdict ("" when the reason is the
    executor's message), or None when it did give one (it ran and failed, or ran out of time
    while its pod ran). A check that never ran says nothing about the GPU (issue 22, D53): no
    Job template, admission refusing its pod, a pod that never started (Pending, image pull,
    suspended), or no Job seen at all when the timeout ran out."""
    if outcome is not None:
        return "" if obs is not None and obs.not_run else None
    if obs is None:
        return "no Job of this validation was observed before its timeout"
    if not obs.started:
        return f"{obs.message or 'its pod never started'} when its timeout ran out"
    return None


def fault_returned(
    ctx: Context, state: RemediationState, node: NodeView, found: matching.Match | None
) -> bool:
    """The fault came back after the repair: strong evidence the evidence gate accepts, from
    a condition that was absent when the repair ended or has transitioned since (a fault that
    simply stayed through the repair keeps its transition time and does not count: it waits
    for the validation and then the repair's `escalateAfter`, as before)."""
    if found is None or found.condition is None:
        return False
    if not gates.fresh_evidence(ctx, state, node, found):
        return False
    then = state.evidence_at_step_end
    now = found.condition
    return (
        then is None
        or then.type != now.type
        or then.last_transition_time != now.last_transition_time
        or (then.status, then.reason) != (now.status, now.reason)
    )


def not_run(state: RemediationState) -> bool:
    """The incident's last record is a validation that could not run: it rests, held."""
    last = state.steps[-1] if state.steps else None
    return (
        last is not None
        and last.action is Action.Validate
        and last.reason is Reason.ValidationNotRun
    )


def took(record: StepRecord) -> timedelta:
    """How long a finished validation ran."""
    assert record.finished_at is not None
    return record.finished_at - record.started_at
