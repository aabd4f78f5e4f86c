"""Diagnostics before a destructive step: what support and RMA cases need, taken first.

A reboot clears the kernel log and the GPU's state; a replacement takes the machine away.
With a policy `diagnostics`, a Reboot or Replace (those in `before`) that passed its gates is
preceded by a Diagnose step: a Job pinned to the node (nvidia-bug-report, kernel log, DCGM
output) writing to the policy's destination. The record of that step says where
(`StepRecord.location`). It has its own timeout and never holds the destructive step past it:
whether it succeeds, fails or times out, the step it preceded starts next (through the gates
again, so a budget taken meanwhile still holds it). It runs once per start of the step, not on
retries or on a step resumed after a flap, and not in DryRun.

Like Validate, it is not a rung: the incident's position stays the step before it
(`validation.reached`).
"""

from __future__ import annotations

from remediation_operator.domain import messages, stage
from remediation_operator.domain.actions import ACTIONS, Start
from remediation_operator.domain.context import Context
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import RemediationState


def due(ctx: Context, state: RemediationState, action: Action, attempt: int, resume: bool) -> bool:
    """The step about to start is one the policy collects diagnostics before, and this is
    its first start (the incident's last record is not already the diagnostics for it)."""
    config = ctx.policy.diagnostics
    last = state.steps[-1] if state.steps else None
    return (
        config is not None
        and action in config.before
        and not ctx.dry_run
        and not state.dry_run
        and attempt == 1
        and not resume
        and state.step is not None
        and (last is None or last.action is not Action.Diagnose)
    )


def runs(state: RemediationState) -> int:
    """How many diagnostics runs the incident has started (each has its own Job)."""
    return sum(1 for r in state.steps if r.action is Action.Diagnose)


def begin(
    ctx: Context, state: RemediationState, node: NodeView, target: Action
) -> tuple[RemediationState, bool]:
    """Start collecting diagnostics before `target` (whose gates have passed)."""
    config = ctx.policy.diagnostics
    assert config is not None
    now = ctx.now
    attempt = runs(state) + 1
    meaning = ACTIONS[Action.Diagnose]
    ctx.mutate(meaning.start(Start(node.name, state.name, attempt, ctx.policy)))
    location = config.location(state.name, attempt)
    limit = now + config.timeout
    check = min(now + meaning.pace(now, now), limit)
    message = messages.diagnosing(target, location, messages.waits(check, limit, now))
    started = stage.accompany(
        state,
        Action.Diagnose,
        attempt,
        now,
        Reason.CollectingDiagnostics,
        message,
        check,
        location=location,
        timeout=config.timeout,
    )
    ctx.announce(started, Reason.CollectingDiagnostics, message, action=Action.Diagnose)
    return started, True
