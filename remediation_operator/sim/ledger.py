"""Time integrals of the fleet's state: node-time available, faulty, blocked, in flight, lost.

Availability is "the fraction of node-time that was schedulable and healthy", which is an
integral over a piecewise-constant count; keeping running counts and integrating them between
events costs O(1) per event instead of a scan of every node. Node-time lost is kept the same
way per (fault class, stage) key (`sim/losses.py`), and so is the time breakers stay open.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

LossKey = tuple[str, str]
"""(fault class, stage) of a node slot that is not schedulable-and-healthy."""


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
        self.lost: Counter[LossKey] = Counter()
        self.lost_seconds: dict[LossKey, float] = {}
        self.breakers_open = 0
        self.breaker_open_seconds = 0.0

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
        for key, count in self.lost.items():
            if count:
                self.lost_seconds[key] = self.lost_seconds.get(key, 0.0) + count * span
        self.breaker_open_seconds += self.breakers_open * span
        self._at = at

    def move_lost(self, old: LossKey | None, new: LossKey | None) -> None:
        """One slot changes from being lost under `old` to `new` (None: not lost)."""
        if old is not None:
            self.lost[old] -= 1
            if not self.lost[old]:
                del self.lost[old]  # keeps `advance` to the keys in use
        if new is not None:
            self.lost[new] += 1

    def set_in_flight(self, count: int) -> None:
        self.in_flight = count
        self.peak_in_flight = max(self.peak_in_flight, count)

    def sample(self, at: float) -> Sample:
        return Sample(at / 3600.0, self.available / self.slots, self.in_flight, self.faulty)
