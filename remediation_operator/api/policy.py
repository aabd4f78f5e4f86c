"""The RemediationPolicy resource as pydantic models: its spec as users write it, and its status.

These models are the source of truth for the CRD schema and for docs/policy.md (both generated
from them). Defaults come from `domain.policy`'s DEFAULT_* constants, written as users would
write them, so the documentation, the validation and the planner cannot disagree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema

from remediation_operator.api.field_types import (
    MAX_NODE_COUNT,
    CountOrPercent,
    CronSchedule,
    Destination,
    DnsLabel,
    Duration,
    JobTemplate,
    PositiveDuration,
    Regex,
    Timestamp,
)
from remediation_operator.api.model_base import SpecModel, StatusModel
from remediation_operator.domain import durations
from remediation_operator.domain import policy as domain
from remediation_operator.domain.policy import (
    Action,
    Executor,
    Mode,
    OnExhausted,
    OnPDBBlocked,
    OnTimeout,
    PodHandling,
    ReplaceProvider,
    WhenMissing,
)
from remediation_operator.domain.selectors import Operator

# --- bounds ---------------------------------------------------------------------------------
# Every count, string and list has an upper bound: a policy is configuration written by a
# person, and a value far beyond these is a mistake (or an attack on the operator's CPU and
# memory) that is better refused with its field path. The API server enforces the same bounds
# (they are in the CRD schema), and they keep the cost of the CRD's CEL rules within the
# server's budget. Durations are bounded by `field_types.MAX_DURATION` (8760h).

MAX_FAULTS = 32
MAX_MATCHES = 16
MAX_BUDGETS = 16
MAX_SELECTOR_TERMS = 32
MAX_LABEL_VALUES = 64
MAX_PAUSE_REQUESTS = 32
MAX_RETRIES = 100
MAX_EPISODES = 1000
MAX_RATE = 10_000
MAX_POD_RULES = 32
MAX_RESTART_PODS = 8
MAX_WEIGHT = 100
MAX_OVERLAPPED_BY = 10
"""How many owning policies `status.overlappedBy` lists (the count is `overlappedNodes`)."""
"""As Karpenter's NodePool `weight` (1-100); 0, the default, is the lowest."""
LABEL_KEY_LENGTH = 317
"""A qualified label key: a DNS subdomain prefix (253) + `/` + a name (63)."""
LABEL_VALUE_LENGTH = 63
CONDITION_TYPE_LENGTH = 316
"""As metav1.Condition's `type`."""
NAME_LENGTH = 253

_RANK = "{" + ", ".join(f"'{a}': {i}" for i, a in enumerate(domain.LADDER_ORDER)) + "}"
"""The ladder order as a CEL map literal (a list literal's `indexOf` makes the API server
estimate the rule's cost as unbounded and refuse the CRD)."""


def _on_ladder(action: Action) -> Action:
    if action not in domain.LADDER_ORDER:
        raise ValueError(
            f"{action} is not a ladder step (one of {', '.join(domain.LADDER_ORDER)});"
            " validation after a repair is configured in spec.validation"
        )
    return action


LadderAction = Annotated[
    Action,
    AfterValidator(_on_ladder),
    WithJsonSchema(
        {
            "description": "The ladder's rungs, cheapest first.",
            "type": "string",
            "enum": [a.value for a in domain.LADDER_ORDER],
        }
    ),
]
"""A rung of the ladder: every Action but Validate, which follows a repair (spec.validation)."""


def _one_of(allowed: tuple[Action, ...], why: str) -> Any:
    """An Action field that accepts only `allowed` (its CRD enum says the same)."""

    def check(action: Action) -> Action:
        if action not in allowed:
            raise ValueError(f"{action}: {why}")
        return action

    return (
        AfterValidator(check),
        WithJsonSchema({"type": "string", "enum": [a.value for a in allowed]}),
    )


RepairAction = Annotated[
    Action,
    *_one_of(
        (Action.GPUReset, Action.Reboot),
        "only the in-place repairs GPUReset and Reboot are validated (Replace brings a new"
        " node; Cordon and Drain repair nothing)",
    ),
]
"""The repairs a validation may follow."""

