"""Restart what holds stale state on a node after a repair, before its validation (D71).

Both supported health agents are sticky: the EKS node monitoring agent writes its condition
healthy only when it starts, node-problem-detector keeps a kernel-log condition until it
restarts, and the NVIDIA device plugin keeps a GPU it saw fail unhealthy for the life of its
process (shared/reference/real-nodes.md). After a reset that worked, the condition still
shows the fault and the node advertises fewer GPUs than it has: read as they are, every
reset would look failed. So when a repair the policy validates succeeded and the policy
names such pods (`validation.restartPods`), a RestartPods step comes first:

- its first look lists those pods on the node and the step records them (`remember`,
  `StepRecord.restarted`); then it deletes them (plain delete: DaemonSet pods, recreated
  there), only those created before the step started (`RestartNodePods.created_before`, whole
  seconds: the API's creationTimestamp has one-second resolution), so a repeat after a crash
  deletes nothing new;
- it waits, bounded by `validation.timeout`, until every entry that had a pod on the node (or
  has one now) has one created since, Running and Ready (an entry with no pod there at all,
  e.g. the EKS agent on a cluster that runs node-problem-detector, has nothing to restart);
- then the validation runs. Pods not back in time give no verdict (`NodePodsNotBack`): the
  node is held, as a validation that could not run is (D53), nothing climbs.

The restart is an evidence boundary (`gates.evidence_ended`): what the agents showed before it
is their old processes' word; after the validation passed, the fault still shown counts only
if reported since (else `NoFreshReport`, held); the healthy case still needs every GPU
advertised (D68).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from remediation_operator.domain import gates, matching, messages, stage
from remediation_operator.domain.closing import blocked
from remediation_operator.domain.context import Context
from remediation_operator.domain.effects import RestartNodePods
from remediation_operator.domain.fleet import NodePod, NodeView, Progress, StepObservation
from remediation_operator.domain.policy import Action, RestartTarget
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, RemediationState

MAX_RECORDED = 32
"""At most this many pods named in one step's record (the API's bound)."""


def cutoff(started_at: datetime) -> datetime:
    """The restart instant in whole seconds: a pod created before it is an old one."""
    return RestartNodePods.started("", (), started_at).created_before


def wanted(ctx: Context, state: RemediationState) -> bool:
    """The policy restarts pods before validating, and they were not restarted since the
    repair the validation checks (an interrupted validation runs again without a restart)."""
    config = ctx.policy.validation
    if config is None or not config.restart_pods:
        return False
    for record in reversed(state.steps):
        if record.action is Action.RestartPods and record.outcome is Outcome.Succeeded:
            return False
        if record.action in config.after:
            return True
    return True


def begin(
    ctx: Context,
    state: RemediationState,
    node: NodeView,
    found: matching.Match | None,
    repaired: Action,
) -> tuple[RemediationState, bool]:
    """Start the restart of the policy's pods on the node (unless a gate holds it)."""
    config = ctx.policy.validation
    assert config is not None
    hold = gates.first_hold(ctx, gates.Request(state, node, Action.RestartPods, found))
    if hold is not None:
        return blocked(ctx, state, Action.RestartPods, hold.reason, hold.why, hold.until)
    now = ctx.now
    attempt = sum(1 for r in state.steps if r.action is Action.RestartPods) + 1
    # Nothing is deleted yet: the first look (at once) records which pods the node runs, and
    # the deletion follows that record (`remember`), so an entry whose pod is gone and not
    # yet recreated still reads as one to wait for.
    limit = now + config.timeout
    check = now
    selectors = [t.describe() for t in config.restart_pods]
    message = messages.restarting_node_pods(repaired, selectors, messages.waits(check, limit, now))
    started = stage.accompany(
        state,
        Action.RestartPods,
        attempt,
        now,
        Reason.RestartingNodePods,
        message,
        check,
        timeout=config.timeout,
    )
    ctx.announce(started, Reason.RestartingNodePods, message, action=Action.RestartPods)
    return started, True


