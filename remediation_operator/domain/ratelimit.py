"""The rate limit: at most `rate.max` disruptive steps started per sliding window `rate.per`.

Budgets bound how many nodes are out at once; the rate bounds how fast new disruption starts,
so a breaker that closes or a budget that frees up does not release a stampede. Only first
attempts count (a retry continues a step already counted), taken from the step records of the
policy's active and retained finished Remediations: the memory survives operator restarts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from remediation_operator.domain.policy import DISRUPTIVE, Rate
from remediation_operator.domain.remediation import RemediationState


def starts(states: Iterable[RemediationState]) -> list[datetime]:
    """When each disruptive step of these Remediations first started, oldest first."""
    return sorted(
        record.started_at
        for state in states
        for record in state.steps
        if record.attempt == 1 and record.action in DISRUPTIVE
    )


@dataclass
class Window:
    """The starts inside the sliding window; a planner adds the starts it decides as it goes."""

    rate: Rate
    started: list[datetime] = field(default_factory=list)
    """Sorted start times (older ones are ignored by `recent`)."""

    def recent(self, now: datetime) -> list[datetime]:
        cut = bisect.bisect_right(self.started, now - self.rate.per)
        return self.started[cut:]

    def has_room(self, now: datetime) -> bool:
        return len(self.recent(now)) < self.rate.max

    def room_at(self, now: datetime) -> datetime | None:
        """When the next start will be allowed (`now` if already; None if `max` is 0)."""
        if self.rate.max <= 0:
            return None
        recent = self.recent(now)
        if len(recent) < self.rate.max:
            return now
        return recent[len(recent) - self.rate.max] + self.rate.per

    def record(self, at: datetime) -> None:
        bisect.insort(self.started, at)
