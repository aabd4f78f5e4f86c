"""Watches over HTTP: resume without loss or duplicates, 410 Gone, bookmarks, selectors, drops."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.store import Store
from tests.emulator.conftest import ready_node


async def _events(
    http: aiohttp.ClientSession,
    path: str,
    params: dict[str, str],
    count: int | None = None,
    deadline: float = 5.0,
) -> list[dict[str, Any]]:
    """Read watch events until `count` arrived or the server ends the stream."""
    out: list[dict[str, Any]] = []
    async with (
        asyncio.timeout(deadline),
        http.get(path, params={"watch": "true", **params}) as resp,
    ):
        assert resp.status == 200
        async for line in resp.content:
            if line.strip():
                out.append(json.loads(line))
                if count is not None and len(out) >= count:
                    break
    return out


def _summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


async def test_watch_from_zero_lists_then_streams(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    reader = asyncio.create_task(_events(http, "/api/v1/nodes", {"resourceVersion": "0"}, count=3))
    await asyncio.sleep(0.05)
    api.store.patch("nodes", "a", {"spec": {"unschedulable": True}})
    api.store.delete("nodes", "a")
    events = await reader
    assert _summary(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 3


async def test_resume_from_resource_version_loses_and_repeats_nothing(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    for i in range(3):
        api.store.create("nodes", ready_node(f"n{i}"))
    first = await _events(http, "/api/v1/nodes", {"resourceVersion": "0", "timeoutSeconds": "1"})
    last_rv = max(e["object"]["metadata"]["resourceVersion"] for e in first)
    # Changes while no watch is open: the resumed watch must deliver exactly these, in order.
    api.store.patch("nodes", "n1", {"metadata": {"labels": {"x": "1"}}})
    api.store.create("nodes", ready_node("n3"))
    api.store.delete("nodes", "n0")
    resumed = await _events(http, "/api/v1/nodes", {"resourceVersion": str(last_rv)}, count=3)
    assert _summary(resumed) == [("MODIFIED", "n1"), ("ADDED", "n3"), ("DELETED", "n0")]
    assert all(int(e["object"]["metadata"]["resourceVersion"]) > int(last_rv) for e in resumed)


async def test_too_old_resource_version_is_410_error_event(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    node = api.store.create("nodes", ready_node("a"))
    api.store.patch("nodes", "a", {"spec": {"unschedulable": True}})
    api.store.compact()
    events = await _events(
        http, "/api/v1/nodes", {"resourceVersion": node["metadata"]["resourceVersion"]}
    )
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith("too old resource version")


async def test_history_ring_overflow_gives_410() -> None:
    from remediation_emulator import apiserver

    async with apiserver.serve(history_size=5) as api:
        start = api.store.create("nodes", ready_node("a"))["metadata"]["resourceVersion"]
        for i in range(10):
            api.store.patch("nodes", "a", {"metadata": {"labels": {"i": str(i)}}})
        async with aiohttp.ClientSession(base_url=api.url) as http:
            events = await _events(http, "/api/v1/nodes", {"resourceVersion": start})
        assert events[0]["object"]["code"] == 410


async def test_bookmarks_carry_current_resource_version(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    rv = str(api.store.resource_version)
    events = await _events(
        http,
        "/api/v1/nodes",
        {"resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "1"},
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, "bookmarks were asked for"
    assert all(b["object"]["metadata"]["resourceVersion"] == rv for b in bookmarks)
    assert bookmarks[0]["object"]["kind"] == "Node"


async def test_timeout_seconds_ends_the_stream(api: ApiServer, http: aiohttp.ClientSession) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await _events(
        http,
        "/api/v1/nodes",
        {"resourceVersion": str(api.store.resource_version), "timeoutSeconds": "1"},
    )
    assert events == []
    assert 0.9 < loop.time() - started < 3


async def test_label_selector_watch_sees_objects_enter_and_leave(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    rv = str(api.store.resource_version)
    reader = asyncio.create_task(
        _events(
            http, "/api/v1/nodes", {"resourceVersion": rv, "labelSelector": "bad=true"}, count=2
        )
    )
    await asyncio.sleep(0.05)
    api.store.create("nodes", ready_node("other"))  # never matches: not delivered
    api.store.patch("nodes", "a", {"metadata": {"labels": {"bad": "true"}}})
    api.store.patch("nodes", "a", {"metadata": {"labels": {"bad": None}}})
    assert _summary(await reader) == [("ADDED", "a"), ("DELETED", "a")]


async def test_single_object_watch_by_field_selector(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    api.store.create("nodes", ready_node("b"))
    reader = asyncio.create_task(
        _events(http, "/api/v1/nodes", {"fieldSelector": "metadata.name=b"}, count=2)
    )
    await asyncio.sleep(0.05)
    api.store.patch("nodes", "a", {"spec": {"unschedulable": True}})
    api.store.patch("nodes", "b", {"spec": {"unschedulable": True}})
    assert _summary(await reader) == [("ADDED", "b"), ("MODIFIED", "b")]


async def test_injected_watch_drop_ends_the_stream_early(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    for i in range(5):
        api.store.create("nodes", ready_node(f"n{i}"))
    api.faults.drop_watch(resource="nodes", after_events=2)
    dropped = await _events(http, "/api/v1/nodes", {"resourceVersion": "0"})
    assert len(dropped) == 2
    full = await _events(http, "/api/v1/nodes", {"resourceVersion": "0"}, count=5)
    assert len(full) == 5


async def test_drop_watches_closes_open_streams(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    reader = asyncio.create_task(_events(http, "/api/v1/nodes", {"resourceVersion": "0"}))
    await asyncio.sleep(0.05)
    assert api.store.drop_watches("nodes") == 1
    assert await reader == []


async def test_send_initial_events_ends_with_a_marked_bookmark(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    api.store.create("nodes", ready_node("b"))
    events = await _events(
        http,
        "/api/v1/nodes",
        {
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
        },
        count=3,
    )
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_single_object_watches_only_see_their_object(store: Store) -> None:
    for name in ("a", "b"):
        store.create("nodes", ready_node(name))
    rv = str(store.rv)
    watch_a = store.watch("nodes", field_selector="metadata.name=a", resource_version=rv)
    watch_all = store.watch("nodes", resource_version=rv)
    store.patch("nodes", "b", {"spec": {"unschedulable": True}})
    store.patch("nodes", "a", {"spec": {"unschedulable": True}})
    assert watch_a.queue.qsize() == 1
    assert watch_all.queue.qsize() == 2
    store.unwatch("nodes", watch_a)
    store.patch("nodes", "a", {"spec": {"unschedulable": False}})
    assert watch_a.queue.qsize() == 1