DestructiveAction = Annotated[
    Action,
    *_one_of(
        (Action.Reboot, Action.Replace),
        "diagnostics are collected before Reboot or Replace only (the steps that lose the"
        " node's state)",
    ),
]
"""The steps diagnostics may precede."""

LabelKey = Annotated[str, Field(min_length=1, max_length=LABEL_KEY_LENGTH)]
LabelValue = Annotated[str, Field(max_length=LABEL_VALUE_LENGTH)]


def _rules(*rules: dict[str, str]) -> ConfigDict:
    """A model's CEL rules (`x-kubernetes-validations`): what the API server checks on apply.

    Each repeats one rule of `policy_rules` (which also runs in check-policy and the operator,
    with the same field path where CEL's `fieldPath` can say it)."""
    extra: dict[str, Any] = {"x-kubernetes-validations": list(rules)}
    return ConfigDict(json_schema_extra=extra)


# --- nodeSelector ---------------------------------------------------------------------------


class LabelSelectorRequirement(SpecModel):
    """One requirement on a label, as in every Kubernetes label selector."""

    model_config = _rules(
        {
            "rule": "!(self.operator in ['In', 'NotIn'])"
            " || (has(self.values) && size(self.values) > 0)",
            "message": "is required with operator In or NotIn",
            "fieldPath": ".values",
        },
        {
            "rule": "self.operator in ['In', 'NotIn']"
            " || !has(self.values) || size(self.values) == 0",
            "message": "must be empty with operator Exists or DoesNotExist",
            "fieldPath": ".values",
        },
    )

    key: LabelKey
    """The label key the requirement applies to."""
    operator: Operator
    """In and NotIn need `values`; Exists and DoesNotExist must have none."""
    values: list[LabelValue] = Field(default=[], max_length=MAX_LABEL_VALUES)
    """The label values for In and NotIn."""


