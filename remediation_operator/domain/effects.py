"""What the planner asks the engine to do: effects collected once, then applied once.

Each effect is idempotent when applied (applying it twice leaves the same state), so an engine
that crashed half-way can apply a plan again. In DryRun the planner emits only `Announce`,
and the clean-up of what an earlier Enforce incident did (`Release`,
`ProtectFromConsolidation(on=False)`): undoing our own effects never depends on the mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from remediation_operator.domain.policy import Action, PodRule, ReplaceProvider, RestartTarget
from remediation_operator.domain.reasons import Reason


@dataclass(frozen=True)
class Cordon:
    """Set spec.unschedulable and our quarantine taint."""

    node: str


@dataclass(frozen=True)
class Release:
    """Remove our taint and do-not-disrupt annotation; uncordon only if `uncordon`."""

    node: str
    uncordon: bool


@dataclass(frozen=True)
class ProtectFromConsolidation:
    """Set (or, with on=False, remove) `karpenter.sh/do-not-disrupt: "true"` on the Node."""

    node: str
    on: bool


@dataclass(frozen=True)
class DrainPlan:
    """Which pods a drain moves, and how: the policy's pod rules (first match wins, no match:
    Evict), which rules' waits are over (by index, judged when the plan was made), and whether
    only pods requesting `nvidia.com/gpu` are drained (the drain before a GPU reset)."""

    rules: tuple[PodRule, ...] = ()
    expired: frozenset[int] = frozenset()
    gpu_only: bool = False


EVERY_POD = DrainPlan()
"""Evict every evictable pod at once: kubectl drain's behaviour, and the default."""


@dataclass(frozen=True)
class Evict:
    """Evict every evictable pod on the node (Eviction API); `force` deletes them instead.
    `plan` says which pods and how (workload-aware drain)."""

    node: str
    force: bool = False
    plan: DrainPlan = EVERY_POD


@dataclass(frozen=True)
class RunExecutor:
    """Start the GPUReset, Reboot or Validate executor; named from the Remediation and attempt."""

    node: str
    remediation: str
    action: Action
    attempt: int
    boot_id: str = ""
    """Reboot: the node's bootID when the step started; the Job gets it as
    REMEDIATION_EXPECTED_BOOT_ID so a rerun after the reboot does not reboot again."""


@dataclass(frozen=True)
class RestartNodePods:
    """Delete (a plain delete, not an eviction: their DaemonSet recreates them) the pods on
    the node that `targets` select and that were created before `created_before`, the
    instant the RestartPods step started. A pod created since is never deleted, so applying
    this again after a crash restarts nothing twice (D71)."""

    node: str
    targets: tuple[RestartTarget, ...]
    created_before: datetime

    @classmethod
    def started(
        cls, node: str, targets: tuple[RestartTarget, ...], started_at: datetime
    ) -> RestartNodePods:
        """The restart of a step started at `started_at`, in whole seconds: the API's
        creationTimestamp has one-second resolution, so a pod recreated within the second
        the step started reads as created at that second, never before it."""
        return cls(node, targets, started_at.replace(microsecond=0))


@dataclass(frozen=True)
class Replace:
    """Give the node back: delete its NodeClaim (Karpenter), the Node, or ask a human (Manual)."""

    node: str
    provider: ReplaceProvider


class Severity(StrEnum):
    Normal = "Normal"
    Warning = "Warning"


@dataclass(frozen=True)
class Announce:
    """An explained decision: an Event on the Node and Remediation, a log line, a metric.

    `node` is "" (and `remediation` None) for a decision about the policy as a whole, such as
    a circuit breaker opening or closing; `group` then names the breaker's group.
    """

    node: str
    remediation: str | None
    reason: Reason
    message: str
    severity: Severity = Severity.Normal
    action: Action | None = None
    group: str | None = None


Effect = (
    Cordon
    | Release
    | ProtectFromConsolidation
    | Evict
    | RunExecutor
    | RestartNodePods
    | Replace
    | Announce
)
