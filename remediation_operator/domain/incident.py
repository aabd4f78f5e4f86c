"""An open incident moved as far as it can go now: one move per stage, checked by the table.

`advance` first settles what ends or freezes an incident whatever its stage (node gone, policy
deleted, fault removed from the policy, an administrator's uncordon, a mode change, a pause);
`progress` then takes the moves its stage allows (`stage.TRANSITIONS`) until it rests.

Flapping (docs/decisions.md): before the first step, a fault counts as cleared only once it
has stayed absent for its own `tolerate` window, and that window counts from the first
sighting; so a fault that comes and goes faster than it is tolerated is one incident that
reaches its first step, not one Remediation per flap. After a step, a fault that clears and
returns resumes the interrupted step with its attempt, timeout and record, so `steps[]` does
not grow with the flaps.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain import (
    bounds,
    following,
    gates,
    ladder,
    matching,
    messages,
    restarting,
    stage,
    validation,
)
from remediation_operator.domain.closing import close, ended, give_back, hold
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import Requarantine, Severity
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import DISRUPTIVE, Action, Fault, OnExhausted, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    ObservedCondition,
    Outcome,
    Phase,
    RemediationState,
)
from remediation_operator.domain.running import in_flight
from remediation_operator.domain.starting import start

SAME_NODE = timedelta(seconds=1)
"""creationTimestamps closer than this are one Node object (they are whole seconds)."""
MAX_MOVES = 64
"""Transitions one node may take in one plan (a ladder is short; this only bounds a bug)."""


def observed(found: matching.Match | None) -> ObservedCondition | None:
    """What a Remediation records of the condition that matched (None: it is missing)."""
    condition = None if found is None else found.condition
    if condition is None:
        return None
    return ObservedCondition(  # copied into the status: outside text, so bounded
        bounds.cut(condition.type),
        bounds.cut(condition.status),
        bounds.cut(condition.reason),
        bounds.cut(condition.message),
        condition.last_transition_time,
        condition.last_heartbeat_time,
    )


def cordon_done(state: RemediationState) -> bool:
    return any(r.action is Action.Cordon and r.outcome is Outcome.Succeeded for r in state.steps)


def advance(ctx: Context, state: RemediationState, node: NodeView | None) -> None:
    """Plan one open incident."""
    policy = ctx.policy
    if node is None and state.node in ctx.snapshot.unselected:
        # Relabelled out of the selector: not deleted, so what we placed must come off. A node
        # already handed over for replacement keeps its cordon (it is going away).
        replacing = state.step is Action.Replace and state.step_started_at is not None
        message = messages.node_unselected(policy.name, state.dry_run, replacing)
        close(ctx, state, Phase.Cancelled, Reason.NodeUnselected, message, release=not replacing)
        return
    if node is None:
        if state.step is Action.Replace and state.step_started_at is not None:
            message = messages.node_replaced()
            close(ctx, state, Phase.Succeeded, Reason.NodeReplaced, message, release=False)
        else:
            message = messages.node_deleted()
            close(ctx, state, Phase.Cancelled, Reason.NodeDeleted, message, release=False)
        return
    recorded = state.node_created_at
    created = node.created_at
    if recorded is not None and created is not None and abs(created - recorded) >= SAME_NODE:
        # Deleted and recreated under the same name between two plans: another Node object
        # (another machine, or the same one registered again). Nothing of ours can be assumed
        # on it: whatever of ours it carries comes off, its cordon stays (not ours to undo).
        message = messages.node_recreated()
        close(
            ctx,
            state,
            Phase.Cancelled,
            Reason.NodeDeleted,
            message,
            release=True,
            uncordon=False,
        )
        return
    if policy.deleted:
        message = messages.policy_deleted(policy.name, state.dry_run)
        close(ctx, state, Phase.Cancelled, Reason.PolicyDeleted, message, release=True)
        return
    fault = ctx.faults.get(state.fault)
    if fault is None:
        message = messages.fault_removed(state.fault, state.dry_run)
        close(ctx, state, Phase.Cancelled, Reason.FaultRemoved, message, release=True)
        return
    # Our cordon writes spec.unschedulable and our taint together, so our taint on a node
    # that is schedulable means someone uncordoned it after us, even if we had not yet
    # recorded the cordon as done.
    cordoned = cordon_done(state) or (state.step is Action.Cordon and node.quarantined)
    ours = _released(ctx, state, node)
    if cordoned and not state.dry_run and not node.unschedulable and not ours:
        # The condition as it is now: only its clearing and return after this may reopen.
        seen = matching.match_fault(node, fault, ctx.now, policy.faults)
        state = replace(state, condition=observed(seen) or state.condition)
        message = messages.admin_uncordoned()
        close(
            ctx,
            state,
            Phase.Cancelled,
            Reason.AdminUncordoned,
            message,
            release=True,
            uncordon=False,
        )
        return
    if state.dry_run and not ctx.dry_run:
        message = messages.mode_changed()
        close(ctx, state, Phase.Cancelled, Reason.ModeChanged, message, release=False)
        ctx.wakes.append(ctx.now)  # detect again at once, under the new mode
        return
    if node.excluded or policy.is_paused:
        hold(ctx, state, node)
        return
    other = ctx.snapshot.superseding.get(node.name)
    if other is not None and _yields(state, fault):
        # A cordon-only incident does not keep a more severe fault of another policy waiting
        # (D76): it ends and gives nothing back; its quarantine marks name that policy, whose
        # cordon finds the node cordoned and records it as its own.
        message = messages.superseded(fault.name, other, node.quarantined)
        policy_to, _, fault_to = other.partition("/")
        # Before the record: the quarantine is the other policy's from now on (its unrecorded
        # cordon until its own cordon takes it over), so whatever becomes of this policy
        # (deleted, its fault gone) nothing here releases it.
        ctx.undo(Requarantine(node.name, policy=policy_to, fault=fault_to), state)
        close(ctx, state, Phase.Cancelled, Reason.SupersededByPolicy, message, release=False)
        return
    # An Enforce incident under a policy switched to DryRun carries on (the `paused` gate
    # starts nothing new): its fault may still clear and its node be given back.
    # Real agents overwrite the reason with the newest finding: the incident follows the most
    # severe fault seen, and a reason change is no recovery (domain.following, D58).
    found = following.present(ctx, state, node, fault)
    rested = progress(ctx, state, node, fault, found)
    waiting = ctx.snapshot.waiting.get(node.name, ())
    if not rested.terminal and rested.waiting != waiting:
        rested = replace(rested, waiting=waiting)
    ctx.finish(rested)


def _yields(state: RemediationState, fault: Fault) -> bool:
    """The incident only holds its node (its fault's ladder has no disruptive step) and no
    step is in flight: it may hand the node to another policy's acting fault (D76)."""
    if any(step.action in DISRUPTIVE for step in fault.ladder):
        return False
    return stage.of(state) not in (stage.Stage.Running, stage.Stage.Retrying)


def _released(ctx: Context, state: RemediationState, node: NodeView) -> bool:
    """Our own release: probation was over, so the recovery's release (applied before the
    `Recovered` record, which a crash may have kept from being written) uncordoned the node.
    Recovering again repeats that idempotent release; it is no administrator's uncordon.

    A node short of GPUs is held, not released (D68): then only our taint gone says the
    release was ours (it was applied when the GPUs were all advertised, and one was marked
    since); an uncordon that left our taint on is an administrator's `kubectl uncordon`."""
    since = state.healthy_since
    return (
        since is not None
        and state.step is not None
        and ctx.now >= since + ctx.policy.recovery.healthy_for
        and not _held_for_gpus(state, node)
    )


def _held_for_gpus(state: RemediationState, node: NodeView) -> bool:
    """Probation over, the node is not given back: it advertises fewer GPUs than it has, and
    our quarantine is still on it (DryRun: nothing was ever on it). Once our release has
    removed the taint, the recovery was decided and a GPU marked since changes nothing."""
    return node.gpus_short and (state.dry_run or node.quarantined)


def progress(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
) -> RemediationState:
    """Take every transition due now; return the state the incident rests in."""
    for _ in range(MAX_MOVES):
        worse = following.worse(ctx, state, node, fault)
        if worse is not None:
            # A more severe fault, between steps: the incident follows it from here (D58).
            state = following.move_onto(ctx, state, fault, worse, observed(worse))
            fault, found = worse.fault, worse
        moved, done = _move(ctx, state, node, fault, found)
        stage.check(state, moved)
        if gates.evidence_ended(moved) != gates.evidence_ended(state):
            # A disruptive step (attempt) just ended: remember the evidence as it is now, so
            # the next one needs it reported again, also after a restart (the evidence gate).
            moved = replace(
                moved,
                evidence_at_step_end=observed(found),
                evidence_seen_at=None if found is None else found.observed_at,
            )
        if done:
            return moved
        state = moved
    raise AssertionError(f"{state.name}: the ladder did not settle in {MAX_MOVES} moves")


def _move(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
) -> tuple[RemediationState, bool]:
    now = stage.of(state)
    if now is stage.Stage.Tolerating:
        return _tolerating(ctx, state, node, fault, found)
    if now is stage.Stage.Probation:
        return _probation(ctx, state, node, found)
    if now in (stage.Stage.Running, stage.Stage.Retrying):
        return in_flight(ctx, state, node, fault, found)
    if now is stage.Stage.StepOver:
        return _after_step(ctx, state, node, fault, found)
    return state, True


def skip_to(ctx: Context, state: RemediationState) -> Action | None:
    history = ctx.policy.history
    return history.then if state.repeat_offender and history is not None else None


def _tolerating(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
) -> tuple[RemediationState, bool]:
    now = ctx.now
    if found is None:
        since = state.healthy_since or now
        clears = since + fault.tolerate
        if now >= clears:
            message = messages.cleared_while_tolerating(fault.name)
            closed = ended(ctx, state, Phase.Cancelled, Reason.FaultGone, message)
            if ctx.marked_ours(node) and node.name not in ctx.snapshot.claimed:
                # Our cordon is on the node though this incident records no step: it went on
                # before a record whose write failed (D14), or came to this policy in a
                # hand-over (D76). It comes off with the incident, not a grace period later;
                # unless another policy claims the node (its fault takes the cordon over).
                give_back(ctx, closed, uncordon=True)
            ctx.announce(closed, Reason.FaultGone, message)
            return closed, True
        message = messages.flap_absent(fault.name, since, clears, now)
        return replace(
            state,
            phase=Phase.Pending,
            reason=Reason.Tolerating,
            message=message,
            healthy_since=since,
            next_check_at=clears,
        ), True
    if state.healthy_since is not None:
        state = replace(state, healthy_since=None)
    tolerated = state.started_at + fault.tolerate
    if now < tolerated:
        message = messages.tolerating(fault.name, tolerated, now)
        return replace(
            state,
            phase=Phase.Pending,
            reason=Reason.Tolerating,
            message=message,
            next_check_at=tolerated,
        ), True
    first = ladder.first(fault.ladder, skip_to(ctx, state))
    if first is None:
        return exhausted(ctx, state, fault, found), True
    return start(ctx, state, node, fault, found, first, escalating=False)


def _probation(
    ctx: Context, state: RemediationState, node: NodeView, found: matching.Match | None
) -> tuple[RemediationState, bool]:
    now = ctx.now
    assert state.healthy_since is not None
    if found is not None:
        message = messages.fault_returned(state.fault, state.step)
        ctx.announce(state, Reason.FaultReturned, message, Severity.Warning)
        return replace(
            state, healthy_since=None, reason=Reason.FaultReturned, message=message
        ), False
    healthy_for = ctx.policy.recovery.healthy_for
    ends = state.healthy_since + healthy_for
    if now >= ends and _held_for_gpus(state, node):
        # The device plugin keeps a GPU it saw fail unhealthy for the life of its process
        # (NVIDIA/k8s-device-plugin, internal/rm/health.go): a node that advertises fewer
        # GPUs than it has is not recovered, whatever its conditions say (D68). Held, and
        # planned again when the node's GPU counts change (a relevant change).
        assert node.gpu_capacity is not None
        message = messages.gpus_not_advertised(
            state.fault, node.gpu_allocatable, node.gpu_capacity, state.dry_run
        )
        if state.reason is not Reason.GPUsNotAdvertised:
            ctx.announce(state, Reason.GPUsNotAdvertised, message, Severity.Warning)
        return replace(
            state,
            phase=Phase.Blocked,
            reason=Reason.GPUsNotAdvertised,
            message=message,
            next_check_at=ctx.fallback(state, Reason.GPUsNotAdvertised),
        ), True
    if now >= ends:
        message = messages.recovered(state.fault, healthy_for, state.cordoned_by_us, state.dry_run)
        recovered = ended(ctx, state, Phase.Succeeded, Reason.Recovered, message)
        give_back(ctx, recovered, uncordon=True)
        ctx.announce(recovered, Reason.Recovered, message)
        return recovered, True
    message = messages.probation(state.fault, state.healthy_since, ends, now, state.dry_run)
    return replace(
        state,
        phase=Phase.Recovering,
        reason=Reason.FaultCleared,
        message=message,
        next_check_at=ends,
    ), True


def _step_outcome(state: RemediationState) -> Outcome:
    """How the finished current step ended; for a state written without `step_outcome`, from
    its last record (an attempt that had failed transiently then counts as interrupted, so the
    step runs again rather than being skipped)."""
    if state.step_outcome is not None:
        return state.step_outcome
    last = state.steps[-1].outcome if state.steps else None
    if last in (Outcome.Succeeded, Outcome.PermanentFailure):
        return last
    return Outcome.Cancelled


def _after_step(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
) -> tuple[RemediationState, bool]:
    """The current step is over: probation, resume it, wait to escalate, or the next step."""
    now = ctx.now
    if validation.due(ctx, state):
        # An in-place repair succeeded: check the node before anything else (D37), after
        # restarting what holds stale state on it (D71).
        return validation.verify(ctx, state, node, found)
    if state.step is Action.RestartPods and _step_outcome(state) is Outcome.Succeeded:
        # The node's agents and device plugin run afresh: the validation now (D71).
        return validation.begin(ctx, state, node, found)
    if restarting.not_back(state):
        # Restarted pods did not come back: no verdict on the repair, held like a
        # validation that could not run (D53, D71), unless the fault is reported again.
        return _no_verdict(ctx, state, node, fault, found, Reason.NodePodsNotBack)
    caught = validation.caught(state)
    if validation.not_run(state):
        # The validation gave no verdict: the node stays cordoned for a human (D53). Only
        # the fault's own return, as fresh evidence, moves the ladder on from the repair.
        return _no_verdict(ctx, state, node, fault, found, Reason.ValidationNotRun)
    if found is None and not caught and following.unverified(ctx, state):
        # The fault reads absent after a repair that was not verified (it failed, or was
        # interrupted): an active check decides, not the condition alone (D59).
        return validation.verify(ctx, state, node, found)
    if found is None and not caught:
        message = messages.fault_cleared(state.fault)
        ctx.announce(state, Reason.FaultCleared, message)
        return replace(state, healthy_since=now, reason=Reason.FaultCleared, message=message), False
    assert state.step is not None
    assert state.step_finished_at is not None
    position = validation.reached(state)
    if state.step is Action.Diagnose:
        # Diagnostics are over (collected, failed or timed out): the step they preceded now.
        after = ladder.next_after(fault.ladder, position, skip_to(ctx, state))
        if after is None:
            return exhausted(ctx, state, fault, found), True
        return start(ctx, state, node, fault, found, after, escalating=True)
    index = ladder.index_of(fault.ladder, position)
    outcome = _step_outcome(state)
    if (
        outcome is Outcome.Cancelled
        and state.step in (Action.Validate, Action.RestartPods)
        and ctx.policy.validation
    ):
        # An interrupted validation or restart (a record written without its outcome) runs
        # again; pods restarted since the repair are not restarted twice.
        return validation.verify(ctx, state, node, found)
    if (
        state.step is Action.Validate
        and outcome is Outcome.Succeeded
        and restarting.restarted_at(state) is not None
        and not gates.fresh_evidence(ctx, state, node, found)
    ):
        # Validation passed and the fault is still shown, but not reported since its agent
        # restarted: the old process's word is no verdict; held until the agent reports (D71).
        return _no_fresh_report(ctx, state, found), True
    if outcome is Outcome.Cancelled and index is not None:
        # Interrupted (the fault had cleared): the same step carries on.
        last = state.steps[-1] if state.steps else None
        retry = last is not None and last.outcome is Outcome.TransientFailure
        attempt = state.attempt + 1 if retry else max(state.attempt, 1)
        return start(
            ctx, state, node, fault, found, index, escalating=False, attempt=attempt, resume=True
        )
    step = fault.ladder[index] if index is not None else Step(position)
    skip = skip_to(ctx, state)
    nxt = ladder.next_after(fault.ladder, position, skip)
    if outcome is Outcome.Succeeded:
        if position is Action.Replace:
            message = messages.dry_run_replaced()
            return replace(
                state,
                phase=Phase.Waiting,
                reason=Reason.DryRun,
                message=message,
                next_check_at=ctx.fallback(state, Reason.DryRun),
            ), True
        due = state.step_finished_at + step.escalate_after
        if now < due:
            then = fault.ladder[nxt].action if nxt is not None else None
            message = messages.escalates_later(step.action, fault.name, due, then, now)
            return replace(
                state,
                phase=Phase.Waiting,
                reason=Reason.WaitingToEscalate,
                message=message,
                next_check_at=due,
            ), True
    if nxt is None:
        return exhausted(ctx, state, fault, found), True
    return start(ctx, state, node, fault, found, nxt, escalating=True)


def _no_verdict(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    fault: Fault,
    found: matching.Match | None,
    reason: Reason,
) -> tuple[RemediationState, bool]:
    """A check after the repair gave no verdict (`reason`: the validation did not run, or the
    restarted pods are not back): hold the node, cordoned, until the fault is reported again
    as fresh evidence, which moves the ladder on from the repair (D53, D71)."""
    if not gates.fresh_evidence(ctx, state, node, found):
        return replace(
            state,
            phase=Phase.Blocked,
            reason=reason,
            next_check_at=ctx.fallback(state, reason),
        ), True
    nxt = ladder.next_after(fault.ladder, validation.reached(state), skip_to(ctx, state))
    if nxt is None:
        return exhausted(ctx, state, fault, found), True
    return start(ctx, state, node, fault, found, nxt, escalating=True)


def _no_fresh_report(
    ctx: Context, state: RemediationState, found: matching.Match | None
) -> RemediationState:
    since = restarting.restarted_at(state)
    assert since is not None
    assert found is not None
    message = messages.no_fresh_report(found.condition_type, since, ctx.now)
    if state.reason is not Reason.NoFreshReport:
        ctx.announce(state, Reason.NoFreshReport, message, Severity.Warning)
    return replace(
        state,
        phase=Phase.Blocked,
        reason=Reason.NoFreshReport,
        message=message,
        next_check_at=ctx.fallback(state, Reason.NoFreshReport),
    )


def exhausted(
    ctx: Context, state: RemediationState, fault: Fault, found: matching.Match | None
) -> RemediationState:
    ran = tuple(dict.fromkeys(r.action for r in state.steps))
    fail = fault.on_exhausted is OnExhausted.Fail
    message = messages.exhausted(fault.name, ran, fail, state.dry_run)
    if fail:
        # The condition as it is now: only its clearing and return after this may reopen.
        state = replace(state, condition=observed(found))
        failed = ended(ctx, state, Phase.Failed, Reason.LadderExhausted, message)
        ctx.announce(failed, Reason.LadderExhausted, message, Severity.Warning)
        return failed
    held = replace(
        state,
        phase=Phase.Waiting,
        reason=Reason.LadderExhausted,
        message=message,
        next_check_at=ctx.fallback(state, Reason.LadderExhausted),
    )
    if state.reason is not Reason.LadderExhausted:
        ctx.announce(held, Reason.LadderExhausted, message, Severity.Warning)
    return held