class LabelSelector(SpecModel):
    """Standard Kubernetes label selector; an empty selector selects every node."""

    match_labels: dict[LabelKey, LabelValue] = Field(default={}, max_length=MAX_SELECTOR_TERMS)
    """Labels a node must carry with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] = Field(
        default=[], max_length=MAX_SELECTOR_TERMS
    )
    """Further requirements; all must hold."""


# --- faults ---------------------------------------------------------------------------------


class ConditionMatch(SpecModel):
    """One way a Node condition signals the fault: the condition `type`, and at least one of
    `status`, `reason`, `message` or `staleAfter`. `status`, `reason` and `message` given
    together must all match;
    `staleAfter` is a separate, weak signal of its own."""

    model_config = _rules(
        {
            "rule": "has(self.status) || has(self.reason) || has(self.message) ||"
            " has(self.staleAfter)",
            "message": "names only `type`, which never matches a node: add `status`, `reason`,"
            " `message` or `staleAfter`",
        },
        {
            "rule": "!has(self.whenMissing) || has(self.staleAfter)",
            "message": "applies only with `staleAfter` (a rule without it never fires on a"
            " missing condition): add `staleAfter` or remove `whenMissing`",
            "fieldPath": ".whenMissing",
        },
        {
            "rule": "!has(self.exceptReason) || has(self.status) || has(self.reason)",
            "message": "narrows a `status` or `reason` match: add `status` (or `reason`)",
            "fieldPath": ".exceptReason",
        },
        {
            "rule": "!has(self.positiveAfter) || (self.type == 'Ready'"
            " && has(self.status) && self.status == 'Unknown')",
            "message": "applies only to `type: Ready` with `status: Unknown` (the control"
            " plane's verdict that the kubelet stopped posting); an agent's Unknown says only"
            " that the agent does not know",
            "fieldPath": ".positiveAfter",
        },
    )

    type: str = Field(min_length=1, max_length=CONDITION_TYPE_LENGTH)
    """The Node condition type, e.g. `AcceleratedHardwareReady` or `GPUProblem`."""
    status: Literal["True", "False", "Unknown"] | None = None
    """The condition status that means a fault. Absent: the condition's status does not
    matter, and `reason` alone decides (a match needs `status`, `reason` or `staleAfter`)."""
    reason: Regex | None = None
    """RE2 regular expression that must match the condition's whole reason, e.g.
    `NvidiaXID(48|79)Error`. RE2 matches in linear time and has no backreferences or
    lookarounds; a pattern it cannot compile is refused. Absent: any reason (with `status`)."""
    message: Regex | None = None
    """RE2 regular expression found anywhere in the condition's message, e.g.
    `detected XID-48 on`. The EKS node monitoring agent keeps only the newest finding in the
    reason and appends every finding to the message ("; "), so two findings in one report
    leave the earlier one in the message only. Given with `reason`, both must match."""
    stale_after: Duration | None = None
    """The condition is a fault by itself when its heartbeat has not changed for this long, as
    measured on the operator's own clock from when it saw the heartbeat change (a remote
    timestamp is never compared with our clock). Fail closed: such evidence may cordon, never
    disrupt. Whether a node that never reported the condition is faulty: `whenMissing`."""
    when_missing: WhenMissing | None = None
    """Only with `staleAfter`: what a node on which this condition was never reported shows.
    Ignore (the default): nothing; a source that never reported is not a stale source, so
    nodes whose agent does not publish this condition are left alone. Fault: the node is
    expected to carry the condition, and its absence is weak evidence (cordon, never
    disrupt)."""
    except_reason: Regex | None = None
    """RE2 regular expression: a condition whose whole reason matches it does not match this
    rule, e.g. every `AcceleratedHardwareReady=False` but the no-action XIDs:
    `{status: "False", exceptReason: "NvidiaXID(13|31|43|63|92|94)Error"}`. Only with `status`
    or `reason`."""
    positive_after: Duration | None = None
    """Only with `type: Ready` and `status: Unknown`: how long the control plane's verdict that
    the kubelet stopped posting must hold (on the operator's clock, from when it saw the status
    turn Unknown) before it counts as positive evidence that the host is gone, enough for any
    step (a Replace of an unreachable host). Before that, and without this field, Unknown is
    weak evidence: cordon, never disrupt. EKS node repair and Karpenter replace a node NotReady
    for 30 minutes; a partition that takes many nodes at once is held by the circuit
    breaker."""


class LadderStep(SpecModel):
    """One rung of the ladder and its timings."""

    model_config = _rules(
        {
            "rule": "!has(self.onTimeout) || self.onTimeout != 'Force' || self.action == 'Drain'",
            "message": "Force applies only to Drain (it deletes pods that could not be evicted)",
            "fieldPath": ".onTimeout",
        },
        {
            "rule": "!has(self.onTimeout) || self.onTimeout != 'Force' || has(self.timeout)",
            "message": "is required with onTimeout: Force (Force happens when the timeout"
            " runs out)",
            "fieldPath": ".timeout",
        },
        {
            "rule": "!has(self.onPDBBlocked) || self.action == 'Drain'",
            "message": "applies only to Drain (the only step a PodDisruptionBudget can block)",
            "fieldPath": ".onPDBBlocked",
        },
    )

    action: LadderAction
    """What to do. Steps go in the order Cordon, Drain, GPUReset, Reboot, Replace; rungs may be
    skipped but not repeated or reversed."""
    timeout: Duration | None = None
    """How long the step may take before it counts as a permanent failure. Absent: no limit."""
    escalate_after: Duration = durations.format(domain.Step(Action.Cordon).escalate_after)
    """After the step succeeded, how long the fault may persist before the next step starts."""
    retries: int = Field(default=domain.DEFAULT_RETRIES, ge=0, le=MAX_RETRIES)
    """How many transient failures are retried, with backoff, within the timeout."""
    on_timeout: OnTimeout = OnTimeout.Escalate
    """What a timeout leads to: Escalate to the next step, or Force (Drain only: delete the pods
    that could not be evicted). Force needs a `timeout`."""
    on_pdb_blocked: OnPDBBlocked | None = Field(default=None, alias="onPDBBlocked")
    """Drain only: what the drain does while a PodDisruptionBudget refuses an eviction. Wait
    (the default, as kubectl drain, Cluster API and Karpenter do): the drain stays, also past
    its timeout, in phase Blocked with reason DrainBlockedByPDB (status names the PDB and the
    pods), retries evictions every 5 s until the PDB allows them, and repeats its Warning Event
    every 10 minutes of the block; nothing else on the ladder runs with the protected pod still
    on the node. Escalate: at the timeout, go on to the next step
    with the protected pods still on the node; status and Event name the PDB and the pods.
    `onTimeout: Force` deletes the pods instead."""


class Fault(SpecModel):
    """A named failure: how it is recognised, how long it is tolerated, which ladder it climbs."""

    model_config = _rules(
        {
            "rule": "self.ladder[size(self.ladder) - 1].action == 'Replace'"
            " || has(self.onExhausted)",
            "message": "is required because the ladder does not end in Replace: say Hold (keep"
            " the node quarantined until the fault clears) or Fail (close the incident and leave"
            " the node cordoned for a human)",
            "fieldPath": ".onExhausted",
        },
    )

    name: DnsLabel
    """Unique name of the fault (a DNS label); shown in `kubectl get remediations`."""
    match: list[ConditionMatch] = Field(min_length=1, max_length=MAX_MATCHES)
    """Node conditions that signal this fault; any one of them is enough."""
    tolerate: Duration = durations.format(domain.DEFAULT_TOLERATE)
    """How long the fault must persist before the first step, counted from its first sighting.
    An absence shorter than `tolerate` is not a clearing: a fault that flaps (present, absent
    for less than this, present again) is one incident, and it closes as gone only once it has
    stayed absent this long."""
    ladder: list[LadderStep] = Field(
        min_length=1,
        max_length=len(domain.LADDER_ORDER),
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(s, self.exists_one(t, t.action == s.action))",
                    "message": "an action appears twice; use `retries` to try a step again",
                },
                {
                    "rule": f"self.map(s, {_RANK}[s.action]).isSorted()",
                    "message": "steps go in the order Cordon, Drain, GPUReset, Reboot, Replace"
                    " (rungs may be skipped, not reversed)",
                },
            ]
        },
    )
    """The steps, in order; the next one starts when the fault outlives the previous one."""
    on_exhausted: OnExhausted | None = None
    """What happens when the last step ran and the fault remains: Hold (keep the node
    quarantined and wait for recovery) or Fail (close as Failed, leave the node cordoned for a
    human). After Fail no new incident opens on the node until the condition clears and comes
    back (transitions again), or the Failed Remediation is deleted; a return within
    `recovery.healthyFor` of the failure is the same fault. A new machine that joins under
    the node's name (another Node creationTimestamp) starts afresh. Required unless the ladder
    ends in Replace."""


# --- fleet-wide settings --------------------------------------------------------------------


class Recovery(SpecModel):
    """How a repaired node returns to service."""

    healthy_for: Duration = durations.format(domain.DEFAULT_HEALTHY_FOR)
    """Probation: the fault must stay absent this long before the node is uncordoned."""


class History(SpecModel):
    """Repeat offenders: a node with many recent incidents skips ahead on the ladder."""

    window: Duration = durations.format(domain.DEFAULT_HISTORY_WINDOW)
    """How far back incidents on the same node are counted."""
    max_episodes: int = Field(default=domain.DEFAULT_HISTORY_MAX_EPISODES, ge=1, le=MAX_EPISODES)
    """This many incidents within the window send the next one straight to `then`. Only
    incidents that reached Drain or a later step in Enforce mode count: cordon-only incidents,
    DryRun incidents and faults that cleared within `tolerate` do not."""
    then: LadderAction = Action.Replace
    """The step a repeat offender's incident starts at (earlier steps still run if required
    to reach it safely, e.g. Cordon)."""


class Budget(SpecModel):
    """At most `nodes` nodes in the listed actions at once; the strictest active budget wins."""

    model_config = _rules(
        {
            "rule": "!has(self.schedule) || has(self.duration)",
            "message": "is required with schedule",
            "fieldPath": ".duration",
        },
        {
            "rule": "!has(self.duration) || has(self.schedule)",
            "message": "is required with duration",
            "fieldPath": ".schedule",
        },
        {
            "rule": "!has(self.schedule) || !has(self.duration)"
            " || duration(self.duration) > duration('0s')",
            "message": "must be longer than 0s: the window would never open",
            "fieldPath": ".duration",
        },
    )

    nodes: CountOrPercent
    """A node count (`3`) or a percentage of the selected nodes (`10%`, rounded up)."""
    actions: list[LadderAction] = Field(
        default=[a for a in domain.LADDER_ORDER if a in domain.DISRUPTIVE],
        min_length=1,
        max_length=len(domain.LADDER_ORDER),
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(a, a != 'Cordon')",
                    "message": "Cordon is not disruptive; budgets limit Drain, GPUReset, Reboot,"
                    " Replace (the circuit breaker limits cordons)",
                }
            ]
        },
    )
    """The actions this budget limits."""
    schedule: CronSchedule | None = None
    """Cron expression (5 fields, UTC) that opens the budget's window; needs `duration`."""
    duration: Duration | None = None
    """How long each window the schedule opens lasts; needs `schedule`."""


