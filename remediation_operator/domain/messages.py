"""Every sentence the planner shows a human, built apart from the decisions it explains.

A decision picks a Reason and the facts; these functions turn the facts into one sentence a
human can act on (status message, Event, log line). Rules they keep: a DryRun sentence says
"would", a finished step's record says how it ended (never "Escalating to ..."), a step is
said to have run only if it ran, and anything a human must do names the exact object or key.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from remediation_operator.domain import breaker, durations
from remediation_operator.domain.fleet import Condition
from remediation_operator.domain.policy import (
    Action,
    CircuitBreaker,
    ConditionMatch,
    Rate,
    ReplaceProvider,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import APPROVE_ANNOTATION


def clock(moment: datetime, now: datetime) -> str:
    """`11:04:10Z`, with the date when it is not today's."""
    if moment.date() == now.date():
        return moment.strftime("%H:%M:%SZ")
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def waits(check: datetime, limit: datetime | None, now: datetime) -> str:
    timeout = "" if limit is None else f", timeout at {clock(limit, now)}"
    return f"next check at {clock(check, now)}{timeout}"


def _names(items: Sequence[str], kind: str, limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return f"{kind} {shown}{more}"


# ------------------------------------------------------------------- detection and gates


def detected(fault: str, evidence: str) -> str:
    return f"Fault {fault} detected: {evidence}."


def repeat_offender(episodes: int, window: timedelta, then: Action) -> str:
    return (
        f"Node had {episodes} incidents in the last {durations.format(window)} that reached a"
        f" disruptive step on positive evidence; after the cordon the ladder skips ahead to"
        f" {then}."
    )


def owned_elsewhere(owner: str) -> str:
    return (
        f"the node belongs to RemediationPolicy {owner} (an active Remediation there, or a"
        " higher spec.weight, then the older policy, then the name)"
    )


def not_opened_owned(owner: str) -> str:
    return f"No incident is opened: {owned_elsewhere(owner)}."


def weak_evidence() -> str:
    return (
        "the only evidence is a stale heartbeat, a missing condition or an Unknown status,"
        " which may cordon but never disrupt"
    )


def unknown_until_held(
    condition: Condition, rule: ConditionMatch, strong_at: datetime, now: datetime
) -> str:
    seen = condition.observed_at
    since = "" if seen is None else f" since {clock(seen, now)}"
    held = "" if rule.positive_after is None else durations.format(rule.positive_after)
    return (
        f"{condition.type} has been {condition.status}{since} ({condition.reason or 'no reason'}:"
        f" the kubelet stopped posting), which becomes positive evidence that the host is gone"
        f" once it has held for {held}, at {clock(strong_at, now)}"
    )


def _ended(last: Action) -> str:
    """A restart of the node's pods makes earlier evidence old when it begins (D71)."""
    return f"{last} began" if last is Action.RestartPods else f"{last} ended"


def evidence_predates(last: Action, seen: datetime, ended: datetime, now: datetime) -> str:
    return (
        f"the fault was last seen changing at {clock(seen, now)}, before {_ended(last)} at"
        f" {clock(ended, now)}; a disruptive step needs the fault reported again after the"
        " previous one, and the agent's next report wakes it"
    )


def evidence_not_renewed(last: Action, ended: datetime, now: datetime) -> str:
    return (
        f"the fault's condition has not been reported again since {_ended(last)} at"
        f" {clock(ended, now)} (same heartbeat and transition); a disruptive step needs the"
        " fault reported again after the previous one, and the agent's next report wakes it"
    )


def breaker_holds(reason: Reason, group: str, small: bool) -> str:
    label = f"group {group!r}" if group else "the policy's nodes"
    if reason is Reason.CircuitCooldown:
        return f"the circuit breaker for {label} is cooling down"
    if small:
        return f"{label} is a small pool over its unhealthy limit: one node at a time"
    return f"the circuit breaker for {label} is open"


def breaker_changed(
    opened: bool, group: str, health: breaker.Health, config: CircuitBreaker
) -> str:
    label = f"group {group!r}" if group else "the policy's nodes"
    if opened:
        return (
            f"Circuit breaker opened for {label}: {health.unhealthy} of {health.total}"
            f" nodes show a fault (more than {config.max_unhealthy}); no new"
            " remediation starts until it closes."
        )
    if breaker.small(config, health):
        return (
            f"Circuit breaker closed for {label}: it has {health.total} nodes, fewer than"
            f" minNodes {config.min_nodes}; its faulty nodes are repaired one at a time."
        )
    return (
        f"Circuit breaker closed for {label}: {health.unhealthy} of {health.total}"
        f" nodes show a fault, within {config.max_unhealthy} for"
        f" {durations.format(config.cooldown)}; remediation resumes."
    )


def needs_approval(action: Action, remediation: str) -> str:
    return (
        f"it needs approval: kubectl annotate remediation {remediation}"
        f" {APPROVE_ANNOTATION}={action}"
    )


def budget_used(nodes: str, limit: int) -> str:
    return f"its budget (nodes={nodes}, {limit} at once) is used up"


def rate_used(rate: Rate) -> str:
    return f"{rate.max} disruptive steps already started in the last {durations.format(rate.per)}"


def blocked(action: Action, why: str, at: datetime, retrying: bool, now: datetime) -> str:
    when = f"retrying at {clock(at, now)}" if retrying else f"next check at {clock(at, now)}"
    return f"{action} is due but {why}; {when}."


def held(step: Action | None, why: str) -> str:
    where = f"after step {step}" if step is not None else "before its first step"
    return (
        f"Held {where} because {why}; nothing is undone and nothing new starts until that changes."
    )


# ------------------------------------------------------------------- steps


def started(
    action: Action, index: int, steps: int, attempt: int, escalating: bool, wait: str
) -> str:
    verb = "Escalating to" if escalating else "Started"
    return f"{verb} {action} (step {index + 1} of {steps}, attempt {attempt}); {wait}."


def dry_run_started(action: Action, index: int, steps: int, attempt: int) -> str:
    return (
        f"DryRun: would start {action} (step {index + 1} of {steps}, attempt {attempt});"
        " nothing was changed and the step counts as done."
    )


def succeeded(action: Action, detail: str) -> str:
    return f"{action} succeeded{': ' + detail if detail else ''}."


def retrying(action: Action, attempt: int, what: str) -> str:
    return f"{action} attempt {attempt} failed: {what}."


def failed(action: Action, attempt: int, what: str) -> str:
    return f"{action} failed for good (attempt {attempt}): {what}."


def timed_out(action: Action, took: timedelta) -> str:
    return f"{action} did not complete within {durations.format(took)}."


def retry_timed_out(action: Action) -> str:
    return f"{action} did not succeed before its timeout."


def retry_due(
    action: Action, attempt: int, at: datetime, limit: datetime | None, now: datetime
) -> str:
    timeout = "" if limit is None else ", timeout at " + clock(limit, now)
    return f"{action} attempt {attempt} failed; retrying at {clock(at, now)}{timeout}."


def fault_gone_in_drain() -> str:
    return "Fault cleared during the drain; the drain was stopped."


def fault_gone_before_retry(action: Action) -> str:
    return f"Fault cleared before {action} was retried; not retried."


def forced(pdbs: Sequence[str], pods: Sequence[str], left: str, wait: str) -> str:
    if pods:
        budget = f" past {_names(pdbs, 'PodDisruptionBudget')}" if pdbs else ""
        what = f"{_names(pods, 'pod', limit=10)}{budget}"
    else:
        what = f"the remaining pods{f' ({left})' if left else ''}"
    return f"Drain timed out (onTimeout: Force); deleting {what}; {wait}."


def force_pending(wait: str) -> str:
    return (
        "Drain timed out (onTimeout: Force); looking at the pods still on the node before"
        f" deleting them; {wait}."
    )


def draining(attempt: int, wait: str) -> str:
    return f"Draining the node (attempt {attempt}); {wait}."


def last_eviction(wait: str) -> str:
    return f"Drain reached its timeout; evicting the remaining pods one last time; {wait}."


def pdb_blocked(pdbs: Sequence[str], pods: Sequence[str], wait: str, past_timeout: bool) -> str:
    budgets = _names(pdbs, "PodDisruptionBudget") if pdbs else "a PodDisruptionBudget"
    who = f" evicting {_names(pods, 'pod')}" if pods else " an eviction"
    if past_timeout:
        return (
            f"Drain blocked by {budgets} refusing{who}; its timeout has passed and"
            f" onPDBBlocked is Wait, so evictions are retried until the budget allows them;"
            f" {wait}."
        )
    return f"Drain blocked by {budgets} refusing{who}; retrying evictions; {wait}."


def pdb_escalated(pdbs: Sequence[str], pods: Sequence[str], took: timedelta) -> str:
    budgets = _names(pdbs, "PodDisruptionBudget") if pdbs else "a PodDisruptionBudget"
    left = _names(pods, "pod") if pods else "its protected pods"
    return (
        f"Drain did not complete within {durations.format(took)}: {budgets} still refuses"
        f" evicting {left}; onPDBBlocked is Escalate, so the ladder goes on with them on the"
        " node."
    )


def waiting_for_reboot(wait: str) -> str:
    return f"Reboot requested; waiting for a new bootID and Ready=True; {wait}."


def replace_waiting(provider: ReplaceProvider, wait: str) -> str:
    if provider is ReplaceProvider.Karpenter:
        return f"NodeClaim deleted; waiting for Karpenter to remove the node; {wait}."
    if provider is ReplaceProvider.Manual:
        return f"Waiting for a human to replace the node; {wait}."
    return f"Node deletion requested; waiting for it to go; {wait}."


def waiting_for(action: Action, attempt: int, wait: str) -> str:
    return f"Waiting for {action} (attempt {attempt}) to complete; {wait}."


def replaced() -> str:
    return "The node's replacement was handed off and the node is gone."


def dry_run_replaced() -> str:
    return (
        "DryRun: the node would have been handed off for replacement; holding until the fault"
        " clears."
    )


def escalates_later(
    action: Action, fault: str, due: datetime, then: Action | None, now: datetime
) -> str:
    follows = f"{then} follows" if then is not None else "the ladder is exhausted"
    return f"{action} done; if fault {fault} is still present at {clock(due, now)}, {follows}."


# ------------------------------------------------------------------- tolerance and recovery


def tolerating(fault: str, until: datetime, now: datetime) -> str:
    return f"Fault {fault} present; tolerating it until {clock(until, now)} before the first step."


def flap_absent(fault: str, since: datetime, until: datetime, now: datetime) -> str:
    return (
        f"Fault {fault} absent since {clock(since, now)}; the incident closes at"
        f" {clock(until, now)} unless it returns (a fault that comes and goes counts as"
        " present)."
    )


def cleared_while_tolerating(fault: str) -> str:
    return f"Fault {fault} cleared within its tolerate window; nothing was done."


def fault_returned(fault: str, step: Action | None) -> str:
    return f"Fault {fault} returned during probation; the ladder resumes after step {step}."


def fault_worsened(old: str, new: str, evidence: str) -> str:
    return (
        f"The node now shows the more severe fault {new} ({evidence}); the incident follows"
        f" {new}'s ladder instead of {old}'s, after the furthest step it reached."
    )


def fault_cleared(fault: str) -> str:
    return f"Fault {fault} is absent; probation begins."


def probation(fault: str, since: datetime, ends: datetime, now: datetime, dry_run: bool) -> str:
    if dry_run:
        return (
            f"DryRun: fault {fault} absent since {clock(since, now)}; the incident closes at"
            f" {clock(ends, now)} if it stays absent (the node was never taken out of service)."
        )
    return (
        f"Fault {fault} absent since {clock(since, now)}; the node returns to service at"
        f" {clock(ends, now)} if it stays absent."
    )


def gpus_not_advertised(fault: str, allocatable: int | None, capacity: int, dry_run: bool) -> str:
    held = "the incident stays open (DryRun)" if dry_run else "the node stays cordoned"
    return (
        f"Fault {fault} stayed absent, but the node advertises {allocatable or 0} of its"
        f" {capacity} nvidia.com/gpu, so {held} until it advertises all {capacity}: the NVIDIA"
        " device plugin keeps a GPU it saw fail marked unhealthy until its pod restarts, so"
        " restart the device plugin pod on this node."
    )


def recovered(fault: str, healthy_for: timedelta, uncordon: bool, dry_run: bool) -> str:
    if dry_run:
        return (
            f"DryRun: fault {fault} stayed absent for {durations.format(healthy_for)}; the"
            " incident is closed (nothing had been changed on the node)."
        )
    uncordoned = " and uncordoned" if uncordon else ""
    return (
        f"Fault {fault} stayed absent for {durations.format(healthy_for)}; the node is back in"
        f" service (our taint removed{uncordoned})."
    )


def _ran(ran: Sequence[Action]) -> str:
    if not ran:
        return "no step of the ladder could run"
    return "steps " + ", ".join(str(a) for a in ran) + " ran"


def exhausted(fault: str, ran: Sequence[Action], fail: bool, dry_run: bool) -> str:
    done = f"The {fault} ladder is exhausted ({_ran(ran)}) and the fault remains; "
    if dry_run:
        return done + "DryRun: the node would be left for a human; nothing was changed."
    if fail:
        return (
            done + "the node is left cordoned for a human; no new incident opens until the fault"
            " clears and returns, or the Remediation is deleted."
        )
    return done + "the node stays quarantined until the fault clears."


def stays_failed(name: str) -> str:
    return (
        f"Remediation {name} failed on this fault and it has not cleared since; the node is"
        " left for a human (delete that Remediation to start again)"
    )


# ------------------------------------------------------------------- closing


def node_replaced() -> str:
    return "The node is gone; the incident is closed."


def node_deleted() -> str:
    return "The node was deleted before the incident ended; nothing is left on it to undo."


def node_recreated() -> str:
    return (
        "The node was deleted and a new Node of the same name joined before the incident"
        " ended; the incident is closed (a fault on the new Node opens a new one)."
    )


def node_unselected(policy: str, dry_run: bool, replacing: bool) -> str:
    if dry_run:
        return (
            f"RemediationPolicy {policy} no longer selects this node (its labels changed); this"
            " DryRun incident is closed (it had changed nothing on the node)."
        )
    if replacing:
        return (
            f"RemediationPolicy {policy} no longer selects this node (its labels changed); the"
            " incident is closed and the node, already handed over for replacement, stays"
            " cordoned."
        )
    return (
        f"RemediationPolicy {policy} no longer selects this node (its labels changed); the"
        " incident is closed and the node given back: our cordon and taint removed (an"
        " administrator's cordon stays)."
    )


def policy_deleted(policy: str, dry_run: bool) -> str:
    if dry_run:
        return (
            f"RemediationPolicy {policy} was deleted; this DryRun incident is closed (it had"
            " changed nothing on the node)."
        )
    return (
        f"RemediationPolicy {policy} was deleted; the incident is closed and the node is given"
        " back (our taint removed, uncordoned if we cordoned it)."
    )


def fault_removed(fault: str, dry_run: bool) -> str:
    if dry_run:
        return (
            f"The policy no longer defines fault {fault}; this DryRun incident is closed (it had"
            " changed nothing on the node)."
        )
    return f"The policy no longer defines fault {fault}; the node is returned to service."


def admin_uncordoned() -> str:
    return (
        "An administrator uncordoned the node; this incident is cancelled and the node is left"
        " alone."
    )


def admin_uncordoned_unrecorded() -> str:
    return (
        "An administrator uncordoned the node after a cordon of ours that no Remediation had"
        " recorded yet; this incident is cancelled and the node is left alone."
    )


def mode_changed() -> str:
    return "The policy now enforces; this DryRun incident is closed and a real one opens."


def already_cordoned() -> str:
    return (
        "The node was already cordoned by someone else; it will not be uncordoned when the"
        " incident ends."
    )


def unrecorded_released(node: str, policy: str, uncordon: bool) -> str:
    return (
        f"Node {node} carried a cordon of policy {policy} that no Remediation records (the"
        " operator stopped between the cordon and its record) and shows no fault; our taint is"
        f" removed{' and the node uncordoned' if uncordon else ''}."
    )


# ------------------------------------------------------------------- validation (D37)


def validation_started(repaired: Action, wait: str) -> str:
    return f"{repaired} succeeded; validating the node before it returns to service; {wait}."


def validation_passed(took: timedelta, detail: str) -> str:
    said = f" ({detail})" if detail else ""
    return (
        f"Validation passed in {durations.format(took)}{said}; the node may return to service"
        " once the fault stays absent through probation."
    )


def validation_failed(took: timedelta, detail: str, then: Action | None) -> str:
    said = f": {detail}" if detail else ""
    nxt = f"escalating to {then}" if then is not None else "no step is left on the ladder"
    return f"Validation failed after {durations.format(took)}{said}; {nxt}."


def validation_timed_out(took: timedelta, then: Action | None) -> str:
    nxt = f"escalating to {then}" if then is not None else "no step is left on the ladder"
    return f"Validation did not finish within {durations.format(took)}; {nxt}."


def evicting_before_reboot(pods: str, wait: str) -> str:
    return (
        "The drain before the GPU reset left pods that use no GPU; the reboot would stop them,"
        f" so they are evicted first under the full drain rules ({pods}); {wait}."
    )


def validation_not_run(why: str) -> str:
    said = why.rstrip(".") if why else "its Job did not run"
    return (
        f"Validation could not run ({said}): no verdict on the GPU, so the node stays cordoned"
        " and nothing climbs; fix the validation Job and uncordon the node to return it, or"
        " let the fault's return move the ladder on."
    )


def fault_returned_in_validation(condition: str, took: timedelta, then: Action | None) -> str:
    nxt = f"escalating to {then}" if then is not None else "no step is left on the ladder"
    return (
        f"The fault was reported again ({condition}) {durations.format(took)} into the"
        f" validation: the validation ends failed; {nxt}."
    )


# ------------------------------------------------------------------- diagnostics (D39)


def diagnosing(target: Action, location: str, wait: str) -> str:
    return f"{target} is due; collecting diagnostics to {location} first; {wait}."


def diagnosed(target: Action, location: str, took: timedelta) -> str:
    return f"Diagnostics collected to {location} in {durations.format(took)}; {target} follows."


def diagnostics_failed(target: Action, location: str, took: timedelta, detail: str | None) -> str:
    """`detail` None: the diagnostics ran out of time."""
    said = " (timed out)" if detail is None else f": {detail or 'the Job failed'}"
    return (
        f"Diagnostics for {location} failed after {durations.format(took)}{said};"
        f" {target} goes on without them."
    )


# ------------------------------------------------------------------- restart before validation


def restarting_node_pods(repaired: Action, selectors: Sequence[str], wait: str) -> str:
    return (
        f"{repaired} succeeded; restarting the pods that hold stale state on the node"
        f" ({', '.join(selectors)}) before validating it; {wait}."
    )


def node_pods_restarting(detail: str, wait: str) -> str:
    said = f" ({detail})" if detail else ""
    return f"Restarting the pods that hold stale state on the node{said}; {wait}."


def node_pods_waiting(waiting: Sequence[str]) -> str:
    return f"waiting for {'; '.join(waiting)}"


def node_pods_back(pods: Sequence[str], absent: Sequence[str]) -> str:
    back = f"new pods Ready: {', '.join(pods)}" if pods else "nothing to restart"
    none = f"; no pod of {', '.join(absent)} runs on this node" if absent else ""
    return f"{back}{none}"


def node_pods_restarted(detail: str, took: timedelta) -> str:
    return f"Pods restarted in {durations.format(took)} ({detail}); validating the node next."


def node_pods_not_back(waiting: str, took: timedelta) -> str:
    return (
        f"The restarted pods were not back Ready within {durations.format(took)} ({waiting}):"
        " no verdict on the repair, so the node stays cordoned and nothing climbs; check the"
        " DaemonSet of those pods on this node, then uncordon the node to return it, or let"
        " the fault's return move the ladder on."
    )


def no_fresh_report(condition: str, since: datetime, now: datetime) -> str:
    return (
        f"Validation passed, but {condition} has not been reported again since its agent was"
        f" restarted at {clock(since, now)}: the report before the restart says nothing about"
        " the repair, so the node stays cordoned until the agent reports (check its pod on"
        " this node)."
    )
