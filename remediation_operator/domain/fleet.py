"""What the planner sees of the world: a snapshot of nodes, incidents and step progress.

The engine builds a snapshot from the cluster (or the simulator from its model); the planner
reads nothing else. Only facts the planner needs are here, already reduced to plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from remediation_operator.domain.policy import Action
from remediation_operator.domain.remediation import RemediationState

EXCLUDE_KEY = "remediation.gpuops.io/exclude"
"""`remediation.gpuops.io/exclude=true` on a Node, as a label or as an annotation, keeps the
operator away from it (issue 12, defect 14: both are honoured)."""
EXCLUDE_LABEL = EXCLUDE_KEY


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_heartbeat_time: datetime | None = None
    last_transition_time: datetime | None = None
    observed_at: datetime | None = None
    """On OUR clock: when the operator last saw this condition's heartbeat, status or reason
    change (or first saw the condition). Staleness and freshness are measured from this, never
    by comparing the remote `last_heartbeat_time` with our clock (docs/decisions.md)."""


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    unschedulable: bool = False
    """spec.unschedulable, whoever set it."""
    quarantined: bool = False
    """The node carries our `remediation.gpuops.io/quarantine:NoSchedule` taint."""
    quarantined_by: str = ""
    """The policy our cordon wrote in `remediation.gpuops.io/quarantined-by` ("" if none)."""
    uncordon_on_release: bool = False
    """Our cordon flipped spec.unschedulable (annotation `remediation.gpuops.io/uncordon-on-
    release`): the node itself proves the cordon was ours, before any Remediation records it."""
    boot_id: str = ""
    created_at: datetime | None = None
    excluded_by_annotation: bool = False
    """The node carries the annotation `remediation.gpuops.io/exclude=true`."""
    gpu_capacity: int | None = None
    """status.capacity["nvidia.com/gpu"]: the GPUs the device plugin registered (None: absent
    or not a whole number)."""
    gpu_allocatable: int | None = None
    """status.allocatable["nvidia.com/gpu"]: the GPUs the device plugin advertises healthy. A
    critical XID marks a GPU unhealthy for the life of the plugin process (NVIDIA/k8s-device-
    plugin, internal/rm/health.go), so after a reset or reboot that fixed it this stays below
    the capacity until the plugin's pod restarts (docs/decisions.md D68)."""

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def gpus_short(self) -> bool:
        """The node advertises fewer GPUs than it has: the capacity is known and positive and
        the allocatable count (absent: none) is below it. A node with no GPU capacity known is
        never short (a CPU node, or a view built without the counts)."""
        capacity = self.gpu_capacity
        if capacity is None or capacity <= 0:
            return False
        return (self.gpu_allocatable or 0) < capacity

    @property
    def ready(self) -> bool:
        ready = self.condition("Ready")
        return ready is not None and ready.status == "True"

    @property
    def excluded(self) -> bool:
        """The node opted out: `remediation.gpuops.io/exclude=true` as a label or annotation."""
        return self.excluded_by_annotation or self.labels.get(EXCLUDE_KEY) == "true"

    @property
    def exclusion(self) -> str:
        """How the node opted out, for messages ("" when it did not)."""
        if self.labels.get(EXCLUDE_KEY) == "true":
            return f"the node is labelled {EXCLUDE_KEY}=true"
        if self.excluded_by_annotation:
            return f"the node is annotated {EXCLUDE_KEY}=true"
        return ""


class Progress(StrEnum):
    """How far the current step's executor got, as the engine observed it."""

    Absent = "Absent"
    """Nothing started yet (no Job, no request annotation, no eviction issued)."""
    InProgress = "InProgress"
    Succeeded = "Succeeded"
    Failed = "Failed"


@dataclass(frozen=True)
class NodePod:
    """A pod on the node that a `validation.restartPods` entry selects, as the API shows it:
    `target` is the entry's index; `created_at` its creationTimestamp; `ready` Running with
    condition Ready=True; `deleting` a deletionTimestamp is set (it is terminating)."""

    target: int
    namespace: str
    name: str
    created_at: datetime
    ready: bool
    deleting: bool = False


