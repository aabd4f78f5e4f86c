"""The Remediation resource as pydantic models: one incident on one node, and its full state.

The status mirrors `domain.remediation.RemediationState` field for field (camelCase), because
all of an incident's state lives there: a restarted operator resumes from it alone. Times are
RFC 3339 strings in UTC (`2026-11-30T11:02:00Z`), as Kubernetes writes them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from remediation_operator.api.field_types import ReasonWord, RecordedDuration, Timestamp
from remediation_operator.api.model_base import SpecModel, StatusModel
from remediation_operator.domain.policy import Action
from remediation_operator.domain.remediation import Outcome, Phase

MAX_RESTARTED = 32
"""At most this many pods named in one RestartPods step's record."""


class RemediationSpec(SpecModel):
    """Which node and which policy the incident belongs to; set at creation, never changed."""

    node_name: str = Field(min_length=1)
    """The Node being remediated."""
    policy_name: str = Field(min_length=1)
    """The RemediationPolicy whose fault matched."""


class ObservedCondition(StatusModel):
    """The Node condition that matched, as it was when the incident opened."""

    type: str
    """Condition type."""
    status: str
    """Condition status."""
    reason: str = ""
    """Condition reason."""
    message: str = ""
    """Condition message."""
    last_transition_time: Timestamp | None = None
    """The condition's lastTransitionTime."""
    last_heartbeat_time: Timestamp | None = None
    """The condition's lastHeartbeatTime."""


class StepRecord(StatusModel):
    """One step attempt: when it started and ended, and how it ended."""

    action: Action
    """The step's action."""
    attempt: int = Field(ge=1)
    """Attempt number, from 1."""
    started_at: Timestamp
    """When the attempt started."""
    finished_at: Timestamp | None = None
    """When it ended; absent while it runs."""
    outcome: Outcome | None = None
    """Succeeded, TransientFailure, PermanentFailure or Cancelled; absent while it runs."""
    reason: ReasonWord
    """Why it is where it is (one CamelCase word)."""
    message: str
    """One sentence for humans."""
    location: str | None = Field(default=None, max_length=1024)
    """Diagnose only: where the diagnostics were written (`<destination>/<remediation>/
    diagnose-<n>`, the policy's `diagnostics.destination`)."""
    timeout: RecordedDuration | None = None
    """Validate and Diagnose: the timeout the step started with; the running step keeps it
    even if the policy's `validation` or `diagnostics` changes or is removed meanwhile."""
    restarted: list[Annotated[str, Field(max_length=600)]] | None = Field(
        default=None, max_length=MAX_RESTARTED
    )
    """RestartPods only: the pods the operator restarts on the node, each as
    `<namespace>/<name> (<restartPods entry>)`, recorded before they were deleted."""


class RemediationCondition(StatusModel):
    """A standard Kubernetes condition (metav1.Condition), derived from the phase."""

    type: Literal["Ready", "Reconciling", "Stalled"]
    """Ready: the incident is over and nothing is left to do (Succeeded or Cancelled).
    Reconciling: the operator is still working on it. Stalled: it failed and needs a human.
    These are the conditions kstatus (Argo CD, Flux, kpt) and `kubectl wait` read."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: ReasonWord
    """One CamelCase word saying why (the incident's reason)."""
    message: str = ""
    """One sentence for humans."""
    last_transition_time: Timestamp
    """When the status last changed: the incident's start or its end."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The Remediation generation the condition was computed from."""


class RemediationStatus(StatusModel):
    """The state of the incident: where it is on the ladder, why, and what happened so far."""

    phase: Phase
    """Pending, Running, Waiting, Blocked, Recovering, Succeeded, Failed or Cancelled."""
    reason: ReasonWord
    """Why the incident is where it is (one CamelCase word)."""
    message: str
    """One sentence for humans, including when it will act next."""
    fault: str
    """The policy's fault that matched."""
    condition: ObservedCondition | None = None
    """The matched Node condition as first seen."""
    started_at: Timestamp
    """The episode clock: when the incident was first seen. Never reset by a flapping reason."""
    step_index: int | None = Field(default=None, ge=0)
    """Index of the current (or last) step in the fault's ladder."""
    step: Action | None = None
    """The current (or last) step's action."""
    attempt: int = Field(default=0, ge=0)
    """Attempt number of the current step, from 1."""
    step_started_at: Timestamp | None = None
    """When the current step attempt started."""
    step_finished_at: Timestamp | None = None
    """When the current step attempt finished."""
    next_check_at: Timestamp | None = None
    """When the operator will look at this incident again (a deadline, not a poll)."""
    cordoned_by_us: bool = False
    """The operator cordoned the node itself; only then does it uncordon on recovery."""
    boot_id_at_step_start: str | None = Field(default=None, alias="bootIDAtStepStart")
    """The node's bootID when Reboot began; a new one (and Ready) confirms the reboot."""
    healthy_since: Timestamp | None = None
    """Start of probation: since when the fault has been absent."""
    finished_at: Timestamp | None = None
    """When the incident ended (terminal phases only)."""
    steps: list[StepRecord] = []
    """Every step attempt, oldest first."""
    dry_run: bool = False
    """Decided under DryRun: recorded and announced, nothing was changed."""
    step_outcome: Outcome | None = None
    """How the current step ended, once `stepFinishedAt` is set (Cancelled: interrupted)."""
    repeat_offender: bool = False
    """History sent this incident ahead on the ladder (`history.then`) after the cordon."""
    evidence_at_step_end: ObservedCondition | None = None
    """The matched Node condition as it was when the last repair step (GPUReset, Reboot) ended.
    A later disruptive step needs the condition reported again since (its heartbeat, transition,
    status or reason differ), also across an operator restart."""
    evidence_seen_at: Timestamp | None = None
    """When the operator (on its own clock) had last seen that condition change, as of the
    step's end."""
    node_created_at: Timestamp | None = None
    """The creationTimestamp of the Node the incident ran on: a Node of the same name created
    at another time is a new machine, which a Failed incident's hold does not cover."""
    steps_dropped: int | None = Field(default=None, ge=0)
    """Retries left out of `steps` (between a step's first and latest attempt), so the record
    stays bounded however often a step is retried."""
    waiting: list[str] = Field(default=[], max_length=32)
    """Faults of other policies the node shows now, as `<policy>/<fault>`: they wait for this
    incident to end (at most one active incident per node)."""
    conditions: list[RemediationCondition] = Field(
        default=[],
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Reconciling and Stalled, in Kubernetes conventions (written from the phase)."""
