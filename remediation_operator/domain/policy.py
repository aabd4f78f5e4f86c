"""A RemediationPolicy as plain, validated, immutable values.

The API layer parses and validates YAML into these; the planner only ever sees these. Nothing
here knows about Kubernetes objects, so the same values drive the operator and the simulator.
Defaults live here once; the pydantic models and docs/policy.md take them from these constants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from remediation_operator.domain.selectors import LabelSelector


class Action(StrEnum):
    """The ladder's rungs, cheapest first."""

    Cordon = "Cordon"
    Drain = "Drain"
    GPUReset = "GPUReset"
    Reboot = "Reboot"
    Replace = "Replace"
    Validate = "Validate"
    """Not a rung: the active check the policy's `validation` runs after an in-place repair
    (GPUReset, Reboot) before the node may return to service (docs/decisions.md D37)."""
    Diagnose = "Diagnose"
    """Not a rung: the collection of diagnostics the policy's `diagnostics` runs before a
    destructive step (Reboot, Replace) (docs/decisions.md D39)."""
    RestartPods = "RestartPods"
    """Not a rung: the restart of the pods that hold stale state on the node (the health
    agent's, the device plugin's), after an in-place repair and before its validation
    (`validation.restartPods`, docs/decisions.md D71)."""


LADDER_ORDER: tuple[Action, ...] = (
    Action.Cordon,
    Action.Drain,
    Action.GPUReset,
    Action.Reboot,
    Action.Replace,
)
"""A ladder may skip rungs but never goes down: each step's action comes later here."""

DISRUPTIVE: frozenset[Action] = frozenset(
    {Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace}
)
"""Steps that take work away from a node; budgets, rate limit and evidence rules apply."""


class Mode(StrEnum):
    Enforce = "Enforce"
    DryRun = "DryRun"


class OnTimeout(StrEnum):
    """What a step's timeout leads to. Force is meaningful for Drain only (delete the pods)."""

    Escalate = "Escalate"
    Force = "Force"


class OnExhausted(StrEnum):
    """What happens when the last step of a ladder has run and the fault is still there."""

    Hold = "Hold"
    """Keep the node quarantined and wait for the fault to clear (then recover as usual)."""
    Fail = "Fail"
    """End the Remediation as Failed and leave the node cordoned for a human."""


class Executor(StrEnum):
    Job = "Job"
    NodeAgent = "NodeAgent"
    Noop = "Noop"


class WhenMissing(StrEnum):
    """What a match with `staleAfter` makes of a node on which its condition was never reported."""

    Ignore = "Ignore"
    """A source that never reported is not a stale source: no fault (the default)."""
    Fault = "Fault"
    """The node is expected to carry this condition: its absence is weak evidence (cordon only)."""


class OnPDBBlocked(StrEnum):
    """What a Drain past its timeout does while a PodDisruptionBudget still refuses evictions."""

    Wait = "Wait"
    """Keep the node drained-so-far and retry evictions until the PDB allows them (the default,
    as kubectl drain, Cluster API and Karpenter do)."""
    Escalate = "Escalate"
    """Go on to the next step with the protected pods still on the node (named in status/Event)."""


class PodHandling(StrEnum):
    """How a Drain treats the pods a `drain.pods` rule selects."""

    Evict = "Evict"
    """Evict at once through the Eviction API (PodDisruptionBudgets honoured): the default."""
    AllowCompletion = "AllowCompletion"
    """Pods of Jobs and bare pods may finish first: not evicted until `waitFor` has passed
    since the drain began, then evicted. Pods of other controllers are evicted at once."""
    DeleteAfterTimeout = "DeleteAfterTimeout"
    """Wait `waitFor` for the pods to finish, then delete them (no PodDisruptionBudget check)."""


class ReplaceProvider(StrEnum):
    Karpenter = "Karpenter"
    DeleteNode = "DeleteNode"
    Manual = "Manual"