class Rate(SpecModel):
    """At most `max` new disruptive steps started per sliding window `per`."""

    max: int = Field(ge=1, le=MAX_RATE)
    """Disruptive steps that may start per window."""
    per: Duration
    """The length of the sliding window."""


class CircuitBreaker(SpecModel):
    """Stop starting remediations while too many nodes look faulty at once (a bad checker)."""

    max_unhealthy: CountOrPercent
    """More nodes of a group than this (a count or a percentage) showing a fault at once opens
    the breaker: no new remediation starts, not even a cordon."""
    min_nodes: int = Field(default=domain.DEFAULT_CIRCUIT_MIN_NODES, ge=0, le=MAX_NODE_COUNT)
    """A group smaller than this may always repair one node, whatever the percentage says."""
    cooldown: Duration = durations.format(domain.DEFAULT_CIRCUIT_COOLDOWN)
    """How long the fraction must stay at or below the threshold before the breaker closes."""
    group_by: str | None = Field(default=None, min_length=1, max_length=LABEL_KEY_LENGTH)
    """Node label whose value splits the fleet into groups with their own breaker, e.g.
    `topology.kubernetes.io/zone`. Absent: one breaker for all selected nodes."""


class ExecutorAction(SpecModel):
    """How an in-place repair (GPUReset or Reboot) is carried out."""

    executor: Executor = Executor.Job
    """Job (run `jobTemplate` on the node), NodeAgent (ask the node's agent) or Noop."""
    job_template: JobTemplate = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """A batch/v1 Job template (metadata and spec) for the Job executor."""


