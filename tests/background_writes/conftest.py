"""Fixtures for the tests of what left the reconcile path: queued Events, coalesced status.

Real: the API emulator over HTTP (Events, the policy status subresource, 409 on a stale
resourceVersion, injected 5xx/403 answers, its request log to count PUTs), the operator's own
Kubernetes client, `EventRecorder`, `EventQueue`, `CoalescedWrites` and `KubernetesRecords`.
Faked: time. The status flusher runs on a manual clock and tests call `tick()`/`flush()` by
hand; the Event poster's backoff sleeps are recorded, not slept; waiting for the poster is an
`await drain()`, never a sleep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_operator.emulator import apiserver
from remediation_operator.emulator.apiserver import ApiServer
from remediation_operator.k8s.client import Client

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with apiserver.serve() as server:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            server.store.create("customresourcedefinitions", yaml.safe_load(crd.read_text()))
        yield server


@pytest.fixture
async def client(api: ApiServer, tmp_path: Path) -> AsyncIterator[Client]:
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user="operator")
    connected = await Client.from_environment(str(config))
    yield connected
    await connected.close()


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
