"""Fixtures for the API emulator's tests.

Real: the emulator's HTTP server on 127.0.0.1 (aiohttp), the official `kubernetes` client and
the `kubectl` binary talking to it over HTTP. Faked: nothing inside the emulator; the kubelet
(deleting pods once they terminate) is played by small helpers in the tests that need it,
and a manual clock replaces wall time where a test checks timestamps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from remediation_emulator import apiserver
from remediation_emulator.eviction import Disruption
from remediation_emulator.store import Store


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> Store:
    """A store with the disruption controller attached, as the server runs it."""
    s = Store(clock=clock, history_size=50)
    Disruption(s)
    return s


@pytest.fixture
async def api() -> AsyncIterator[apiserver.ApiServer]:
    async with apiserver.serve(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
async def http(api: apiserver.ApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {api.token('tester')}"}
    async with aiohttp.ClientSession(base_url=api.url, headers=headers) as session:
        yield session


@pytest.fixture
def threaded() -> Iterator[apiserver.ThreadedApiServer]:
    server = apiserver.run_in_thread()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Kubectl:
    kubeconfig: Path
    home: Path

    def __call__(
        self, *args: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home)}
        return subprocess.run(
            ["kubectl", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def kubectl(threaded: apiserver.ThreadedApiServer, tmp_path: Path) -> Kubectl:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (Debian package `kubectl`); kubectl tests skipped")
    config = threaded.write_kubeconfig(tmp_path / "kubeconfig")
    return Kubectl(config, tmp_path / "home")


def ready_node(name: str, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {
                "machineID": "m",
                "systemUUID": "s",
                "bootID": "boot-1",
                "kernelVersion": "6.1",
                "osImage": "Linux",
                "containerRuntimeVersion": "containerd://1.7",
                "kubeletVersion": "v1.32.0",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def pod(name: str, node: str = "", namespace: str = "default", **labels: str) -> dict[str, object]:
    """A ReplicaSet-owned pod (kubectl drain refuses pods without a controller)."""
    spec: dict[str, object] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "workload",
                    "uid": "rs-uid",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


RUNNING_READY = {
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0}],
    }
}

Factory = Callable[..., dict[str, object]]