class ReplaceAction(SpecModel):
    """How Replace is carried out."""

    provider: ReplaceProvider = ReplaceProvider.Karpenter
    """Karpenter (delete the NodeClaim), DeleteNode, or Manual (label the node for a human)."""


class Actions(SpecModel):
    """How the GPUReset, Reboot and Replace steps are carried out."""

    gpu_reset: ExecutorAction = ExecutorAction()
    """Executor of GPUReset."""
    reboot: ExecutorAction = ExecutorAction()
    """Executor of Reboot."""
    replace: ReplaceAction = ReplaceAction()
    """Provider of Replace."""


class PodRule(SpecModel):
    """How the Drain step treats the pods this rule selects (all given fields must match)."""

    handling: PodHandling
    """Evict: at once, through the Eviction API (PodDisruptionBudgets honoured; kubectl
    drain's behaviour). AllowCompletion: a Job's pod or a bare pod is left to finish until
    `waitFor` has passed since the drain began, then evicted (other pods are evicted at once).
    DeleteAfterTimeout: the pods are left to finish until `waitFor`, then deleted (no
    PodDisruptionBudget check). Give the Drain step a `timeout` longer than `waitFor`: the
    step's timeout still applies."""
    namespaces: list[DnsLabel] = Field(default=[], max_length=MAX_LABEL_VALUES)
    """The pods' namespaces. Empty: every namespace."""
    pod_selector: LabelSelector = LabelSelector()
    """The pods' labels. Empty: every pod."""
    wait_for: Duration = durations.format(domain.DEFAULT_POD_WAIT)
    """AllowCompletion and DeleteAfterTimeout: how long after the drain began the pods may
    still finish by themselves."""