@dataclass(frozen=True)
class Restart:
    """Where a restart stands, from the pods on the node (`observe`)."""

    progress: Progress
    back: tuple[str, ...] = ()
    """`namespace/name` of the new pods, Ready."""
    waiting: tuple[str, ...] = ()
    """One clause per entry still waited for."""
    absent: tuple[str, ...] = ()
    """Entries with no pod on the node at all (nothing to restart)."""

    def message(self) -> str:
        if self.waiting:
            return messages.node_pods_waiting(self.waiting)
        return messages.node_pods_back(self.back, self.absent)


def named(pod: NodePod, target: RestartTarget) -> str:
    """How the step's record names a pod it restarts: `<namespace>/<name> (<entry>)`."""
    return f"{pod.namespace}/{pod.name} ({target.describe()})"


def observe(
    targets: Sequence[RestartTarget],
    pods: Sequence[NodePod],
    started_at: datetime,
    restarted: Sequence[str] = (),
) -> Restart:
    """Absent while an old pod is not yet deleted (the restart's effect did not happen yet: it
    is applied, deleting only old pods); InProgress while an entry waits for its new pod to be
    Ready; Succeeded when every entry that had pods on the node (`restarted`, the record) or
    has some now has a new one Ready. An entry with no pod there at all, and none recorded,
    has nothing to restart."""
    since = cutoff(started_at)
    back: list[str] = []
    waiting: list[str] = []
    absent: list[str] = []
    undeleted = False
    for index, target in enumerate(targets):
        mine = [p for p in pods if p.target == index]
        if not mine:
            entry = f"({target.describe()})"
            if any(r.endswith(entry) for r in restarted):
                waiting.append(f"{target.describe()}: no new pod yet")
            else:
                absent.append(target.describe())
            continue
        old = [p for p in mine if p.created_at < since]
        new = [p for p in mine if p.created_at >= since and not p.deleting]
        ready = [p for p in new if p.ready]
        if any(not p.deleting for p in old):
            undeleted = True
            waiting.append(f"{target.describe()}: {_pod_names(old)} not deleted yet")
        elif not ready:
            what = f"{_pod_names(new)} not Ready yet" if new else "no new pod yet"
            waiting.append(f"{target.describe()}: {what}")
        else:
            back.extend(f"{p.namespace}/{p.name}" for p in ready)
    if undeleted:
        progress = Progress.Absent
    elif waiting:
        progress = Progress.InProgress
    else:
        progress = Progress.Succeeded
    return Restart(progress, tuple(back), tuple(waiting), tuple(absent))


def _pod_names(pods: Sequence[NodePod]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)


def observation(
    targets: Sequence[RestartTarget],
    pods: Sequence[NodePod],
    started_at: datetime,
    attempt: int,
    restarted: Sequence[str] = (),
) -> StepObservation:
    """The engine's observation of a running RestartPods step."""
    seen = observe(targets, pods, started_at, restarted)
    since = cutoff(started_at)
    holding = tuple(named(p, targets[p.target]) for p in pods if p.created_at < since)
    return StepObservation(
        action=Action.RestartPods,
        attempt=attempt,
        progress=seen.progress,
        message=seen.message(),
        holding=holding,
    )


def remember(state: RemediationState, obs: StepObservation | None) -> RemediationState:
    """Record in the running step the old pods just seen (before they are deleted)."""
    record = state.steps[-1] if state.steps else None
    if obs is None or record is None or record.action is not Action.RestartPods:
        return state
    new = [h for h in obs.holding if h not in record.restarted]
    if not new:
        return state
    kept = (*record.restarted, *new)[:MAX_RECORDED]
    return replace(state, steps=(*state.steps[:-1], replace(record, restarted=kept)))


def not_back(state: RemediationState) -> bool:
    """The incident's last record is a restart whose pods did not come back: it rests, held."""
    last = state.steps[-1] if state.steps else None
    return (
        last is not None
        and last.action is Action.RestartPods
        and last.reason is Reason.NodePodsNotBack
    )


def restarted_at(state: RemediationState) -> datetime | None:
    """When the pods were restarted after the incident's last repair (None: they were not)."""
    for record in reversed(state.steps):
        if record.action is Action.RestartPods and record.outcome is Outcome.Succeeded:
            return record.started_at
        if record.action in gates.REPAIRS:
            return None
    return None
