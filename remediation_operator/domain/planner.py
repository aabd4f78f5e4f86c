"""The planner: one pure function from (snapshot, policy, now) to what to do and when to look again.

It reads as a decision list per node (excluded? paused? fault present? tolerated long enough?
step done? budget? breaker? approval?) and returns effects to apply once, the status every
touched Remediation should show, and the exact time it next needs to be woken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from remediation_operator.domain.effects import Effect
from remediation_operator.domain.fleet import BreakerState, Snapshot
from remediation_operator.domain.policy import Action, Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import RemediationState


@dataclass(frozen=True)
class PolicySummary:
    """What the policy's status shows: counts, headroom, and the conditions' inputs."""

    observed: int
    """Nodes the policy selects."""
    unhealthy: int
    """Selected nodes on which a fault of the policy is present now."""
    in_flight: int
    """Nodes in a disruptive step (plus NotReady ones without a Remediation)."""
    headroom: Mapping[Action, int] = field(default_factory=dict)
    """How many more nodes each disruptive action may take now under the strictest budget."""
    circuit_open: tuple[str, ...] = ()
    """Groups whose breaker is open ("" when the policy has no groupBy)."""
    invalid_budgets: tuple[str, ...] = ()
    """One sentence per budget that could not be parsed (each allows zero: fail closed)."""
    paused: bool = False


@dataclass(frozen=True)
class Plan:
    effects: tuple[Effect, ...]
    remediations: tuple[RemediationState, ...]
    """New or changed Remediation states to write (created, advanced, finished)."""
    breakers: Mapping[str, BreakerState]
    summary: PolicySummary
    next_wake: datetime | None
    """The earliest deadline at which the plan could change without any new event."""
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    """By node: why each planned node is where it is now (for logs and tests)."""


def plan(snapshot: Snapshot, policy: Policy, now: datetime) -> Plan:
    raise NotImplementedError("implemented in the decision-core work")