class Drain(SpecModel):
    """How the Drain step treats workloads. DaemonSet pods and mirror pods are left, as
    `kubectl drain --ignore-daemonsets` does; pods with emptyDir volumes and pods no controller
    owns are evicted, as `--delete-emptydir-data --force` do."""

    pods: list[PodRule] = Field(default=[], max_length=MAX_POD_RULES)
    """Per namespace or pod label: Evict, AllowCompletion or DeleteAfterTimeout. The first
    rule that selects a pod decides; a pod no rule selects is evicted at once."""
    gpu_pods_only_before_reset: bool = False
    """A Drain whose next step is GPUReset moves only the pods that request `nvidia.com/gpu`
    (CPU-only system pods keep running through the reset). If the ladder goes on to Reboot,
    the Reboot first evicts the pods left under the full drain rules (PodDisruptionBudgets
    honoured; reason EvictingBeforeReboot names them) and reboots only once none remains."""


class Diagnostics(SpecModel):
    """Diagnostics captured before a destructive step: a Job pinned to the node collects what
    support and RMA cases need (nvidia-bug-report, kernel log, DCGM output) before Reboot or
    Replace starts. It has its own timeout and never holds the step past it; a failure is
    recorded in the step's record and an Event, and the step goes on."""

    model_config = _rules(
        {
            "rule": "!has(self.timeout) || duration(self.timeout) > duration('0s')",
            "message": "must be longer than 0s (a Job cannot finish in no time)",
            "fieldPath": ".timeout",
        },
    )

    destination: Annotated[Destination, Field(min_length=1, max_length=512)]
    """Where the Job writes: `pvc://<claim>[/<dir>]` mounts that PersistentVolumeClaim (in the
    executor namespace) at `/diagnostics` and gives the Job `REMEDIATION_DIAGNOSTICS_DIR`;
    any other address (e.g. `s3://bucket/prefix`) is for the Job's own image to upload to.
    Each run's location, `<destination>/<remediation>/diagnose-<n>`, is in the Job's
    `REMEDIATION_DIAGNOSTICS_LOCATION` and in the Remediation's `status.steps[].location`."""
    before: list[DestructiveAction] = Field(
        default=[Action.Reboot, Action.Replace], min_length=1, max_length=2
    )
    """The steps diagnostics are collected before: Reboot, Replace or both."""
    timeout: PositiveDuration = durations.format(domain.DEFAULT_DIAGNOSTICS_TIMEOUT)
    """How long the step waits for the Job; then the step starts anyway."""
    executor: Executor = Executor.Job
    """Job (run the template on the node), NodeAgent (ask the node's agent for `Diagnose`) or
    Noop."""
    job_template: JobTemplate = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """A batch/v1 Job template, e.g. your image with an upload command. Absent:
    `diagnose.yaml` of `--job-templates` (the chart ships one writing nvidia-bug-report, the
    kernel log and DCGM output to `REMEDIATION_DIAGNOSTICS_DIR`)."""


class RestartPods(SpecModel):
    """Pods on the node that keep stale state about its GPUs until they restart: a sticky
    health agent (the EKS node monitoring agent writes its condition healthy only when it
    starts; node-problem-detector keeps a kernel-log condition until it restarts) or the
    NVIDIA device plugin (it keeps a GPU it saw fail unhealthy for the life of its process).
    After a repair in `after`, the operator deletes those on the node (a plain delete: their
    DaemonSet recreates them), waits until each entry that had a pod there has a new one
    Running and Ready, and only then validates."""

    model_config = _rules(
        {
            "rule": "(has(self.podSelector.matchLabels) && size(self.podSelector.matchLabels) > 0)"
            " || (has(self.podSelector.matchExpressions)"
            " && size(self.podSelector.matchExpressions) > 0)",
            "message": "must select something: an empty selector would restart every pod of"
            " the namespace on the node",
            "fieldPath": ".podSelector",
        },
    )

    namespace: DnsLabel
    """The pods' namespace (e.g. `kube-system` for the EKS node monitoring agent,
    `gpu-operator` for the GPU Operator's device plugin)."""
    pod_selector: LabelSelector
    """The pods' labels (e.g. `app.kubernetes.io/name: eks-node-monitoring-agent`); must not
    be empty. An entry whose pods do not run on the node has nothing to restart there."""


