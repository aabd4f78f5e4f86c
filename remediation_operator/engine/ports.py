"""The engine's view of the outside world: small async ports, their values and their errors.

The engine reconciles through these Protocols only, so the same code drives the real operator
(`k8s/` implements them against the Kubernetes API) and the simulator
(`sim/memory_cluster.py` implements them in memory). Ports speak domain values
(`RemediationState`, `BreakerState`, `Progress`); converting to and from API objects is the
implementation's job. There is no clock port: every caller passes `now`.

Contract for every implementation:
- Effect methods are idempotent: applying one twice leaves the same state as applying it once
  (creating a Job that already exists, deleting a NodeClaim already gone, cordoning a cordoned
  node are successes). The engine relies on this to re-apply an effect after a crash.
- Errors are only the four below. `Refused` for a step that cannot be done on this node as
  the policy asks (permanent, with the reason), `NotFound` for a vanished object, `Conflict`
  for a stale write (optimistic concurrency) or a create that finds the object already there,
  `Transient` for anything worth retrying (timeouts, 5xx, 429 other than an eviction refused
  by a PDB, which is a normal `DrainStatus`, not an error). Anything else is a bug and
  propagates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from remediation_operator.domain.effects import EVERY_POD, DrainPlan, Severity
from remediation_operator.domain.fleet import BreakerState, NodePod, Progress
from remediation_operator.domain.planner import PolicySummary
from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    ReplaceProvider,
    RestartTarget,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, RemediationState

# --------------------------------------------------------------------------------------------
# Errors


class PortError(Exception):
    """Base of the only errors a port may raise."""


class NotFound(PortError):  # noqa: N818 - read as ports.NotFound, like HTTP's names
    """The object (node, Remediation, policy) does not exist (any more)."""


class Conflict(PortError):  # noqa: N818
    """A write lost a race: stale resourceVersion, or a create found the object there already.

    The engine handles it by re-reading the Remediations and planning that node again.
    """


class Refused(PortError):  # noqa: N818
    """The step cannot be carried out on this node the way the policy asks, and retrying will
    not change that (Replace with the Karpenter provider on a node that has no NodeClaim, or
    with no NodeClaim CRD installed). The message says why and what to do instead; the step
    fails at once (status, Event and log), it does not wait out its timeout."""


class Transient(PortError):  # noqa: N818
    """A failure worth retrying later; `retry_after` is the implementation's hint."""

    def __init__(self, message: str, retry_after: timedelta = timedelta(seconds=5)) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --------------------------------------------------------------------------------------------
# Values crossing the ports


@dataclass(frozen=True)
class DrainStatus:
    """What is left to drain on a node.

    `remaining`: pods that still need to leave (not DaemonSet-owned, not mirror pods, not in a
    terminal phase). `blocked_by_pdb`: the most recent eviction on this node was refused with
    429 by a PodDisruptionBudget. `attempted`: this process has issued an eviction for this
    node since it started (False after a restart: the engine then re-issues the drain).
    """

    remaining: int
    blocked_by_pdb: bool = False
    attempted: bool = False
    message: str = ""
    pdbs: tuple[str, ...] = ()
    """With `blocked_by_pdb`: the PodDisruptionBudgets (`namespace/name`) that refused."""
    blocked_pods: tuple[str, ...] = ()
    """With `blocked_by_pdb`: the pods (`namespace/name`) whose eviction was refused."""


@dataclass(frozen=True)
class ExecutorStatus:
    """Progress of one GPUReset/Reboot attempt (a Job, a NodeAgent ack, or Noop).

    `Absent`: nothing was started for this (remediation, action, attempt) yet.
    `permanent` with `Failed`: retrying cannot help (escalate at once).
    """

    progress: Progress
    message: str = ""
    permanent: bool = False
    not_run: bool = False
    """With `Failed`: the check could not run at all (no Job template, its pod refused by
    admission), so it gave no verdict on the node (a validation holds, it does not climb)."""
    started: bool = True
    """False while no pod of the Job has run (none created, Pending, suspended): a
    validation timing out then gave no verdict either; `message` says why when known."""