DEFAULT_TOLERATE = timedelta(0)
DEFAULT_RETRIES = 3
DEFAULT_HEALTHY_FOR = timedelta(minutes=10)
DEFAULT_STARTUP_GRACE = timedelta(minutes=5)
DEFAULT_HISTORY_WINDOW = timedelta(hours=168)
DEFAULT_HISTORY_MAX_EPISODES = 3
DEFAULT_CIRCUIT_MIN_NODES = 5
DEFAULT_CIRCUIT_COOLDOWN = timedelta(minutes=15)
DEFAULT_POD_WAIT = timedelta(hours=1)
DEFAULT_VALIDATION_LEVEL = 2
"""`dcgmi diag -r 2`: the medium run (a few minutes), NVIDIA's suggestion after a repair."""
DEFAULT_VALIDATION_TIMEOUT = timedelta(minutes=30)
DEFAULT_DIAGNOSTICS_TIMEOUT = timedelta(minutes=10)
DIAGNOSTICS_LOCATION_ENV = "REMEDIATION_DIAGNOSTICS_LOCATION"
"""Where a diagnostics Job writes: `<destination>/<remediation>/diagnose-<n>`."""
DIAGNOSTICS_DIR_ENV = "REMEDIATION_DIAGNOSTICS_DIR"
"""With a `pvc://` destination: the directory of the mounted claim to write into."""
DIAGNOSTICS_MOUNT = "/diagnostics"
PVC_SCHEME = "pvc://"
EXPECTED_BOOT_ID_ENV = "REMEDIATION_EXPECTED_BOOT_ID"
"""A Reboot Job's containers get the node's bootID at the step's start in this variable: the
node program reboots only while the node still has it (`remediation-operator node reboot`)."""
VALIDATION_ENV = "REMEDIATION_DIAG_LEVEL"
"""The environment variable a validation Job's containers get the policy's `level` in."""


@dataclass(frozen=True)
class ConditionMatch:
    """One way a Node condition can signal a fault. All given fields must match.

    `reason` is a regular expression matched against the whole reason. `stale_after` makes a
    condition whose `lastHeartbeatTime` is older than that a fault on its own (fail closed:
    such evidence may cordon, never disrupt).
    """

    type: str
    status: str | None = None
    reason: str | None = None
    stale_after: timedelta | None = None
    when_missing: WhenMissing = WhenMissing.Ignore
    message: str | None = None
    """A regular expression found anywhere in the condition's message (D62): a sticky source
    keeps only the newest finding in the reason and appends every finding to the message."""
    """Only with `stale_after`: whether a node that never carried the condition shows the fault."""
    except_reason: str | None = None
    """RE2 pattern: a condition whose whole reason matches it does not match this rule (the
    readable way to write "every reason but these")."""
    positive_after: timedelta | None = None
    """Only for the control plane's `Ready=Unknown`: held this long on our clock, the status is
    positive evidence that the host is gone (before that, Unknown is weak: cordon only)."""


@dataclass(frozen=True)
class Step:
    action: Action
    timeout: timedelta | None = None
    """How long the step may take before it counts as a permanent failure. None: no limit."""
    escalate_after: timedelta = timedelta(0)
    """After the step succeeded, how long the fault may persist before the next step."""
    retries: int = DEFAULT_RETRIES
    """How many transient failures are retried (with backoff, within timeout)."""
    on_timeout: OnTimeout = OnTimeout.Escalate
    on_pdb_blocked: OnPDBBlocked = OnPDBBlocked.Wait
    """Drain only: what the timeout leads to while a PodDisruptionBudget blocks an eviction."""


@dataclass(frozen=True)
class Fault:
    """A named failure type: how it is recognised, how long it is tolerated, what is done."""

    name: str
    match: tuple[ConditionMatch, ...]
    ladder: tuple[Step, ...]
    tolerate: timedelta = DEFAULT_TOLERATE
    on_exhausted: OnExhausted = OnExhausted.Hold