@dataclass(frozen=True)
class StepObservation:
    """What the engine learned about the current step that the NodeView does not show.

    Drain: Succeeded when no evictable pod remains, else InProgress (`blocked_by_pdb` when an
    eviction was refused with 429). GPUReset/Reboot: the executor's Job or agent acknowledgement
    (Reboot's success is still confirmed by bootID and Ready on the NodeView). Replace:
    Succeeded when the NodeClaim (or Node) is gone.
    """

    action: Action
    attempt: int
    progress: Progress
    message: str = ""
    blocked_by_pdb: bool = False
    pdbs: tuple[str, ...] = ()
    """Drain: the PodDisruptionBudgets (`namespace/name`) that refused the last evictions."""
    blocked_pods: tuple[str, ...] = ()
    """Drain: the pods (`namespace/name`) whose eviction a PodDisruptionBudget refused."""
    permanent: bool = False
    """With Failed: the failure cannot be retried (escalate at once)."""
    evicting: bool = False
    """Reboot: its executor waits while the pods a GPU-only drain left are evicted under the
    full drain rules (`message` names them; `blocked_by_pdb`, `pdbs`, `blocked_pods` as for
    a Drain)."""
    not_run: bool = False
    """Executors, with Failed: the check could not run at all (no template, refused by
    admission): no verdict on the node."""
    started: bool = True
    """Executors: whether a pod of the Job has run yet (False: none created, Pending,
    suspended); a validation timing out unstarted gave no verdict."""
    holding: tuple[str, ...] = ()
    """RestartPods: the old pods (created before the restart) still on the node, as the step
    records them (`StepRecord.restarted`)."""


@dataclass(frozen=True)
class BreakerState:
    """The circuit breaker of one group, persisted in the policy's status between plans."""

    open: bool = False
    opened_at: datetime | None = None
    healthy_since: datetime | None = None
    """When the group's unhealthy fraction last dropped to the threshold or below (cooldown)."""


@dataclass(frozen=True)
class Snapshot:
    nodes: Mapping[str, NodeView]
    """Every node the policy selects, by name (others never count toward budgets)."""
    active: Mapping[str, RemediationState] = field(default_factory=dict)
    """Non-terminal Remediations of this policy, by node name (at most one per node)."""
    finished: tuple[RemediationState, ...] = ()
    """Terminal Remediations still retained: the history and the rate limit's memory."""
    observations: Mapping[str, StepObservation] = field(default_factory=dict)
    """By node name, for the current step of an active Remediation."""
    approvals: Mapping[str, frozenset[Action]] = field(default_factory=dict)
    """By node name: actions approved on its active Remediation (annotation)."""
    breakers: Mapping[str, BreakerState] = field(default_factory=dict)
    """By group value (the `groupBy` label's value, or "" when ungrouped)."""
    not_ready_elsewhere: frozenset[str] = frozenset()
    """Selected nodes that are NotReady without a Remediation of ours: they count toward budgets."""
    focus: frozenset[str] | None = None
    """Plan only these nodes (the others still count for budgets and breaker); None: all."""
    foreign: Mapping[str, str] = field(default_factory=dict)
    unselected: Mapping[str, NodeView] = field(default_factory=dict)
    """Nodes with an active incident of this policy that still exist but that the policy's
    nodeSelector no longer selects (relabelled): their incidents close NodeUnselected."""
    """By node name: the other policy that owns a node this policy also selects (it has an
    active Remediation there, or wins on weight, then age, then name). This policy opens no
    incident on such a node and reports the overlap in its status."""
    waiting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """By node name, for nodes this policy holds an open incident on: the faults of other
    policies that the node shows now (`<policy>/<fault>`), waiting for this incident to end
    (one active incident per node, D61). Shown in the incident's status."""
