"""A step in flight: observe it, re-issue its effect when a check is due, retry it, time it out.

What counts as done, what is issued again and how often comes from the action's entry in
`actions`. A retry goes through the gates like a first start (`starting.start`).

A Drain that reaches its timeout while a PodDisruptionBudget still refuses evictions waits by
default (`onPDBBlocked: Wait`, phase Blocked, reason DrainBlockedByPDB, the Event repeated
every PDB_REANNOUNCE), as `kubectl drain`, Cluster API and Karpenter do; `Escalate` goes on
and names the budget and the pods; `onTimeout: Force` deletes them. Otherwise a drain at its
deadline evicts once more and times out LAST_ATTEMPT_GRACE later if pods remain.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from remediation_operator.domain import drain, ladder, matching, messages, restarting, validation
from remediation_operator.domain.actions import ACTIONS, Reissue, Start
from remediation_operator.domain.closing import ended
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import Evict, Severity
from remediation_operator.domain.fleet import NodeView, Progress, StepObservation
from remediation_operator.domain.policy import (
    Action,
    Fault,
    OnPDBBlocked,
    ReplaceProvider,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, RemediationState, StepRecord
from remediation_operator.domain.starting import start

PDB_REANNOUNCE = timedelta(minutes=10)
"""How often a drain blocked by a PodDisruptionBudget is Evented again while the block lasts."""

LAST_ATTEMPT_GRACE = timedelta(seconds=30)
"""After the eviction made at a drain's deadline, how long its pods get to go (a pod's
default terminationGracePeriodSeconds) before the drain counts as timed out."""


def end_step(
    ctx: Context, state: RemediationState, outcome: Outcome, reason: Reason, message: str
) -> RemediationState:
    """Close the current step with `outcome` (the next move decides the phase)."""
    record = state.steps[-1]
    if record.outcome is None:
        record = replace(
            record, finished_at=ctx.now, outcome=outcome, reason=reason, message=message
        )
    return replace(
        state,
        reason=reason,
        message=message,
        step_finished_at=ctx.now,
        step_outcome=outcome,
        steps=(*state.steps[:-1], record),
    )


def in_flight(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
) -> tuple[RemediationState, bool]:
    """A step has started and not finished: observe it, retry it, time it out."""
    now = ctx.now
    assert state.step is not None
    assert state.steps
    index = ladder.index_of(fault.ladder, state.step)
    record = state.steps[-1]
    step = (
        fault.ladder[index]
        if index is not None
        else validation.step_for(ctx.policy, state.step, record)
    )
    first_started = state.step_started_at or record.started_at
    limit = ladder.deadline(step, first_started)
    forced = record.reason is Reason.DrainForced
    if forced:
        limit = ladder.deadline(step, record.started_at)
    if record.outcome is Outcome.TransientFailure:
        return between_attempts(ctx, state, node, fault, found, step, limit)
    if found is None and step.action is Action.Drain:
        # Nothing left to move work away from: stop evicting, begin probation.
        message = messages.fault_gone_in_drain()
        return end_step(ctx, state, Outcome.Cancelled, Reason.FaultGone, message), False
    obs = ctx.snapshot.observations.get(node.name)
    if obs is not None and (obs.action is not state.step or obs.attempt != state.attempt):
        obs = None
    if step.action is Action.RestartPods:
        # The pods seen before they are deleted: those entries must come back (D71).
        state = restarting.remember(state, obs)
        record = state.steps[-1]
    if step.action is Action.Validate and validation.fault_returned(ctx, state, node, found):
        return _fault_returned_in_validation(ctx, state, fault, found), False
    outcome = ACTIONS[step.action].done(node, state, obs)
    detail = obs.message if obs is not None and obs.message else ""
    over = outcome is not None or (limit is not None and now >= limit)
    if step.action is Action.Diagnose and over:
        return _diagnosed(ctx, state, fault, outcome, detail), False
    if step.action is Action.Validate and over:
        return _validated(ctx, state, fault, outcome, obs, detail), False
    if step.action is Action.RestartPods and over:
        return _restarted(ctx, state, outcome, detail), False
    if outcome is Outcome.Succeeded:
        if step.action is Action.Replace:
            message = messages.replaced()
            closed = ended(ctx, state, Phase.Succeeded, Reason.NodeReplaced, message)
            ctx.announce(closed, Reason.NodeReplaced, message)
            return closed, True
        message = messages.succeeded(step.action, detail)
        ctx.announce(state, Reason.StepSucceeded, message, action=step.action)
        return end_step(ctx, state, Outcome.Succeeded, Reason.StepSucceeded, message), False
    if outcome is not None:
        move = ladder.after(step, state.attempt, outcome)
        what = detail or "the executor reported a failure"
        if move.move is ladder.Move.Retry:
            message = messages.retrying(step.action, state.attempt, what)
            ctx.announce(state, Reason.StepRetrying, message, Severity.Warning, step.action)
            finished = replace(
                record, finished_at=now, outcome=move.outcome, reason=move.reason, message=message
            )
            return replace(state, steps=(*state.steps[:-1], finished)), False
        message = messages.failed(step.action, state.attempt, what)
        ctx.announce(state, Reason.StepFailed, message, Severity.Warning, step.action)
        return end_step(ctx, state, move.outcome, move.reason, message), False
    if limit is not None and now >= limit:
        check = state.next_check_at
        if check is not None and limit < check and now < check and _same_wait(ctx, state, obs):
            return state, True  # past the deadline, a last eviction's grace or a PDB wait runs
        return _timed_out(ctx, state, node, step, record, obs, limit, forced)
    return still_running(ctx, state, node, step, record, obs, limit), True


def _diagnosed(
    ctx: Context, state: RemediationState, fault: Fault, outcome: Outcome | None, detail: str
) -> RemediationState:
    """Diagnostics ended: collected, or failed or timed out (recorded, not fatal); the step
    they preceded follows either way (`incident._after_step`)."""
    record = state.steps[-1]
    took = ctx.now - record.started_at
    nxt = ladder.next_after(fault.ladder, validation.reached(state))
    target = fault.ladder[nxt].action if nxt is not None else Action.Replace
    if outcome is Outcome.Succeeded:
        message = messages.diagnosed(target, record.location, took)
        ctx.announce(state, Reason.DiagnosticsCollected, message, action=Action.Diagnose)
        return end_step(ctx, state, Outcome.Succeeded, Reason.DiagnosticsCollected, message)
    why = None if outcome is None else detail
    message = messages.diagnostics_failed(target, record.location, took, why)
    ctx.announce(state, Reason.DiagnosticsFailed, message, Severity.Warning, Action.Diagnose)
    return end_step(ctx, state, Outcome.PermanentFailure, Reason.DiagnosticsFailed, message)


def _validated(
    ctx: Context,
    state: RemediationState,
    fault: Fault,
    outcome: Outcome | None,
    obs: StepObservation | None,
    detail: str,
) -> RemediationState:
    """The validation ended: passed (Succeeded), failed or timed out while its pod ran
    (PermanentFailure: positive evidence, the ladder climbs at once; `validation.caught`), or
    it never ran (no verdict: the node is held, `validation.not_run`)."""
    took = ctx.now - state.steps[-1].started_at
    if outcome is Outcome.Succeeded:
        message = messages.validation_passed(took, detail)
        ctx.announce(state, Reason.ValidationPassed, message, action=Action.Validate)
        return end_step(ctx, state, Outcome.Succeeded, Reason.ValidationPassed, message)
    unrun = validation.no_verdict(outcome, obs)
    if unrun is not None:
        message = messages.validation_not_run(unrun or detail)
        ctx.announce(
            state, Reason.ValidationNotRun, message, Severity.Warning, action=Action.Validate
        )
        ended_ = end_step(ctx, state, Outcome.Cancelled, Reason.ValidationNotRun, message)
        return replace(ended_, phase=Phase.Blocked, next_check_at=None)
    nxt = ladder.next_after(fault.ladder, validation.reached(state))
    then = fault.ladder[nxt].action if nxt is not None else None
    if outcome is None:
        message = messages.validation_timed_out(took, then)
    else:
        message = messages.validation_failed(took, detail, then)
    ctx.announce(state, Reason.ValidationFailed, message, Severity.Warning, Action.Validate)
    return end_step(ctx, state, Outcome.PermanentFailure, Reason.ValidationFailed, message)


def _restarted(
    ctx: Context, state: RemediationState, outcome: Outcome | None, detail: str
) -> RemediationState:
    """The restart of the node's pods is over: back (the validation follows,
    `incident._after_step`), or its timeout ran out with a pod not back: no verdict on the
    repair, the node is held (`restarting.not_back`), nothing climbs (D71)."""
    took = ctx.now - state.steps[-1].started_at
    if outcome is Outcome.Succeeded:
        message = messages.node_pods_restarted(detail, took)
        ctx.announce(state, Reason.NodePodsRestarted, message, action=Action.RestartPods)
        return end_step(ctx, state, Outcome.Succeeded, Reason.NodePodsRestarted, message)
    message = messages.node_pods_not_back(detail or "no pod of them was seen", took)
    ctx.announce(
        state, Reason.NodePodsNotBack, message, Severity.Warning, action=Action.RestartPods
    )
    held = end_step(ctx, state, Outcome.Cancelled, Reason.NodePodsNotBack, message)
    return replace(held, phase=Phase.Blocked, next_check_at=None)


def _fault_returned_in_validation(
    ctx: Context, state: RemediationState, fault: Fault, found: matching.Match | None
) -> RemediationState:
    """The node reported its fault again, after the repair, while the validation ran: that is
    the verdict already. The validation ends (PermanentFailure, so the ladder climbs at once,
    `validation.caught`) instead of running on to its timeout."""
    assert found is not None
    nxt = ladder.next_after(fault.ladder, validation.reached(state))
    then = fault.ladder[nxt].action if nxt is not None else None
    took = ctx.now - state.steps[-1].started_at
    condition = found.condition
    shown = (
        f"{condition.type}={condition.status} {condition.reason}".strip()
        if condition is not None
        else found.condition_type
    )
    message = messages.fault_returned_in_validation(shown, took, then)
    ctx.announce(state, Reason.FaultReturned, message, Severity.Warning, Action.Validate)
    return end_step(ctx, state, Outcome.PermanentFailure, Reason.FaultReturned, message)


def _timed_out(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    step: Step,
    record: StepRecord,
    obs: StepObservation | None,
    limit: datetime,
    forced: bool,
) -> tuple[RemediationState, bool]:
    now = ctx.now
    move = ladder.timed_out(step, forced)
    if move.move is ladder.Move.Force:
        if obs is None and _resumed_unobserved(ctx, state):
            # A drain resumed in this very plan (the fault flapped back) was not observed (it
            # had ended when the engine looked): look at its pods first, so the deletion names
            # the pods and PodDisruptionBudgets it takes past, not "the remaining pods".
            message = messages.force_pending(messages.waits(now, None, now))
            return replace(state, phase=Phase.Running, message=message, next_check_at=now), True
        return force(ctx, state, step, record, obs), True
    took = step.timeout or timedelta(0)
    if step.action is Action.Drain and not forced:
        pdb = obs is not None and obs.blocked_by_pdb
        if pdb and step.on_pdb_blocked is OnPDBBlocked.Wait:
            return still_running(ctx, state, node, step, record, obs, limit, waiting=True), True
        if pdb:
            assert obs is not None
            message = messages.pdb_escalated(obs.pdbs, obs.blocked_pods, took)
            ctx.announce(state, Reason.StepTimedOut, message, Severity.Warning, step.action)
            return end_step(ctx, state, move.outcome, move.reason, message), False
        waited = state.reason is Reason.DrainBlockedByPDB  # the budget just let go
        if waited or state.next_check_at is None or state.next_check_at <= limit:
            # The check at the deadline (or the first after a PDB's wait ended): one last
            # eviction, and its pods get their grace period, before giving up.
            check = now + LAST_ATTEMPT_GRACE
            pods = drain.plan(ctx.policy, state.fault, state.step_started_at, now)
            ctx.mutate(Evict(node.name, plan=pods))
            message = messages.last_eviction(messages.waits(check, None, now))
            updated = replace(
                state,
                phase=Phase.Running,
                reason=Reason.StepStarted,
                message=message,
                next_check_at=check,
            )
            return updated, True
    message = messages.timed_out(step.action, took)
    ctx.announce(state, Reason.StepTimedOut, message, Severity.Warning, step.action)
    return end_step(ctx, state, move.outcome, move.reason, message), False


def _resumed_unobserved(ctx: Context, state: RemediationState) -> bool:
    """Whether the step was reopened by this plan: when the engine gathered observations it
    had ended (the engine observes only steps in progress), so there is none to act on yet."""
    stored = ctx.snapshot.active.get(state.node)
    return stored is not None and stored.name == state.name and stored.step_finished_at is not None


def between_attempts(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
    step: Step,
    limit: datetime | None,
) -> tuple[RemediationState, bool]:
    now = ctx.now
    record = state.steps[-1]
    if found is None:
        message = messages.fault_gone_before_retry(step.action)
        return end_step(ctx, state, Outcome.Cancelled, Reason.FaultGone, message), False
    if limit is not None and now >= limit:
        message = messages.retry_timed_out(step.action)
        ctx.announce(state, Reason.StepTimedOut, message, Severity.Warning, step.action)
        return end_step(ctx, state, Outcome.PermanentFailure, Reason.StepTimedOut, message), False
    assert record.finished_at is not None
    assert state.step_started_at is not None
    at = ladder.retry_at(step, record.attempt, record.finished_at, state.step_started_at)
    if now >= at:
        index = ladder.index_of(fault.ladder, step.action)
        if index is None:  # the step left the ladder: it ends here, the ladder goes on
            message = messages.retry_timed_out(step.action)
            return end_step(ctx, state, Outcome.PermanentFailure, Reason.StepFailed, message), False
        return start(
            ctx, state, node, fault, found, index, escalating=False, attempt=record.attempt + 1
        )
    message = messages.retry_due(step.action, record.attempt, at, limit, now)
    return replace(
        state, phase=Phase.Running, reason=Reason.StepRetrying, message=message, next_check_at=at
    ), True


def force(
    ctx: Context,
    state: RemediationState,
    step: Step,
    record: StepRecord,
    obs: StepObservation | None,
) -> RemediationState:
    """The drain timed out under `onTimeout: Force`: delete the remaining pods, once; the
    status and Event name the pods a PodDisruptionBudget protected, and the budget."""
    now = ctx.now
    plan = drain.plan(ctx.policy, state.fault, state.step_started_at, now)
    ctx.mutate(Evict(state.node, force=True, plan=plan))
    attempt = state.attempt + 1
    limit = ladder.deadline(step, now)
    check = now + ACTIONS[step.action].pace(now, now)
    check = check if limit is None else min(check, limit)
    pdbs, pods = (obs.pdbs, obs.blocked_pods) if obs is not None else ((), ())
    left = obs.message if obs is not None and not pods else ""
    message = messages.forced(pdbs, pods, left, messages.waits(check, limit, now))
    timed_out = replace(
        record,
        finished_at=now,
        outcome=Outcome.PermanentFailure,
        reason=Reason.StepTimedOut,
        message=messages.timed_out(step.action, step.timeout or timedelta(0)),
    )
    forced = StepRecord(step.action, attempt, now, Reason.DrainForced, message)
    updated = replace(
        state,
        phase=Phase.Running,
        reason=Reason.DrainForced,
        message=message,
        attempt=attempt,
        steps=(*state.steps[:-1], timed_out, forced),
        next_check_at=check,
    )
    ctx.announce(updated, Reason.DrainForced, message, Severity.Warning, step.action)
    return updated


def _next_reannounce(anchor: datetime, now: datetime) -> datetime:
    periods = (now - anchor) // PDB_REANNOUNCE + 1
    return anchor + PDB_REANNOUNCE * periods


def still_running(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    step: Step,
    record: StepRecord,
    obs: StepObservation | None,
    limit: datetime | None,
    *,
    waiting: bool = False,
) -> RemediationState:
    """Nothing finished yet: re-issue the (idempotent) effect when a check is due.

    `waiting`: a drain past its timeout that a PodDisruptionBudget blocks (onPDBBlocked Wait)."""
    now = ctx.now
    action = step.action
    meaning = ACTIONS[action]
    blocked = action is Action.Drain and obs is not None and obs.blocked_by_pdb
    phase = Phase.Blocked if waiting else Phase.Running
    check = state.next_check_at
    due = check is None or now >= check
    if not due and state.phase is phase and _same_wait(ctx, state, obs):
        return state  # replanned before anything changed: nothing to write
    reannounce = False
    if due:
        started = obs is not None and obs.progress is not Progress.Absent
        if meaning.reissue is Reissue.Always or not started:
            forced = record.reason is Reason.DrainForced
            pods = drain.plan(ctx.policy, state.fault, state.step_started_at, now)
            boot = state.boot_id_at_step_start or ""
            ctx.mutate(
                meaning.start(
                    Start(
                        node.name,
                        state.name,
                        state.attempt,
                        ctx.policy,
                        forced,
                        drain=pods,
                        boot_id=boot,
                        started_at=state.step_started_at,
                    )
                )
            )
        check = now + meaning.pace(record.started_at, now)
        if limit is not None and not waiting:
            check = min(check, limit)
        if blocked:
            # Never skip the instant the block is Evented again; announce when it is reached.
            reannounce = (
                state.reason is Reason.DrainBlockedByPDB
                and state.next_check_at is not None
                and state.next_check_at > record.started_at
                and (state.next_check_at - record.started_at) % PDB_REANNOUNCE == timedelta(0)
            )
            check = min(check, _next_reannounce(record.started_at, now))
    assert check is not None
    wait = messages.waits(check, None if waiting else limit, now)
    reason, message = _waiting(ctx, state, action, record, obs, wait, waiting)
    updated = replace(state, phase=phase, reason=reason, message=message, next_check_at=check)
    named = reason is Reason.EvictingBeforeReboot and message != state.message
    if (reason is not state.reason and reason is not Reason.StepStarted) or reannounce or named:
        severity = Severity.Warning if reason is Reason.DrainBlockedByPDB else Severity.Normal
        ctx.announce(updated, reason, message, severity, action=action)
    return updated


def _waiting(
    ctx: Context,
    state: RemediationState,
    action: Action,
    record: StepRecord,
    obs: StepObservation | None,
    wait: str,
    waiting: bool,
) -> tuple[Reason, str]:
    """The reason and sentence of a step still in progress."""
    acknowledged = obs is not None and obs.progress is not Progress.Absent
    if action is Action.Drain and obs is not None and obs.blocked_by_pdb:
        return Reason.DrainBlockedByPDB, messages.pdb_blocked(
            obs.pdbs, obs.blocked_pods, wait, waiting
        )
    if action is Action.Drain:
        forced = record.reason is Reason.DrainForced
        return Reason.DrainForced if forced else Reason.StepStarted, messages.draining(
            state.attempt, wait
        )
    if action is Action.Reboot and obs is not None and obs.evicting:
        return Reason.EvictingBeforeReboot, messages.evicting_before_reboot(obs.message, wait)
    if action is Action.Reboot and acknowledged:
        return Reason.WaitingForReboot, messages.waiting_for_reboot(wait)
    if action is Action.RestartPods:
        said = obs.message if obs is not None else ""
        return Reason.RestartingNodePods, messages.node_pods_restarting(said, wait)
    if action is Action.Replace and obs is not None and obs.progress is Progress.InProgress:
        provider = ctx.policy.actions.replace
        handed: dict[ReplaceProvider, Reason] = {
            ReplaceProvider.Karpenter: Reason.NodeClaimDeleted,
            ReplaceProvider.Manual: Reason.ManualReplaceRequested,
        }
        return handed.get(provider, state.reason), messages.replace_waiting(provider, wait)
    return state.reason, messages.waiting_for(action, state.attempt, wait)


def _same_wait(ctx: Context, state: RemediationState, obs: StepObservation | None) -> bool:
    """Whether what we observe still supports the reason the running step shows."""
    blocked = obs is not None and obs.blocked_by_pdb
    if state.step is Action.Drain:
        return blocked == (state.reason is Reason.DrainBlockedByPDB)
    acknowledged = obs is not None and obs.progress is not Progress.Absent
    if state.step is Action.Reboot and obs is not None and obs.evicting:
        return state.reason is Reason.EvictingBeforeReboot and obs.message in state.message
    if state.step is Action.Reboot:
        return acknowledged == (state.reason is Reason.WaitingForReboot)
    if state.step is Action.Replace:
        return (
            acknowledged
            == (state.reason in (Reason.NodeClaimDeleted, Reason.ManualReplaceRequested))
            or ctx.policy.actions.replace is ReplaceProvider.DeleteNode
        )
    return True
