"""Time integrals of the fleet's state: node-time available, faulty, blocked, in flight.

Availability is "the fraction of node-time that was schedulable and healthy", which is an
integral over a piecewise-constant count; keeping running counts and integrating them between
events costs O(1) per event instead of a scan of every node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One point of the availability series (for `--plot` and `--timeline`)."""

    hours: float
    available: float
    """Fraction of slots schedulable and healthy at that moment."""
    in_flight: int
    """Nodes in a disruptive step (drain, reset, reboot, replace) at that moment."""
    faulty: int
    """Slots with a fault present (seen or not)."""


class Ledger:
    """Running counts and their integrals over simulated time (seconds)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.available = 0
        self.schedulable_faulty = 0
        self.faulty = 0
        self.in_flight = 0
        self.blocked: Mapping[str, int] = {}
        self._at = 0.0
        self.available_seconds = 0.0
        self.schedulable_faulty_seconds = 0.0
        self.blocked_seconds: dict[str, float] = {}
        self.peak_in_flight = 0

    def advance(self, at: float) -> None:
        """Integrate the current counts from the last event up to `at`."""
        span = at - self._at
        if span <= 0:
            return
        self.available_seconds += self.available * span
        self.schedulable_faulty_seconds += self.schedulable_faulty * span
        for reason, count in self.blocked.items():
            if count:
                self.blocked_seconds[reason] = self.blocked_seconds.get(reason, 0.0) + count * span
        self._at = at

    def set_in_flight(self, count: int) -> None:
        self.in_flight = count
        self.peak_in_flight = max(self.peak_in_flight, count)

    def sample(self, at: float) -> Sample:
        return Sample(at / 3600.0, self.available / self.slots, self.in_flight, self.faulty)
