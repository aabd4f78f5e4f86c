"""Ending, holding and blocking an incident: the moves that start nothing.

Closing gives the node back according to what the incident itself did (its own `dry_run`
and `cordoned_by_us`), never according to the policy's current mode: an Enforce incident
under a policy switched to DryRun, or deleted, still removes the cordon, taint and
do-not-disrupt annotation it placed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from remediation_operator.domain import messages
from remediation_operator.domain.actions import ACTIONS
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import ProtectFromConsolidation, Release, Severity
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, RemediationState


def protected(state: RemediationState) -> bool:
    """The incident set do-not-disrupt (it started a step that keeps the node)."""
    return not state.dry_run and any(ACTIONS[r.action].in_place for r in state.steps)


def close(
    ctx: Context,
    state: RemediationState,
    phase: Phase,
    reason: Reason,
    message: str,
    *,
    release: bool,
    uncordon: bool | None = None,
) -> None:
    """End the incident; `release` gives the node back (taint off, maybe uncordon)."""
    closed = ended(ctx, state, phase, reason, message)
    if release:
        give_back(ctx, closed, state.cordoned_by_us if uncordon is None else uncordon)
    severity = Severity.Normal if phase is Phase.Succeeded else Severity.Warning
    ctx.announce(closed, reason, message, severity)
    ctx.finish(closed)


def ended(
    ctx: Context, state: RemediationState, phase: Phase, reason: Reason, message: str
) -> RemediationState:
    """The terminal state; a step still open ends Succeeded (the node was replaced, which
    is what Replace does) or Cancelled (abandoned), its record saying why."""
    now = ctx.now
    steps = state.steps
    outcome = state.step_outcome
    finished_at = state.step_finished_at
    if steps and steps[-1].outcome is None:
        replaced = reason is Reason.NodeReplaced and steps[-1].action is Action.Replace
        outcome = Outcome.Succeeded if replaced else Outcome.Cancelled
        finished_at = now
        closed = replace(
            steps[-1], finished_at=now, outcome=outcome, reason=reason, message=message
        )
        steps = (*steps[:-1], closed)
    return replace(
        state,
        phase=phase,
        reason=reason,
        message=message,
        finished_at=now,
        next_check_at=None,
        step_outcome=outcome,
        step_finished_at=finished_at,
        steps=steps,
    )


def give_back(ctx: Context, state: RemediationState, uncordon: bool) -> None:
    """Undo what the incident did to the node, whatever the policy's mode is now."""
    node = state.node
    view = ctx.snapshot.nodes.get(node) or ctx.snapshot.unselected.get(node)
    ours = state.cordoned_by_us or ctx.marked_ours(view)
    ctx.undo(Release(node, uncordon=uncordon and ours), state)
    if protected(state):
        ctx.undo(ProtectFromConsolidation(node, on=False), state)


def hold(ctx: Context, state: RemediationState, node: NodeView) -> None:
    """Paused policy or excluded node: stay where we are, undo nothing, start nothing."""
    if node.excluded:
        reason = Reason.NodeExcluded
        why = node.exclusion  # labelled or annotated: the message says which
    else:
        reason = Reason.Paused
        why = "the policy is paused"
    message = messages.held(state.step, why)
    held = replace(
        state,
        phase=Phase.Blocked,
        reason=reason,
        message=message,
        next_check_at=ctx.fallback(state, reason),
    )
    if state.reason is not reason:
        ctx.announce(held, reason, message)
    ctx.finish(held)


def blocked(
    ctx: Context,
    state: RemediationState,
    action: Action,
    reason: Reason,
    why: str,
    until: datetime | None = None,
) -> tuple[RemediationState, bool]:
    """The next step is due but may not start; say why and until when."""
    now = ctx.now
    at = until if until is not None and until > now else ctx.fallback(state, reason)
    message = messages.blocked(action, why, at, until is not None, now)
    held = replace(state, phase=Phase.Blocked, reason=reason, message=message, next_check_at=at)
    if state.reason is not reason or state.phase is not Phase.Blocked:
        ctx.announce(held, reason, message, action=action)
    return held, True