class Validation(SpecModel):
    """Validation before return to service: after an in-place repair succeeds, a Job pinned to
    the node checks it before probation. Pass: probation (`recovery.healthyFor`), then release.
    Fail or timeout: positive evidence of the fault; the ladder climbs at once (e.g. to
    Replace), even if the node's condition shows no fault. DryRun incidents do not validate."""

    model_config = _rules(
        {
            "rule": "!has(self.timeout) || duration(self.timeout) > duration('0s')",
            "message": "must be longer than 0s (a Job cannot finish in no time)",
            "fieldPath": ".timeout",
        },
    )

    after: list[RepairAction] = Field(
        default=sorted(domain.IN_PLACE_REPAIRS, key=domain.LADDER_ORDER.index),
        min_length=1,
        max_length=len(domain.IN_PLACE_REPAIRS),
    )
    """The repairs whose success is checked: GPUReset, Reboot or both."""
    level: int = Field(default=domain.DEFAULT_VALIDATION_LEVEL, ge=1, le=4)
    """DCGM diagnostic level (`dcgmi diag -r <level>`): 1 quick (seconds), 2 medium (about 2
    minutes), 3 long (about 15 minutes), 4 extended (longer), per NVIDIA's dcgmi diag
    reference. Given to the Job's containers as the environment variable
    `REMEDIATION_DIAG_LEVEL`; the shipped template runs it."""
    timeout: PositiveDuration = durations.format(domain.DEFAULT_VALIDATION_TIMEOUT)
    """How long the Job may run, longer than 0s. A validation whose pod ran and is still
    running then counts as failed; one whose pod never started (Pending, image pull,
    suspended, refused by admission) gives no verdict: the node stays cordoned with reason
    ValidationNotRun and nothing climbs on it. Recorded in the step when it starts."""
    executor: Executor = Executor.Job
    """Job (run the template on the node), NodeAgent (ask the node's agent for `Validate`) or
    Noop (always passes: for tests)."""
    job_template: JobTemplate = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """A batch/v1 Job template, e.g. an NCCL single-node all-reduce test; exit code 0 passes.
    Absent: `validate.yaml` of `--job-templates` (the chart ships DCGM diagnostics plus
    `nvidia-smi` checks); with neither, the validation cannot run (ValidationNotRun). The
    pod gets `nodeName`, tolerations for our taint and the cordon."""
    restart_pods: list[RestartPods] = Field(default=[], max_length=MAX_RESTART_PODS)
    """Before the validation, restart these pods on the node (its health agent, its device
    plugin) and wait until they are back Ready, bounded by `timeout`. Not back in time: no
    verdict, the node stays cordoned with reason NodePodsNotBack and nothing climbs. With a
    restart, a fault the node still shows after the validation passed counts only once its
    agent reported it again (else the node stays cordoned with reason NoFreshReport), and
    the node returns to service only when it advertises all its GPUs."""


class RemediationPolicySpec(SpecModel):
    """What counts as a fault, how long to tolerate it, which ladder to climb, and how much of
    the fleet may be disrupted at once."""

    node_selector: LabelSelector = LabelSelector()
    """The nodes this policy watches. Empty: every node."""
    mode: Mode = Mode.Enforce
    """Enforce acts; DryRun decides, records and emits events, but changes nothing."""
    paused: bool = False
    """Start nothing new while true; running steps finish."""
    pause_requests: list[Annotated[str, Field(min_length=1, max_length=NAME_LENGTH)]] = Field(
        default=[], max_length=MAX_PAUSE_REQUESTS
    )
    """Named pause requests (e.g. `upgrade-team`); the policy is paused while any is listed."""
    weight: int = Field(default=0, ge=0, le=MAX_WEIGHT)
    """Which policy owns a node that several policies select: the highest weight (as with
    Karpenter's NodePool weight); on equal weight the older policy, then the name that sorts
    first. A node has at most one active Remediation across all policies, and a policy keeps a
    node it already remediates until that incident ends. The policies that lose a node open no
    incident on it and show it in their status: `overlappedNodes`, `overlappedBy` and the
    condition `Overlapping`, whose message names the owners."""
    startup_grace: Duration = durations.format(domain.DEFAULT_STARTUP_GRACE)
    """A node younger than this is not remediated: GPU software takes minutes to come up."""
    faults: list[Fault] = Field(
        min_length=1,
        max_length=MAX_FAULTS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """The faults, most severe first: a node matching several takes the first listed. Names are
    unique."""
    recovery: Recovery = Recovery()
    """How a repaired node returns to service."""
    history: History | None = None
    """Repeat-offender rule. Absent: history does not change the ladder."""
    budgets: list[Budget] = Field(default=[], max_length=MAX_BUDGETS)
    """Disruption budgets; the strictest active one wins. None: no limit."""
    rate: Rate | None = None
    """Limit on new disruptive steps per time window. Absent: no limit."""
    circuit_breaker: CircuitBreaker | None = None
    """Fleet-wide fault ceiling. Absent: no breaker."""
    require_approval: list[LadderAction] = Field(
        default=[],
        max_length=len(domain.LADDER_ORDER),
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(a, a != 'Cordon')",
                    "message": "Cordon cannot require approval: it is the safe step that keeps"
                    " new work off a faulty node while a human decides",
                }
            ]
        },
    )
    """Actions that wait for a human's approval annotation on the Remediation (not Cordon).
    The waiting Remediation's message gives the exact command, e.g. `kubectl annotate
    remediation <name> remediation.gpuops.io/approve=Replace` (several actions: a
    comma-separated list)."""
    actions: Actions = Actions()
    """How GPUReset, Reboot and Replace are carried out."""
    diagnostics: Diagnostics | None = None
    """Diagnostics before Reboot or Replace. Absent: none are collected."""
    drain: Drain = Drain()
    """How the Drain step treats workloads (per-pod rules, GPU pods only before a reset)."""
    validation: Validation | None = None
    """Validation before return to service after GPUReset or Reboot. Absent: a repaired node
    returns after passive probation (`recovery.healthyFor`) only."""


