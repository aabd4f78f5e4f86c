"""Nodes are watched without kopf: every change arrives once, and a broken watch recovers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_operator.handlers import node_watch
from remediation_operator.handlers.node_watch import NodeWatch
from remediation_operator.k8s.client import Client
from tests.performance.conftest import eventually


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str | None, str]] = []

    def __call__(self, kind: str | None, body: Mapping[str, Any]) -> None:
        self.events.append((kind, body["metadata"]["name"]))


@pytest.fixture
async def watching(client: Client) -> AsyncIterator[tuple[NodeWatch, Seen]]:
    seen = Seen()
    watch = NodeWatch(client, seen)
    task = asyncio.create_task(watch.run())
    yield watch, seen
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_lists_in_pages_then_streams_changes(
    api: ApiServer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_watch, "PAGE", 2)
    for i in range(5):
        api.store.create("nodes", node(f"n{i}"))
    seen = Seen()
    watch = NodeWatch(client, seen)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.listed.wait(), 10)
        assert sorted(seen.events) == [("ADDED", f"n{i}") for i in range(5)]
        lists = [e for e in api.request_log if e.resource == "nodes" and e.verb == "list"]
        assert len(lists) == 3  # 5 nodes in pages of 2
        api.store.patch("nodes", "n1", {"metadata": {"labels": {"a": "b"}}})
        api.store.delete("nodes", "n2")
        await eventually(lambda: ("DELETED", "n2") in seen.events)
        assert seen.events[5:] == [("MODIFIED", "n1"), ("DELETED", "n2")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_watch_too_old_to_resume_lists_again_and_reports_what_vanished(
    api: ApiServer, watching: tuple[NodeWatch, Seen]
) -> None:
    _, seen = watching
    api.store.create("nodes", node("stays"))
    api.store.create("nodes", node("goes"))
    await eventually(lambda: len(seen.events) == 2)
    # While the watch is down (no await in between): one node goes, one comes, and history is
    # compacted, so the resume from the last version answers 410 Gone, as after an apiserver
    # restart.
    api.store.drop_watches("nodes")
    api.store.delete("nodes", "goes")
    api.store.create("nodes", node("new"))
    api.store.compact()
    await eventually(lambda: ("DELETED", "goes") in seen.events and ("ADDED", "new") in seen.events)
    assert ("ADDED", "stays") in seen.events[2:]  # re-listed
    assert len([e for e in api.request_log if e.resource == "nodes" and e.verb == "list"]) == 2
    api.store.patch("nodes", "new", {"metadata": {"labels": {"x": "y"}}})
    await eventually(lambda: seen.events[-1] == ("MODIFIED", "new"))


async def test_a_watch_the_server_ends_resumes_without_loss_or_repeat(
    api: ApiServer, watching: tuple[NodeWatch, Seen]
) -> None:
    _, seen = watching
    api.store.create("nodes", node("a"))
    await eventually(lambda: seen.events == [("ADDED", "a")])
    api.store.drop_watches("nodes")
    api.store.patch("nodes", "a", {"metadata": {"labels": {"x": "1"}}})
    api.store.patch("nodes", "a", {"metadata": {"labels": {"x": "2"}}})
    await eventually(lambda: len(seen.events) >= 3)
    await asyncio.sleep(0)  # nothing else is in flight
    assert seen.events == [("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a")]
