"""The RemediationPolicy resource as pydantic models: its spec as users write it, and its status.

These models are the source of truth for the CRD schema and for docs/policy.md (both generated
from them). Defaults come from `domain.policy`'s DEFAULT_* constants, written as users would
write them, so the documentation, the validation and the planner cannot disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from remediation_operator.api.field_types import (
    CountOrPercent,
    CronSchedule,
    DnsLabel,
    Duration,
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
    OnTimeout,
    ReplaceProvider,
)
from remediation_operator.domain.selectors import Operator

# --- nodeSelector ---------------------------------------------------------------------------


class LabelSelectorRequirement(SpecModel):
    """One requirement on a label, as in every Kubernetes label selector."""

    key: str = Field(min_length=1)
    """The label key the requirement applies to."""
    operator: Operator
    """In and NotIn need `values`; Exists and DoesNotExist must have none."""
    values: list[str] = []
    """The label values for In and NotIn."""


class LabelSelector(SpecModel):
    """Standard Kubernetes label selector; an empty selector selects every node."""

    match_labels: dict[str, str] = {}
    """Labels a node must carry with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] = []
    """Further requirements; all must hold."""


# --- faults ---------------------------------------------------------------------------------


class ConditionMatch(SpecModel):
    """One way a Node condition signals the fault. Every field given must match."""

    type: str = Field(min_length=1)
    """The Node condition type, e.g. `AcceleratedHardwareReady` or `GPUProblem`."""
    status: Literal["True", "False", "Unknown"] | None = None
    """The condition status that means a fault. Absent: any status."""
    reason: Regex | None = None
    """Regular expression that must match the condition's whole reason, e.g. `NvidiaXID79Error`."""
    stale_after: Duration | None = None
    """A condition whose lastHeartbeatTime is older than this is a fault by itself (fail closed:
    such evidence may cordon, never disrupt)."""


class LadderStep(SpecModel):
    """One rung of the ladder and its timings."""

    action: Action
    """What to do. Steps go in the order Cordon, Drain, GPUReset, Reboot, Replace; rungs may be
    skipped but not repeated or reversed."""
    timeout: Duration | None = None
    """How long the step may take before it counts as a permanent failure. Absent: no limit."""
    escalate_after: Duration = durations.format(domain.Step(Action.Cordon).escalate_after)
    """After the step succeeded, how long the fault may persist before the next step starts."""
    retries: int = Field(default=domain.DEFAULT_RETRIES, ge=0)
    """How many transient failures are retried, with backoff, within the timeout."""
    on_timeout: OnTimeout = OnTimeout.Escalate
    """What a timeout leads to: Escalate to the next step, or Force (Drain only: delete the pods
    that could not be evicted). Force needs a `timeout`."""


class Fault(SpecModel):
    """A named failure: how it is recognised, how long it is tolerated, which ladder it climbs."""

    name: DnsLabel
    """Unique name of the fault (a DNS label); shown in `kubectl get remediations`."""
    match: list[ConditionMatch] = Field(min_length=1)
    """Node conditions that signal this fault; any one of them is enough."""
    tolerate: Duration = durations.format(domain.DEFAULT_TOLERATE)
    """How long the fault must persist before the first step."""
    ladder: list[LadderStep] = Field(min_length=1)
    """The steps, in order; the next one starts when the fault outlives the previous one."""
    on_exhausted: OnExhausted | None = None
    """What happens when the last step ran and the fault remains: Hold (keep the node
    quarantined and wait for recovery) or Fail (close as Failed, leave the node cordoned for a
    human). Required unless the ladder ends in Replace."""


# --- fleet-wide settings --------------------------------------------------------------------


class Recovery(SpecModel):
    """How a repaired node returns to service."""

    healthy_for: Duration = durations.format(domain.DEFAULT_HEALTHY_FOR)
    """Probation: the fault must stay absent this long before the node is uncordoned."""


class History(SpecModel):
    """Repeat offenders: a node with many recent incidents skips ahead on the ladder."""

    window: Duration = durations.format(domain.DEFAULT_HISTORY_WINDOW)
    """How far back incidents on the same node are counted."""
    max_episodes: int = Field(default=domain.DEFAULT_HISTORY_MAX_EPISODES, ge=1)
    """This many incidents within the window send the next one straight to `then`."""
    then: Action = Action.Replace
    """The step a repeat offender's incident starts at (earlier steps still run if required
    to reach it safely, e.g. Cordon)."""