@dataclass(frozen=True)
class RemediationRecord:
    """A Remediation object as read: its state plus what optimistic concurrency needs."""

    state: RemediationState
    resource_version: str
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyState:
    """What the engine keeps in a policy's status between reconciles."""

    breakers: Mapping[str, BreakerState] = field(default_factory=dict)
    """By group value (`""` when the policy has no groupBy)."""
    summary: PolicySummary | None = None
    """The last summary written (None before the first); the engine skips identical writes."""


@dataclass(frozen=True)
class Explanation:
    """One explained decision, ready to become Kubernetes Events and a log line.

    Events go on the Node (when `node` is not empty), else on the Remediation (when
    `remediation` is set); a policy-wide decision (node `""`, e.g. CircuitOpen) goes on the
    RemediationPolicy; a Cordon's start is not posted (handlers/event_queue.py).
    Implementations deduplicate by (object, reason, message) and count repeats, like the
    Kubernetes event recorder.
    """

    policy: str
    node: str
    remediation: str | None
    reason: Reason
    message: str
    severity: Severity
    action: Action | None
    at: datetime
    group: str | None = None
    """For a policy-wide decision about a circuit breaker: the group it concerns."""


@dataclass(frozen=True)
class StepTransition:
    """A step started (`outcome` None) or ended, derived from a Remediation's steps[]."""

    policy: str
    node: str
    remediation: str
    fault: str
    action: Action
    attempt: int
    reason: Reason
    outcome: Outcome | None = None
    duration: timedelta | None = None
    """With an outcome: from the step attempt's start to its end."""


# --------------------------------------------------------------------------------------------
# Ports


