"""Fixtures for the tests of what left the reconcile path: queued Events, coalesced status.

Real: the API emulator over HTTP (Events, the policy status subresource, 409 on a stale
resourceVersion, injected 5xx/403 answers, its request log to count PUTs), the operator's own
Kubernetes client, `EventRecorder`, `EventQueue`, `CoalescedWrites` and `KubernetesRecords`.
Faked: time. The status flusher runs on a manual clock and tests call `tick()`/`flush()` by
hand; the Event poster's backoff sleeps are recorded, not slept; waiting for the poster is an
`await drain()`, never a sleep.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.emulated_api import api, client

__all__ = ["api", "client"]


class ManualClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


class RecordedLog:
    """A structlog-shaped logger that keeps (level, event, fields) for assertions."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def _keep(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            self.lines.append((level, event, fields))

        return log

    def __getattr__(self, level: str) -> Any:
        return self._keep(level)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [fields for _, event, fields in self.lines if event == name]


@pytest.fixture
def log() -> RecordedLog:
    return RecordedLog()
