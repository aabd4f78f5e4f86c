"""Fixtures for the emulated fleet's tests.

Real: the API emulator (`remediation_emulator.apiserver`) serving real HTTP on
127.0.0.1, and the fleet's controllers talking to it through aiohttp exactly as they would to a
cluster (list+watch, patches, evictions). Faked: time is short (the FAST profile: resets in
0.2 s, reboots in 0.5 s, grace periods capped at 0.2 s), and repair probabilities are forced to
1 so outcomes are deterministic. Tests read results through the emulator's store fixture or over
HTTP, and poll with a deadline rather than sleeping for a fixed time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import fleet
from remediation_emulator.fleet.client import Connection, KubeClient
from remediation_emulator.fleet.config import FAST, FleetConfig
from remediation_emulator.fleet.fleet import Fleet
from remediation_emulator.fleet.manifests import Shape

FLEET_USER = "gpu-fleet"
TEST_CONFIG: FleetConfig = FAST.with_(reset_clears=1.0, reboot_clears=1.0, heartbeat_period=0.3)
SHAPE = Shape(nodes=3, nodes_per_training_job=3)


async def eventually(
    check: Callable[[], Any] | Callable[[], Awaitable[Any]],
    *,
    within: float = 5.0,
    what: str = "condition",
) -> Any:
    """Poll `check` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {within}s")
        await asyncio.sleep(0.02)


def connection(api: ApiServer) -> Connection:
    return Connection(api.url, headers={"Authorization": f"Bearer {api.token(FLEET_USER)}"})


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with apiserver.serve() as server:
        yield server


@pytest.fixture
async def gpus(api: ApiServer) -> AsyncIterator[Fleet]:
    async with fleet.running(connection(api), shape=SHAPE, config=TEST_CONFIG, seed=1) as running:
        yield running


@pytest.fixture
async def kind_gpus(api: ApiServer) -> AsyncIterator[Fleet]:
    """The kinder `kind` agent (a repair or a clear shows healthy at once), for the tests of
    that profile's own behaviour."""
    config = TEST_CONFIG.with_(agent="kind")
    async with fleet.running(connection(api), shape=SHAPE, config=config, seed=1) as running:
        yield running


@pytest.fixture
async def admin(api: ApiServer) -> AsyncIterator[KubeClient]:
    """An HTTP client acting as a user or the operator would (logged as "admin")."""
    headers = {"Authorization": f"Bearer {api.token('admin')}"}
    async with KubeClient(Connection(api.url, headers=headers)) as client:
        yield client
