"""The state of one incident on one node: what the Remediation object's status holds.

All state lives here (and so in the Remediation's status) so that an operator that crashes
at any point resumes from it: the episode clock, the current step and attempt, what we did to
the node (did we cordon it?) and a record of every step with its start and outcome.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason


class Phase(StrEnum):
    Pending = "Pending"
    """Fault seen, tolerance window running; nothing done yet."""
    Running = "Running"
    """A step is in progress."""
    Waiting = "Waiting"
    """The current step is done; watching the fault until escalateAfter passes."""
    Blocked = "Blocked"
    """The next step is due but held back (budget, rate, breaker, pause, approval)."""
    Recovering = "Recovering"
    """The fault is absent; probation runs before the node returns to service."""
    Succeeded = "Succeeded"
    Failed = "Failed"
    Cancelled = "Cancelled"


TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.Succeeded, Phase.Failed, Phase.Cancelled})


class Outcome(StrEnum):
    """The step outcome contract (DESIGN section 3)."""

    Succeeded = "Succeeded"
    TransientFailure = "TransientFailure"
    """Retried with backoff within the step's timeout."""
    PermanentFailure = "PermanentFailure"
    """Escalate at once. A timeout is a permanent failure."""
    Cancelled = "Cancelled"
    """The step was abandoned: the fault cleared, an admin intervened, the node went away."""


@dataclass(frozen=True)
class StepRecord:
    action: Action
    attempt: int
    started_at: datetime
    reason: Reason
    message: str
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    location: str = ""
    """Diagnose only: where the diagnostics were written ("" for other steps)."""
    timeout: timedelta | None = None
    """Validate and Diagnose: the timeout the step started with (the policy's at the time).
    The running step is judged by it, so editing or removing the policy's `validation` or
    `diagnostics` meanwhile cannot take its deadline away (issue 22)."""
    restarted: tuple[str, ...] = ()
    """RestartPods only: the pods it restarts, `<namespace>/<name> (<entry>)` with the
    `validation.restartPods` entry that selects each (`RestartTarget.describe`), recorded
    before they are deleted: an entry that had a pod must have a new one back (D71)."""


@dataclass(frozen=True)
class ObservedCondition:
    """The node condition that matched, as it was seen when the incident opened (or, for an
    incident that ended Failed or cancelled by an administrator's uncordon, as it was then: a
    new incident opens only once that condition has transitioned since)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    last_heartbeat_time: datetime | None = None


@dataclass(frozen=True)
class RemediationState:
    name: str
    node: str
    policy: str
    fault: str
    phase: Phase
    reason: Reason
    message: str
    started_at: datetime
    """The episode clock: when we first saw this incident. Never reset by a flapping reason."""
    condition: ObservedCondition | None = None
    step_index: int | None = None
    """Index into the fault's ladder of the current (or last) step; None before the first."""
    step: Action | None = None
    attempt: int = 0
    """Attempt number of the current step, starting at 1 (retries after transient failures)."""
    step_started_at: datetime | None = None
    step_finished_at: datetime | None = None
    next_check_at: datetime | None = None
    cordoned_by_us: bool = False
    """We set spec.unschedulable ourselves; only then do we uncordon on recovery."""
    boot_id_at_step_start: str | None = None
    """bootID when Reboot began; a different one (and Ready=True) confirms the reboot."""
    healthy_since: datetime | None = None
    """Start of probation: when the fault was last seen absent after being present."""
    finished_at: datetime | None = None
    steps: tuple[StepRecord, ...] = ()
    dry_run: bool = False
    step_outcome: Outcome | None = None
    """How the current step ended once `step_finished_at` is set (Cancelled: interrupted)."""
    repeat_offender: bool = False
    """History sent this episode ahead: after the cordon it jumps to `history.then`."""
    evidence_at_step_end: ObservedCondition | None = None
    """The matched condition as it was when the last repair step (attempt) ended, remote
    times included (None: missing then, or not recorded). Evidence counts as reported after
    that step only if its remote heartbeat, transition, status or reason differ from these:
    our own observation times restart with the operator, remote times do not, and remote
    times are only ever compared with remote times (docs/decisions.md, the evidence rule)."""
    evidence_seen_at: datetime | None = None
    """Our clock's `observed_at` of that condition when the step ended (None: not tracked).
    If it has moved since while the remote values did not, our clock saw a change the node
    did not make: a restart's first sighting."""
    steps_dropped: int = 0
    """Step records left out of `steps` (retries between a step's first and latest attempt:
    domain.bounds), so the record stays bounded however often a step is retried."""
    waiting: tuple[str, ...] = ()
    """Faults of other policies the node shows (`<policy>/<fault>`), waiting for this incident
    to end: one active incident per node (D61)."""
    node_created_at: datetime | None = None
    """The creationTimestamp of the Node the incident ran on (None: not recorded, an older
    Remediation). A Node of the same name created at another time is another machine (a
    replacement that joined under the name): a Failed incident's hold does not cover it. A
    reboot keeps the Node object, so it keeps this time (a new bootID is the same machine)."""

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


APPROVE_ANNOTATION = "remediation.gpuops.io/approve"
"""On a Remediation: comma-separated actions a human approved (e.g. `Replace`)."""

MAX_NAME = 253
"""A Remediation's name is a DNS subdomain: at most 253 characters."""


def name_for(node: str, started_at: datetime, taken: Collection[str] = (), policy: str = "") -> str:
    """`<node>-<p>-<yyyymmdd>t<hhmm>` (UTC), unique among `taken` and valid for any node name.

    `<p>` is 5 hex digits of the policy's name: Remediations are cluster-wide objects and two
    policies selecting one node must never compete for one name (without a policy, it is left
    out). A second episode of the same node in the same minute gets seconds too (`t110215`).
    When the node name is too long, it is cut and a hash of the whole name keeps it unique.
    """
    owner = "-" + hashlib.sha256(policy.encode()).hexdigest()[:5] if policy else ""
    for fmt in ("%Y%m%dt%H%M", "%Y%m%dt%H%M%S"):
        name = _fit(node.lower(), owner + "-" + started_at.strftime(fmt))
        if name not in taken:
            return name
    return name


def _fit(node: str, suffix: str) -> str:
    if len(node) + len(suffix) <= MAX_NAME:
        return node + suffix
    digest = "-" + hashlib.sha256(node.encode()).hexdigest()[:10]
    keep = MAX_NAME - len(suffix) - len(digest)
    return node[:keep].rstrip("-.") + digest + suffix
