"""The fleet's informer against the emulator: watch resume without loss, relist after 410."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import resources
from remediation_emulator.fleet.client import Connection, KubeClient
from remediation_emulator.fleet.informer import Informer
from tests.emulator.fleet.conftest import eventually


def node(name: str, colour: str = "blue") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"c": colour}}}


@pytest.fixture
async def small_history() -> AsyncIterator[ApiServer]:
    async with apiserver.serve(history_size=10) as server:
        yield server


async def run_gap(api: ApiServer, changes: int) -> tuple[Informer, list[tuple[str, bool]]]:
    """Start an informer whose next re-watch is held back 1 s while nodes change; return it
    once its cache has caught up with the store."""
    for i in range(3):
        api.store.create("nodes", node(f"n{i}"))
    async with KubeClient(Connection(api.url)) as client:
        informer = Informer(client, resources.NODES, watch_timeout=1, page_size=2)
        seen: list[tuple[str, bool]] = []
        informer.subscribe(lambda key, old, new: seen.append((key, new is not None)))
        task = asyncio.create_task(informer.run())
        try:
            await eventually(
                lambda: api.request_log.matching(verb="watch", resource="nodes"),
                what="the first watch to open",
            )
            api.faults.delay(1.0, verb="watch", resource="nodes", times=1)
            await asyncio.sleep(1.3)  # the first watch has ended (timeoutSeconds=1): a gap
            for i in range(changes):
                api.store.patch("nodes", "n1", {"metadata": {"labels": {"c": f"v{i}"}}})
            api.store.raw.delete("nodes", "n2")
            api.store.create("nodes", node("n3"))

            def caught_up() -> bool:
                cache = informer.cache
                return (
                    set(cache) == {"n0", "n1", "n3"}
                    and cache["n1"]["metadata"]["labels"]["c"] == f"v{changes - 1}"
                )

            await eventually(caught_up, within=6.0, what="the cache to catch up")
        finally:
            task.cancel()
        return informer, seen


async def test_a_resumed_watch_delivers_every_change_made_meanwhile(api: ApiServer) -> None:
    informer, seen = await run_gap(api, changes=3)
    assert informer.relists == 1  # resumed from its resourceVersion, no relist needed
    assert [k for k, present in seen if k == "n1" and present][-3:] == ["n1"] * 3
    assert ("n2", False) in seen


async def test_a_too_old_resource_version_leads_to_a_relist_that_reports_deletions(
    small_history: ApiServer,
) -> None:
    informer, seen = await run_gap(small_history, changes=25)
    assert informer.relists == 2  # 410 Gone: the history no longer reached back far enough
    assert ("n2", False) in seen
    assert ("n3", True) in seen
