"""Fixtures for the tests of the operator's fast paths (node watch, watched-state reads).

Real: the API emulator over HTTP (list pagination, watch resume, 410 Gone after compaction,
409 on a stale resourceVersion) and the operator's own Kubernetes client. Faked: nothing; the
tests drive the watched-state caches by hand where the runtime would feed them from watch
events, and poll with a deadline where an event has to travel over the network.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

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


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not true within {within} s")
        await asyncio.sleep(0.02)