# --- status ---------------------------------------------------------------------------------


class Condition(StatusModel):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: Literal["Accepted", "CircuitOpen", "Paused", "Overlapping"]
    """Accepted: the spec is valid and in use. CircuitOpen: some group's breaker is open.
    Paused: the policy is paused. Overlapping: another policy owns some of the nodes this one
    selects (its message names the owners)."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """One CamelCase word saying why."""
    message: str = ""
    """One sentence for humans."""
    last_transition_time: Timestamp
    """When the status last changed (RFC 3339, UTC)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The spec generation the condition was computed from."""


class BreakerStatus(StatusModel):
    """The circuit breaker of one group, kept here so a restarted operator remembers it."""

    open: bool = False
    """Whether the breaker is open (no new remediation starts in the group)."""
    opened_at: Timestamp | None = None
    """When it opened."""
    healthy_since: Timestamp | None = None
    """Since when the group has been at or below the threshold (the cooldown's start)."""


class RemediationPolicyStatus(StatusModel):
    """What the operator observed and decided for this policy."""

    observed_generation: int | None = None
    """The spec generation last processed."""
    conditions: list[Condition] = Field(
        default=[],
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Accepted, CircuitOpen, Paused, Overlapping."""
    observed: int = 0
    """Nodes the policy selects."""
    unhealthy: int = 0
    """Selected nodes on which a fault is present now."""
    in_flight: int = 0
    """Nodes in a disruptive step, plus NotReady nodes without a Remediation."""
    headroom: dict[str, int] = {}
    """By action: how many more nodes it may take now under the strictest active budget."""
    circuit: dict[str, BreakerStatus] = {}
    """By group value (empty string when there is no groupBy): the breaker's state."""
    overlapped_nodes: int = Field(default=0, ge=0)
    """Selected nodes another policy owns: this policy opens no incident on them. A node has
    one owner across policies: the policy with an open incident on it, else the highest
    `weight`, then the older policy, then the name that sorts first."""
    overlapped_by: list[str] = Field(default=[], max_length=MAX_OVERLAPPED_BY)
    """The policies that own them, sorted by name (at most 10)."""
    circuit_state: Literal["Closed", "Open"] = "Closed"
    """Open when any group's breaker is open (the CIRCUIT column)."""
    mode: Mode | None = None
    """The mode in effect, its default applied (the MODE column)."""
    paused: bool | None = None
    """Whether the policy is paused: `paused` or any pause request (the PAUSED column)."""
    last_accepted_spec: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """The last spec that validated; the operator keeps running it while the current spec is
    invalid, also after a restart."""
    last_accepted_generation: int | None = None
    """The generation of `lastAcceptedSpec`."""
