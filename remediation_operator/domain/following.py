"""Which fault an open incident follows now, read the way real node agents report.

Real agents keep a fault condition set until they restart and let the newest finding overwrite
its reason (the EKS node monitoring agent's `Fatal` keeps the status and lastTransitionTime,
replaces the reason and appends the message; node-problem-detector's permanent conditions do
the same: shared/reference/real-nodes.md, docs/decisions.md D58). So an incident that looked
only for the reason it opened with would read "XID 48, then XID 63" as recovery and give back
a node whose GPU was never reset. Instead, an open incident:

- moves onto a more severe fault of its policy (an earlier entry of `faults`) that the node
  now shows with strong evidence, between steps, keeping its record: the new ladder resumes
  after the furthest rung already reached, so no disruptive step that succeeded runs again;
  the quarantine taint's value follows it (`Requarantine`, D77);
- never moves onto a milder one;
- counts its own fault present while the condition it opened on stays in the fault status one
  of its rules asserts, whatever the reason says now (strong unless stale; Unknown: weak);
- counts a condition that vanished from the node as weak evidence that the fault stays (an
  agent removed or restarting), never as its absence: the node is held, not disrupted and
  not given back.

Only the condition back in another status (its healthy one) is absence; after a repair a
policy's validation decides too (`domain.validation`, D59).
"""

from __future__ import annotations

from dataclasses import replace

from remediation_operator.domain import ladder, matching, messages
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import Requarantine, Severity
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import LADDER_ORDER, Action, Fault
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import ObservedCondition, Outcome, RemediationState
from remediation_operator.domain.stage import Stage
from remediation_operator.domain.stage import of as stage_of


def severity(ctx: Context, fault: Fault) -> int:
    """The fault's position in the policy (0 is the most severe)."""
    return next(i for i, f in enumerate(ctx.policy.faults) if f.name == fault.name)


def worse(
    ctx: Context, state: RemediationState, node: NodeView, fault: Fault
) -> matching.Match | None:
    """A more severe fault of the policy the node shows now with strong evidence, if the
    incident may move onto it now (between steps: a step in flight finishes first)."""
    best = ctx.matches.get(node.name)
    if best is None or best.weak or best.fault.name == fault.name:
        return None
    if best.severity >= severity(ctx, fault):
        return None
    if stage_of(state) in (Stage.Running, Stage.Retrying):
        return None
    return best


def move_onto(
    ctx: Context,
    state: RemediationState,
    fault: Fault,
    found: matching.Match,
    observed: ObservedCondition | None,
) -> RemediationState:
    """The incident follows the more severe `found.fault` from now on; announced once."""
    new = found.fault
    moved = replace(
        state,
        fault=new.name,
        condition=observed or state.condition,
        healthy_since=None,
    )
    if state.step is not None:
        # The rung the incident reached, placed on the new ladder: the next step is the first
        # of the new ladder beyond it (`ladder.next_after`), so nothing that succeeded repeats.
        reached = state.step if state.step in LADDER_ORDER else _last_rung(state)
        at = ladder.index_of(new.ladder, reached) if reached is not None else None
        if at is None:
            order = LADDER_ORDER.index(reached) if reached is not None else -1
            below = [i for i, s in enumerate(new.ladder) if LADDER_ORDER.index(s.action) <= order]
            at = below[-1] if below else 0
        moved = replace(moved, step_index=at)
    if state.steps and not state.dry_run:
        # The quarantine taint's value names the fault the incident follows (D77): the
        # cordon wrote the first one, so it is pointed at the new one (a node without our
        # taint is not touched).
        ctx.mutate(Requarantine(state.node))
    message = messages.fault_worsened(fault.name, new.name, matching.describe(found, ctx.now))
    moved = replace(moved, reason=Reason.FaultWorsened, message=message)
    ctx.announce(moved, Reason.FaultWorsened, message, Severity.Warning)
    return moved


def _last_rung(state: RemediationState) -> Action | None:
    for record in reversed(state.steps):
        if record.action in LADDER_ORDER:
            return record.action
    return None


def unverified(ctx: Context, state: RemediationState) -> bool:
    """A repair the policy validates has started in this incident and no validation passed
    since: the fault reading absent is then no verdict of its own (an agent that restarted
    reads healthy whether or not the repair worked), so the validation decides (D59)."""
    config = ctx.policy.validation
    if config is None or state.dry_run or ctx.dry_run:
        return False
    for record in reversed(state.steps):
        if record.action is Action.Validate:
            return record.outcome is not Outcome.Succeeded and record.outcome is not None
        if record.action in config.after:
            return True
    return False


def present(
    ctx: Context, state: RemediationState, node: NodeView, fault: Fault
) -> matching.Match | None:
    """The incident's own fault as the node shows it now (see the module docstring)."""
    found = ctx.matches.get(node.name)
    if found is None or found.fault.name != fault.name:
        found = matching.match_fault(node, fault, ctx.now, ctx.policy.faults)
    if found is not None:
        return found
    opened = state.condition
    if opened is None:
        return None
    return matching.still_unhealthy(
        node,
        fault,
        severity(ctx, fault),
        opened.type,
        opened.status,
        ctx.now,
        ctx.policy.faults,
    )