@dataclass(frozen=True)
class Recovery:
    healthy_for: timedelta = DEFAULT_HEALTHY_FOR


@dataclass(frozen=True)
class History:
    """Repeat offenders: `max_episodes` incidents within `window` send the next one to `then`."""

    window: timedelta = DEFAULT_HISTORY_WINDOW
    max_episodes: int = DEFAULT_HISTORY_MAX_EPISODES
    then: Action = Action.Replace


@dataclass(frozen=True)
class Budget:
    """At most `nodes` (an integer or a percentage, rounded up) in the listed actions at once.

    `nodes` is kept as written so that an invalid value can fail closed (allow zero) and be
    reported, as Karpenter does. With `schedule` (cron, UTC) and `duration` the budget is active
    only in the windows the schedule opens.
    """

    nodes: str
    actions: frozenset[Action] = DISRUPTIVE
    schedule: str | None = None
    duration: timedelta | None = None


@dataclass(frozen=True)
class Rate:
    """At most `max` new disruptive steps started per sliding window `per`."""

    max: int
    per: timedelta


@dataclass(frozen=True)
class CircuitBreaker:
    """No new remediation while more than `max_unhealthy` of a group shows a fault at once."""

    max_unhealthy: str
    min_nodes: int = DEFAULT_CIRCUIT_MIN_NODES
    cooldown: timedelta = DEFAULT_CIRCUIT_COOLDOWN
    group_by: str | None = None