class Budget(SpecModel):
    """At most `nodes` nodes in the listed actions at once; the strictest active budget wins."""

    nodes: CountOrPercent
    """A node count (`3`) or a percentage of the selected nodes (`10%`, rounded up)."""
    actions: list[Action] = [a for a in domain.LADDER_ORDER if a in domain.DISRUPTIVE]
    """The actions this budget limits."""
    schedule: CronSchedule | None = None
    """Cron expression (5 fields, UTC) that opens the budget's window; needs `duration`."""
    duration: Duration | None = None
    """How long each window the schedule opens lasts; needs `schedule`."""


class Rate(SpecModel):
    """At most `max` new disruptive steps started per sliding window `per`."""

    max: int = Field(ge=1)
    """Disruptive steps that may start per window."""
    per: Duration
    """The length of the sliding window."""


class CircuitBreaker(SpecModel):
    """Stop starting remediations while too many nodes look faulty at once (a bad checker)."""

    max_unhealthy: CountOrPercent
    """More nodes of a group than this (a count or a percentage) showing a fault at once opens
    the breaker: no new remediation starts, not even a cordon."""
    min_nodes: int = Field(default=domain.DEFAULT_CIRCUIT_MIN_NODES, ge=0)
    """A group smaller than this may always repair one node, whatever the percentage says."""
    cooldown: Duration = durations.format(domain.DEFAULT_CIRCUIT_COOLDOWN)
    """How long the fraction must stay at or below the threshold before the breaker closes."""
    group_by: str | None = None
    """Node label whose value splits the fleet into groups with their own breaker, e.g.
    `topology.kubernetes.io/zone`. Absent: one breaker for all selected nodes."""


class ExecutorAction(SpecModel):
    """How an in-place repair (GPUReset or Reboot) is carried out."""

    executor: Executor = Executor.Job
    """Job (run `jobTemplate` on the node), NodeAgent (ask the node's agent) or Noop."""
    job_template: dict[str, Any] | None = Field(
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


class RemediationPolicySpec(SpecModel):
    """What counts as a fault, how long to tolerate it, which ladder to climb, and how much of
    the fleet may be disrupted at once."""

    node_selector: LabelSelector = LabelSelector()
    """The nodes this policy watches. Empty: every node."""
    mode: Mode = Mode.Enforce
    """Enforce acts; DryRun decides, records and emits events, but changes nothing."""
    paused: bool = False
    """Start nothing new while true; running steps finish."""
    pause_requests: list[str] = []
    """Named pause requests (e.g. `upgrade-team`); the policy is paused while any is listed."""
    startup_grace: Duration = durations.format(domain.DEFAULT_STARTUP_GRACE)
    """A node younger than this is not remediated: GPU software takes minutes to come up."""
    faults: list[Fault] = Field(min_length=1)
    """The faults, most severe first: a node matching several takes the first listed."""
    recovery: Recovery = Recovery()
    """How a repaired node returns to service."""
    history: History | None = None
    """Repeat-offender rule. Absent: history does not change the ladder."""
    budgets: list[Budget] = []
    """Disruption budgets; the strictest active one wins. None: no limit."""
    rate: Rate | None = None
    """Limit on new disruptive steps per time window. Absent: no limit."""
    circuit_breaker: CircuitBreaker | None = None
    """Fleet-wide fault ceiling. Absent: no breaker."""
    require_approval: list[Action] = []
    """Actions that wait for a human's approval annotation on the Remediation (not Cordon)."""
    actions: Actions = Actions()
    """How GPUReset, Reboot and Replace are carried out."""


# --- status ---------------------------------------------------------------------------------


class Condition(StatusModel):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: Literal["Accepted", "CircuitOpen", "Paused"]
    """Accepted: the spec is valid and in use. CircuitOpen: some group's breaker is open.
    Paused: the policy is paused."""
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
    """Accepted, CircuitOpen, Paused."""
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
    circuit_state: Literal["Closed", "Open"] = "Closed"
    """Open when any group's breaker is open (the CIRCUIT column)."""
    last_accepted_spec: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """The last spec that validated; the operator keeps running it while the current spec is
    invalid, also after a restart."""
    last_accepted_generation: int | None = None
    """The generation of `lastAcceptedSpec`."""
