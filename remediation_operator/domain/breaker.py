"""The circuit breaker: a wave of faults in one group stops new remediation, per group.

A broken health checker or a bad driver roll-out makes many nodes look faulty at once; acting
on all of them would take the fleet down. When more than `maxUnhealthy` of a group's nodes
show a fault, the group's breaker opens: no new Remediation starts (not even a cordon) and no
new step starts, while steps already running finish. It closes only after the unhealthy
fraction has stayed at or below the threshold for `cooldown`, so it neither latches forever
nor flaps. A group with fewer than `minNodes` nodes never opens (one bad node of three is
33%); instead, while it is over the threshold, it repairs one node at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from remediation_operator.domain.fleet import BreakerState, NodeView
from remediation_operator.domain.policy import CircuitBreaker
from remediation_operator.domain.reasons import Reason

_LIMIT = re.compile(r"^(?:(?P<percent>100|[0-9]{1,2})%|(?P<count>[0-9]+))$")

UNGROUPED = ""
"""The group of every node when the policy has no `groupBy` (or the node lacks the label)."""


@dataclass(frozen=True)
class Health:
    """A group's nodes now: how many there are and how many show a fault of the policy."""

    total: int = 0
    unhealthy: int = 0


@dataclass(frozen=True)
class Change:
    """A breaker's new state, and the announcement when it opened or closed (else None)."""

    state: BreakerState
    announce: Reason | None = None


def group_of(node: NodeView, config: CircuitBreaker | None) -> str:
    if config is None or config.group_by is None:
        return UNGROUPED
    return node.labels.get(config.group_by, UNGROUPED)


def problem(config: CircuitBreaker) -> str | None:
    """Why `maxUnhealthy` is unusable (the breaker then trips on any fault), or None."""
    if _LIMIT.match(config.max_unhealthy.strip()) is None:
        return (
            f"circuitBreaker.maxUnhealthy {config.max_unhealthy!r} is invalid: write a whole"
            " number or a percentage from 0% to 100%; the breaker opens on any fault until fixed"
        )
    return None


def exceeded(config: CircuitBreaker, health: Health) -> bool:
    """More than `maxUnhealthy` of the group shows a fault (an invalid limit counts as 0)."""
    found = _LIMIT.match(config.max_unhealthy.strip())
    if found is None:
        return health.unhealthy > 0
    if found["percent"] is not None:
        # unhealthy / total > percent / 100, in integers.
        return health.unhealthy * 100 > int(found["percent"]) * health.total
    return health.unhealthy > int(found["count"])


def small(config: CircuitBreaker, health: Health) -> bool:
    return health.total < config.min_nodes


def evolve(config: CircuitBreaker, previous: BreakerState, health: Health, now: datetime) -> Change:
    """The group's breaker after seeing `health` at `now`."""
    over = exceeded(config, health)
    if previous.open and small(config, health):
        # The group shrank below minNodes: a small pool never stays open (one node at a time
        # is repaired instead), whatever it was when it was larger.
        return Change(BreakerState(), Reason.CircuitClosed)
    if not previous.open:
        if over and not small(config, health):
            return Change(BreakerState(open=True, opened_at=now), Reason.CircuitOpen)
        return Change(previous if previous == BreakerState() else BreakerState())
    if over:
        if previous.healthy_since is None:
            return Change(previous)
        return Change(BreakerState(open=True, opened_at=previous.opened_at))
    since = previous.healthy_since if previous.healthy_since is not None else now
    if now - since >= config.cooldown:
        return Change(BreakerState(), Reason.CircuitClosed)
    return Change(BreakerState(open=True, opened_at=previous.opened_at, healthy_since=since))


def closes_at(config: CircuitBreaker, state: BreakerState) -> datetime | None:
    """When the cooldown of an open breaker ends if the group stays healthy (else None)."""
    if not state.open or state.healthy_since is None:
        return None
    return state.healthy_since + config.cooldown


def blocks(
    config: CircuitBreaker, state: BreakerState, health: Health, holds_slot: bool
) -> Reason | None:
    """Why a node of the group may not start anything now, or None when it may.

    `holds_slot`: the node's Remediation is the group's oldest active one, or the group has
    no active Remediation and the node would open one (the small-pool exception's one slot).
    """
    if small(config, health):
        if (state.open or exceeded(config, health)) and not holds_slot:
            return Reason.CircuitOpen
        return None
    if state.open:
        return Reason.CircuitCooldown if state.healthy_since is not None else Reason.CircuitOpen
    return None
