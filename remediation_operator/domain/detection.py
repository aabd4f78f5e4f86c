"""New incidents: whether a faulty node gets a Remediation now, and the unrecorded cordons.

A faulty node opens no incident while it is starting up, excluded, under a paused policy,
owned by another policy (docs/decisions.md: the ownership rule), left alone after an
administrator's uncordon or a Failed incident on the same unchanged condition, or held by the
circuit breaker. History (the repeat-offender rule) counts only past incidents that reached a
disruptive step, which the evidence gate lets happen only on positive evidence.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from remediation_operator.domain import bounds, breaker, matching, messages, remediation
from remediation_operator.domain.actions import ACTIONS
from remediation_operator.domain.closing import close
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import Announce, Release, Severity
from remediation_operator.domain.fleet import BreakerState, Condition, NodeView
from remediation_operator.domain.incident import observed, progress
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    ObservedCondition,
    Phase,
    RemediationState,
)

UNRECORDED_GRACE = timedelta(seconds=60)
"""After a Remediation of a node ends, how long its node view may still show the quarantine
the ending released (our watch lags our writes); an unrecorded cordon is judged only after."""


def detect(ctx: Context, node: NodeView, found: matching.Match) -> None:
    policy, now = ctx.policy, ctx.now
    name = node.name
    if name in ctx.starting:
        assert node.created_at is not None
        ctx.reasons[name] = Reason.NodeStarting
        ctx.wakes.append(node.created_at + policy.startup_grace)
        return
    if node.excluded:
        ctx.reasons[name] = Reason.NodeExcluded
        return
    if policy.is_paused:
        ctx.reasons[name] = Reason.Paused
        return
    if name in ctx.snapshot.foreign:
        ctx.reasons[name] = Reason.OwnedByOtherPolicy
        return
    stop = _left_alone(ctx, name, found)
    if stop is not None:
        ctx.reasons[name] = stop.reason
        return
    config = policy.circuit_breaker
    if config is not None:
        group = breaker.group_of(node, config)
        group_state = ctx.breakers.get(group, BreakerState())
        holds = ctx.slot.get(group, name) == name
        health = ctx.health.get(group, breaker.Health())
        if breaker.blocks(config, group_state, health, holds) is not None:
            ctx.reasons[name] = Reason.CircuitOpen
            return
        ctx.slot.setdefault(group, name)
    fault = found.fault
    history = _history(ctx, name)
    taken = {s.name for s in ctx.past.get(name, ())}
    message = messages.detected(fault.name, matching.describe(found, now))
    state = RemediationState(
        name=remediation.name_for(name, now, taken, policy.name),
        node=name,
        policy=policy.name,
        fault=fault.name,
        phase=Phase.Pending,
        reason=Reason.Tolerating,
        message=message,
        started_at=now,
        condition=observed(found),
        dry_run=ctx.dry_run,
        repeat_offender=history is not None,
        node_created_at=node.created_at,
    )
    ctx.announce(state, Reason.FaultDetected, message)
    if node.quarantined and node.quarantined_by == policy.name and not node.unschedulable:
        # Our taint goes on only with our cordon, so a schedulable node carrying it was
        # uncordoned after a cordon of ours that no Remediation recorded (D14). The
        # administrator's uncordon stands (D12); recording the incident as cancelled keeps
        # `_left_alone` from reopening it until the fault changes.
        close(
            ctx,
            state,
            Phase.Cancelled,
            Reason.AdminUncordoned,
            messages.admin_uncordoned_unrecorded(),
            release=True,
            uncordon=False,
        )
        return
    if history is not None:
        ctx.announce(state, Reason.RepeatOffender, history, Severity.Warning)
    ctx.finish(progress(ctx, state, node, fault, found))


def _same_condition(stored: ObservedCondition | None, now: Condition | None) -> bool:
    """The condition has not transitioned since it was stored (remote times compared only with
    remote times of the same condition, never with our clock)."""
    if stored is None or now is None:
        return stored is None and now is None
    return (  # stored text was cut (domain.bounds): compare as stored
        bounds.same(stored.type, now.type)
        and bounds.same(stored.status, now.status)
        and stored.last_transition_time == now.last_transition_time
    )


def _left_alone(ctx: Context, node: str, found: matching.Match) -> RemediationState | None:
    """A past incident on the same fault that said "leave this node to a human", while its
    condition has not cleared and come back since: an administrator's uncordon (opening again
    would fight the admin) or a Failed ladder (`onExhausted: Fail`: the node waits for a
    human; a return within `recovery.healthyFor` of the failure counts as the same fault).
    Deleting that Remediation is the administrator's way to start again. The hold belongs to
    the machine: a Node of the same name created since (a new machine) is not held."""
    view = ctx.snapshot.nodes.get(node)
    created = view.created_at if view is not None else None
    for state in ctx.past.get(node, ()):
        if state.fault != found.fault.name:
            continue
        if None not in (state.node_created_at, created) and state.node_created_at != created:
            continue  # another machine under the same name: a fresh start
        failed = state.phase is Phase.Failed and state.reason is Reason.LadderExhausted
        if (state.reason is Reason.AdminUncordoned or failed) and _same_condition(
            state.condition, found.condition
        ):
            return state
        if failed and state.finished_at is not None:
            # A fault that comes back within `recovery.healthyFor` of a failure is the same
            # flapping fault (docs/decisions.md D29): one Failed incident, not one per flap.
            again = state.finished_at + ctx.policy.recovery.healthy_for
            if ctx.now < again:
                ctx.wakes.append(again)
                return state
    return None


def counts_as_episode(state: RemediationState) -> bool:
    """History counts an incident only if it reached a disruptive step for real (which the
    evidence gate allows only on strong, fresh evidence): not a transient that cleared while
    tolerated, not a cordon on weak evidence, not a DryRun."""
    return not state.dry_run and any(ACTIONS[r.action].disruptive for r in state.steps)


def _history(ctx: Context, node: str) -> str | None:
    """Why this new episode is a repeat offender, or None."""
    history = ctx.policy.history
    if history is None:
        return None
    since = ctx.now - history.window
    episodes = sum(
        1 for s in ctx.past.get(node, ()) if s.started_at >= since and counts_as_episode(s)
    )
    if episodes < history.max_episodes:
        return None
    return messages.repeat_offender(episodes, history.window, history.then)


def release_unrecorded(ctx: Context, focus: frozenset[str] | None) -> None:
    """Give back a node whose cordon by this policy no Remediation records.

    The engine cordons before it writes the Remediation (D14); if the operator stopped in
    between and the fault has cleared since, nothing else would ever undo that cordon. A
    node that still shows a fault keeps its quarantine: `detect` opened (or will open, once
    a pause, breaker or grace period allows) the Remediation that owns it, and so does a node
    another policy claims (its incident holds the node, or its fault will open one whose
    cordon takes the quarantine over: a hand-over, D76). The release does not depend on the
    policy's current mode: the cordon was ours.
    """
    nodes = ctx.snapshot.nodes
    names = nodes if focus is None else [n for n in focus if n in nodes]
    policy = ctx.policy
    for name in names:
        node = nodes[name]
        if node.quarantined_by != policy.name or name in ctx.snapshot.active:
            continue
        if name in ctx.matches and not policy.deleted:
            continue
        if name in ctx.snapshot.claimed:
            continue  # another policy's incident holds it or will take the cordon over (D76)
        if any(s.node == name for s in ctx.changed):
            continue
        if _failed_last(ctx, name):
            continue  # `onExhausted: Fail` left the node cordoned for a human
        settled = _settled_at(ctx, name)
        if settled is not None and settled > ctx.now:
            ctx.wakes.append(settled)
            continue
        uncordon = node.uncordon_on_release and node.unschedulable
        ctx.undo(Release(name, uncordon=uncordon), None)
        message = messages.unrecorded_released(name, policy.name, uncordon)
        ctx.effects.append(
            Announce(name, None, Reason.UnrecordedCordonReleased, message, Severity.Normal)
        )
        ctx.reasons[name] = Reason.UnrecordedCordonReleased


def _failed_last(ctx: Context, node: str) -> bool:
    past = ctx.past.get(node)
    if not past:
        return False
    last = max(past, key=lambda s: (s.started_at, s.name))
    return last.phase is Phase.Failed and last.reason is Reason.LadderExhausted


def _settled_at(ctx: Context, node: str) -> datetime | None:
    """Until when the node's view may still predate the release that ended its last
    Remediation (the watch lags our own writes): no unrecorded cordon is judged before."""
    ended = [s.finished_at for s in ctx.past.get(node, ()) if s.finished_at is not None]
    return max(ended) + UNRECORDED_GRACE if ended else None
