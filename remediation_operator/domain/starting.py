"""Starting a step: the gates first (every first start, retry, resume and escalation), then
the step's record and its starting effect, taken from the action's entry in `actions`.
"""

from __future__ import annotations

from dataclasses import replace

from remediation_operator.domain import bounds, diagnosing, drain, gates, ladder, matching, messages
from remediation_operator.domain.actions import ACTIONS, Start
from remediation_operator.domain.closing import blocked
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import Evict, ProtectFromConsolidation
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import Action, Fault
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, RemediationState, StepRecord


def start(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
    index: int,
    *,
    escalating: bool,
    attempt: int = 1,
    resume: bool = False,
) -> tuple[RemediationState, bool]:
    """Start step `index` (attempt `attempt`) unless a gate holds it back.

    `resume`: the same step again after the fault cleared and returned mid-step; its attempt,
    its timeout and its record carry on (a flapping fault neither restarts a step's clocks nor
    grows `steps[]`)."""
    action = fault.ladder[index].action
    hold = gates.first_hold(ctx, gates.Request(state, node, action, found))
    if hold is not None:
        return blocked(ctx, state, action, hold.reason, hold.why, hold.until)
    if diagnosing.due(ctx, state, action, attempt, resume):
        return diagnosing.begin(ctx, state, node, action)
    return begin(
        ctx, state, node, fault, index, attempt=attempt, escalating=escalating, resume=resume
    )


def begin(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    index: int,
    *,
    attempt: int,
    escalating: bool,
    resume: bool = False,
) -> tuple[RemediationState, bool]:
    """Start attempt `attempt` of step `index`: record it and emit its effect."""
    now = ctx.now
    step = fault.ladder[index]
    action = step.action
    meaning = ACTIONS[action]
    name = node.name
    cordoned_by_us = state.cordoned_by_us
    already = False
    if action is Action.Cordon:
        # The node's own mark counts: our cordon may have been written before a crash
        # kept its Remediation from recording it (D14), or another policy's incident left
        # it to us (a hand-over, D76: this cordon takes its quarantine over).
        cordoned_by_us = (
            state.cordoned_by_us
            or (not node.unschedulable and not ctx.dry_run)
            or ctx.marked_ours(node)
            or ctx.handed_over(node)
        )
        already = node.unschedulable and not cordoned_by_us
    again = attempt > 1 and action is state.step
    """A retry of the running step (not a resume after a restart)."""
    fresh = attempt == 1 and not (
        resume
        and state.steps
        and state.steps[-1].action is action
        and state.steps[-1].outcome is Outcome.Cancelled
    )
    since = None if fresh else state.step_started_at
    pods = drain.plan(ctx.policy, state.fault, since, now)
    if action is Action.Reboot and drain.before_restart(ctx.policy, replace(state, step=action)):
        # The GPU-only drain left pods the reboot would stop: evict them under the full rules
        # first; the executor starts once none remains (the engine's observation, D54).
        everything = drain.plan(ctx.policy, state.fault, since, now, full=True)
        ctx.mutate(Evict(name, plan=everything))
    else:
        # A resumed or retried Reboot keeps the bootID of its first start (the one the reboot
        # replaces): an attempt whose Job runs after the node came back must not reboot it
        # again (the node program reboots only while the node has this bootID, issue 22).
        kept = state.boot_id_at_step_start if (resume or again) and action is state.step else None
        boot_id = kept or node.boot_id
        ctx.mutate(
            meaning.start(Start(name, state.name, attempt, ctx.policy, drain=pods, boot_id=boot_id))
        )
    if meaning.in_place and not any(ACTIONS[r.action].in_place for r in state.steps):
        ctx.mutate(ProtectFromConsolidation(name, on=True))
    last = state.steps[-1] if state.steps else None
    reopened = (
        resume and last is not None and last.action is action and last.outcome is Outcome.Cancelled
    )
    if meaning.disruptive:
        if name in ctx.counted:
            ctx.tally(ctx.counted[name], -1)
        ctx.counted[name] = action
        ctx.tally(action, +1)
        if attempt == 1 and not reopened and ctx.rate is not None:
            ctx.rate.record(now)
    first_started = now if attempt == 1 and not reopened else state.step_started_at
    assert first_started is not None
    kept_boot = state.boot_id_at_step_start if again else None
    boot = (kept_boot or node.boot_id) if action is Action.Reboot else state.boot_id_at_step_start
    steps = len(fault.ladder)
    if ctx.dry_run:
        message = messages.dry_run_started(action, index, steps, attempt)
        record = StepRecord(action, attempt, now, Reason.DryRun, message, now, Outcome.Succeeded)
        records, dropped = bounds.appended(state.steps, record, state.steps_dropped)
        started = replace(
            state,
            phase=Phase.Waiting,
            reason=Reason.DryRun,
            message=message,
            step_index=index,
            step=action,
            attempt=attempt,
            step_started_at=first_started,
            step_finished_at=now,
            step_outcome=Outcome.Succeeded,
            steps=records,
            steps_dropped=dropped,
            boot_id_at_step_start=boot,
        )
        ctx.announce(started, Reason.DryRun, message, action=action)
        return started, False
    limit = ladder.deadline(step, first_started)
    check = now + meaning.pace(now, now)
    check = check if limit is None else min(check, limit)
    message = messages.started(
        action, index, steps, attempt, escalating, messages.waits(check, limit, now)
    )
    if reopened:
        assert last is not None
        record = replace(
            last, finished_at=None, outcome=None, reason=Reason.StepStarted, message=message
        )
        records, dropped = (*state.steps[:-1], record), state.steps_dropped
    else:
        new = StepRecord(action, attempt, now, Reason.StepStarted, message)
        records, dropped = bounds.appended(state.steps, new, state.steps_dropped)
    started = replace(
        state,
        phase=Phase.Running,
        reason=Reason.StepStarted,
        message=message,
        step_index=index,
        step=action,
        attempt=attempt,
        step_started_at=first_started,
        step_finished_at=None,
        step_outcome=None,
        steps=records,
        steps_dropped=dropped,
        boot_id_at_step_start=boot if not reopened else state.boot_id_at_step_start,
        cordoned_by_us=cordoned_by_us,
        next_check_at=check,
    )
    ctx.announce(started, Reason.StepStarted, message, action=action)
    if already:
        ctx.announce(started, Reason.AlreadyCordoned, messages.already_cordoned())
    # A resumed step already has observations (a PDB's refusal, pods gone): look at them now,
    # not at the next plan, so planning again before anything changes changes nothing.
    return started, not reopened