@dataclass(frozen=True)
class ActionExecutor:
    """How GPUReset or Reboot is carried out. `job_template` is a batch/v1 Job spec template."""

    executor: Executor = Executor.Job
    job_template: Mapping[str, Any] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables set in every container of the Job (the validation's level)."""
    claim: str | None = None
    """A PersistentVolumeClaim (in the Jobs' namespace) mounted at DIAGNOSTICS_MOUNT."""


@dataclass(frozen=True)
class Actions:
    gpu_reset: ActionExecutor = field(default_factory=ActionExecutor)
    reboot: ActionExecutor = field(default_factory=ActionExecutor)
    replace: ReplaceProvider = ReplaceProvider.Karpenter


@dataclass(frozen=True)
class PodRule:
    """Pods in `namespaces` (empty: any) whose labels match `selector` get `handling`."""

    handling: PodHandling
    namespaces: frozenset[str] = frozenset()
    selector: LabelSelector = field(default_factory=LabelSelector)
    wait_for: timedelta = DEFAULT_POD_WAIT

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        in_namespace = not self.namespaces or namespace in self.namespaces
        return in_namespace and self.selector.matches(labels)


@dataclass(frozen=True)
class DrainOptions:
    """How the Drain step treats workloads: per-pod rules (first match wins; no match: Evict),
    and whether a drain followed by a GPU reset evicts only the pods that use GPUs."""

    pods: tuple[PodRule, ...] = ()
    gpu_pods_only_before_reset: bool = False


@dataclass(frozen=True)
class RestartTarget:
    """Pods on the node that hold stale state about its GPUs (a sticky health agent, the
    device plugin's unhealthy marks): those in `namespace` whose labels match `selector`."""

    namespace: str
    selector: LabelSelector

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return namespace == self.namespace and self.selector.matches(labels)

    def describe(self) -> str:
        """`namespace/key=value,...` as a person would write it for kubectl."""
        terms = [f"{k}={v}" for k, v in sorted(self.selector.match_labels.items())]
        terms += [f"{r.key} {r.operator} {list(r.values)}" for r in self.selector.match_expressions]
        return f"{self.namespace}/{','.join(terms)}"


@dataclass(frozen=True)
class Validation:
    """An active check after an in-place repair, before the node returns to service.

    After a GPUReset or Reboot (those in `after`) succeeds, the pods of `restart_pods` on the
    node are restarted and must be back (D71), then a Job pinned to the node runs
    (`executor`; by default DCGM diagnostics at `level` with nvidia-smi checks). Pass:
    probation, then release. Fail or timeout: positive evidence, the ladder climbs at once.
    """

    after: frozenset[Action] = frozenset({Action.GPUReset, Action.Reboot})
    level: int = DEFAULT_VALIDATION_LEVEL
    timeout: timedelta = DEFAULT_VALIDATION_TIMEOUT
    executor: ActionExecutor = field(default_factory=ActionExecutor)
    restart_pods: tuple[RestartTarget, ...] = ()


@dataclass(frozen=True)
class Diagnostics:
    """Diagnostics captured before a destructive step: a Job pinned to the node collects what
    support and RMA cases need and writes it to `destination` (`pvc://<claim>[/<dir>]`, a
    claim mounted into the Job, or any address the Job's own image uploads to). It has its own
    `timeout` and never holds the step past it; a failure is recorded, not fatal."""

    destination: str
    before: frozenset[Action] = frozenset({Action.Reboot, Action.Replace})
    timeout: timedelta = DEFAULT_DIAGNOSTICS_TIMEOUT
    executor: ActionExecutor = field(default_factory=ActionExecutor)

    def location(self, remediation: str, attempt: int) -> str:
        """Where run `attempt` of the incident `remediation` writes (recorded in status)."""
        return f"{self.destination.rstrip('/')}/{remediation}/diagnose-{attempt}"

    def job(self, remediation: str, attempt: int) -> ActionExecutor:
        """The executor of one run: the location in its environment, the claim mounted."""
        env = {DIAGNOSTICS_LOCATION_ENV: self.location(remediation, attempt)}
        claim = None
        if self.destination.startswith(PVC_SCHEME):
            claim, _, sub = self.destination[len(PVC_SCHEME) :].partition("/")
            parts = [DIAGNOSTICS_MOUNT, *[p for p in sub.split("/") if p]]
            env[DIAGNOSTICS_DIR_ENV] = "/".join([*parts, remediation, f"diagnose-{attempt}"])
        return ActionExecutor(self.executor.executor, self.executor.job_template, env, claim)


IN_PLACE_REPAIRS: frozenset[Action] = frozenset({Action.GPUReset, Action.Reboot})
"""The repairs that keep the node, and so may be followed by a validation."""


@dataclass(frozen=True)
class Policy:
    name: str
    faults: tuple[Fault, ...]
    """Ordered by severity: a node matching several faults takes the first one listed."""
    generation: int = 1
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    mode: Mode = Mode.Enforce
    paused: bool = False
    pause_requests: tuple[str, ...] = ()
    recovery: Recovery = field(default_factory=Recovery)
    history: History | None = None
    budgets: tuple[Budget, ...] = ()
    rate: Rate | None = None
    circuit_breaker: CircuitBreaker | None = None
    require_approval: frozenset[Action] = frozenset()
    actions: Actions = field(default_factory=Actions)
    drain: DrainOptions = field(default_factory=DrainOptions)
    diagnostics: Diagnostics | None = None
    """None: no diagnostics are collected before Reboot or Replace."""
    validation: Validation | None = None
    """None: a repaired node returns after passive probation only (`recovery.healthyFor`)."""
    startup_grace: timedelta = DEFAULT_STARTUP_GRACE
    """A node younger than this is not remediated: GPU software takes minutes to come up."""
    weight: int = 0
    """Overlap: among policies selecting one node, the highest weight owns it (ties: older
    `created_at`, then name); an active Remediation keeps its node with its policy."""
    created_at: datetime | None = None
    """The RemediationPolicy's creationTimestamp (ownership tie-break)."""
    deleted: bool = False
    """The RemediationPolicy object is gone: its open incidents are closed `PolicyDeleted` and
    their nodes given back; nothing new is detected (docs/decisions.md, D13)."""

    @property
    def is_paused(self) -> bool:
        return self.paused or bool(self.pause_requests)