class ClusterPort(Protocol):
    """Observe and change Nodes and the things that act on them (pods, executors, NodeClaims)."""

    # Observations -------------------------------------------------------------------------

    async def drain_status(self, node: str, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        """Pods left to move on `node` under `plan` (those waiting to complete included).
        Raises NotFound if the node is gone."""
        ...

    async def executor_status(
        self,
        node: str,
        remediation: str,
        action: Action,
        attempt: int,
        executor: ActionExecutor,
    ) -> ExecutorStatus:
        """Progress of the GPUReset/Reboot executor started for this attempt.

        Job: from the Job (named from remediation, action, attempt) conditions Complete/Failed;
        NodeAgent: from the Node's `remediation.gpuops.io/agent-ack` annotation matching
        `<Action>:<remediation>:<attempt>`; Noop: always Succeeded.
        """
        ...

    async def replacement_status(self, node: str, provider: ReplaceProvider) -> Progress:
        """Succeeded only when the node (Karpenter: its NodeClaim) is observed gone; InProgress
        while its deletion runs (Manual: the node is labelled); Absent when nothing was
        requested. `Refused` when the provider cannot replace this node (Karpenter: the node
        has no NodeClaim, or the NodeClaim CRD is not installed)."""
        ...

    async def node_pods(self, node: str, targets: Sequence[RestartTarget]) -> Sequence[NodePod]:
        """The pods on `node` (spec.nodeName) that each of `targets` selects (its namespace, its
        label selector), terminating ones included, each tagged with the index of the first
        target that selects it. Raises NotFound if the node is gone."""
        ...

    # Effects (one per domain.effects type, all idempotent) -----------------------------------

    async def cordon(self, node: str, fault: str, policy: str) -> None:
        """spec.unschedulable=true plus taint `remediation.gpuops.io/quarantine=<fault>:NoSchedule`,
        in the same write annotations `remediation.gpuops.io/quarantined-by: <policy>` and, when
        this write is what made the node unschedulable, `remediation.gpuops.io/uncordon-on-
        release: "true"` (read back as `NodeView.quarantined_by` / `uncordon_on_release`).

        The engine may cordon before recording the step (docs/decisions.md D14): the
        annotations are the node's own record that the cordon was ours.
        """
        ...

    async def release(self, node: str, uncordon: bool) -> None:
        """Remove our taint and annotations (quarantined-by, uncordon-on-release,
        do-not-disrupt, agent request); uncordon if asked."""
        ...

    async def protect_from_consolidation(self, node: str, on: bool) -> None:
        """Set or remove `karpenter.sh/do-not-disrupt: "true"` on the Node."""
        ...

    async def evict(self, node: str, force: bool, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        """Move the pods `plan` selects: evict (Eviction API), leave a pod that may still
        complete, or delete one whose wait is over; `force` deletes them all. Report."""
        ...

    async def run_executor(
        self,
        node: str,
        remediation: str,
        action: Action,
        attempt: int,
        executor: ActionExecutor,
    ) -> None:
        """Start the GPUReset/Reboot executor for this attempt (idempotent by name)."""
        ...

    async def restart_node_pods(
        self, node: str, targets: Sequence[RestartTarget], created_before: datetime
    ) -> None:
        """Delete (plain DELETE, not eviction) each pod on `node` that one of `targets`
        selects, was created before `created_before` and is not terminating already. A pod
        created at or after `created_before` is left alone, so a repeat deletes nothing new.
        Raises NotFound if the node is gone."""
        ...

    async def replace(self, node: str, provider: ReplaceProvider) -> None:
        """Karpenter: delete the NodeClaim; DeleteNode: delete the Node; Manual: label it.
        `Refused` when the provider cannot replace this node (as `replacement_status`)."""
        ...


class RecordPort(Protocol):
    """The durable record: Remediation objects, the policy's status, and Events."""

    async def list_remediations(self, policy: str) -> Sequence[RemediationRecord]:
        """Every Remediation (active and retained terminal ones) of this policy."""
        ...

    async def get_remediation(self, name: str) -> RemediationRecord:
        """One Remediation by name; raises NotFound."""
        ...

    async def create_remediation(self, state: RemediationState) -> RemediationRecord:
        """Create the object (spec from state.node/state.policy) with `state` as status.

        Raises Conflict if an object of that name exists already.
        """
        ...

    async def update_remediation(
        self, state: RemediationState, resource_version: str
    ) -> RemediationRecord:
        """Write the status, precondition on `resource_version`; Conflict if stale."""
        ...

    async def read_policy_state(self, policy: str) -> PolicyState:
        """Breaker states and the last summary from the policy's status (empty if none)."""
        ...

    async def write_policy_state(
        self, policy: str, generation: int, state: PolicyState, now: datetime
    ) -> None:
        """Write counts, headroom, breakers and the CircuitOpen/Paused conditions.

        `generation` becomes status.observedGeneration. The Accepted condition and
        lastAcceptedSpec are the runtime's and must be left as they are.
        """
        ...

    async def emit(self, explanation: Explanation) -> None:
        """Post (or count a repeat of) the Events this explanation stands for."""
        ...


class Recorder(Protocol):
    """Logs and metrics for what the engine decided and did (synchronous, never raises)."""

    def announced(self, explanation: Explanation) -> None:
        """Every Announce: a log line and `decisions_total{reason}`."""
        ...

    def step(self, transition: StepTransition) -> None:
        """`steps_started_total` or `steps_finished_total{outcome}` and `step_duration_seconds`."""
        ...

    def applied(self, policy: str, effect: str, node: str, result: str) -> None:
        """An effect was carried out (`result`: ok, node_gone, failed, skipped_dry_run, refused)."""
        ...

    def summarised(self, policy: str, state: PolicyState, blocked: Mapping[Reason, int]) -> None:
        """The policy's gauges: budget headroom, circuit open, blocked by reason."""
        ...


@dataclass(frozen=True)
class Ports:
    """Everything `engine.reconciler.reconcile` talks to."""

    cluster: ClusterPort
    records: RecordPort
    recorder: Recorder
