"""Watches (resume, 410) and the Eviction API with a PodDisruptionBudget, on both servers."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.contract.conftest import Server

MINE = "contract.gpuops.io/test=true"
"""Our objects only: a real controller-manager adds its own ConfigMaps to every namespace."""


def config_map(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"contract.gpuops.io/test": "true"}},
        "data": {"v": value},
    }


def test_a_watch_resumes_after_its_resource_version_without_loss_or_repeat(
    server: Server,
) -> None:
    ns = server.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = server.ok("POST", path, config_map("watched", "0"))
    since = created["metadata"]["resourceVersion"]
    versions = []
    for value in ("1", "2"):
        current = server.ok("GET", f"{path}/watched")
        current["data"]["v"] = value
        versions.append(server.ok("PUT", f"{path}/watched", current)["metadata"]["resourceVersion"])
    server.ok("DELETE", f"{path}/watched")
    events = server.watch(path, 1, resourceVersion=since, labelSelector=MINE)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert [e["object"]["metadata"]["resourceVersion"] for e in events[:2]] == versions
    assert [e["object"]["data"]["v"] for e in events] == ["1", "2", "2"]


def test_a_watch_from_zero_starts_with_the_current_objects(server: Server) -> None:
    ns = server.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    server.ok("POST", path, config_map("a", "1"))
    server.ok("POST", path, config_map("b", "1"))
    events = server.watch(path, 1, resourceVersion="0", labelSelector=MINE)
    assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in events) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_a_bookmark_moves_a_watch_past_events_its_selector_filtered_out(server: Server) -> None:
    """kopf, the node watch and the fleet ask for bookmarks: a watch whose selector skipped
    newer objects still learns the newer resourceVersion (a real server sends it before the
    timeout, and only when the resourceVersion moved past what the watch delivered)."""
    if server.compact is None:
        pytest.skip(
            "real server: its bookmarks (about once a minute, or 2 s before the timeout, when "
            "the watch lags its cache) came in only some runs of a 10 s watch; the behaviour "
            "seen on v1.36.2 is written down in docs/emulator.md"
        )
    ns = server.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    before = server.ok("POST", path, config_map("mine", "1"))["metadata"]["resourceVersion"]
    other = server.ok("POST", path, {"metadata": {"name": "not-mine"}, "data": {}})
    events = server.watch(
        path, 2, resourceVersion=before, labelSelector=MINE, allowWatchBookmarks="true"
    )
    assert events
    assert {e["type"] for e in events} == {"BOOKMARK"}
    for event in events:
        assert event["object"]["kind"] == "ConfigMap"
        assert event["object"]["apiVersion"] == "v1"
        version = int(event["object"]["metadata"]["resourceVersion"])
        assert version >= int(other["metadata"]["resourceVersion"])


def test_a_watch_older_than_the_history_gets_410_expired_as_an_event(server: Server) -> None:
    if server.compact is None:
        pytest.skip(
            "real server: its watch cache window cannot be forced from outside (a 1.36 server "
            "serves old resourceVersions from cache snapshots); the emulator half checks the "
            "410 event the real server documents"
        )
    ns = server.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    old = server.ok("POST", path, config_map("a", "1"))["metadata"]["resourceVersion"]
    server.ok("POST", path, config_map("b", "1"))
    server.compact()
    events = server.watch(path, 1, resourceVersion=old, labelSelector=MINE)
    assert [e["type"] for e in events] == ["ERROR"]
    status = events[0]["object"]
    assert (status["code"], status["reason"]) == (410, "Expired")


def running_pod(server: Server, ns: str, name: str) -> None:
    """A pod bound to a node, Running and Ready, as a kubelet would report it."""
    server.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": name, "labels": {"app": "train"}},
            "spec": {
                "nodeName": "contract-gpu-1",
                "containers": [{"name": "main", "image": "busybox"}],
            },
        },
    )
    server.ok(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
        content_type="application/strategic-merge-patch+json",
    )


def wait_for_budget(server: Server, ns: str, healthy: int) -> dict[str, Any]:
    """The PDB's status as the disruption controller computes it (asynchronous on a real
    server), once it has seen `healthy` pods."""
    deadline = time.monotonic() + 60
    while True:
        pdb = server.ok("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/train")
        status = pdb.get("status") or {}
        if (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("currentHealthy") == healthy
        ):
            return pdb
        assert time.monotonic() < deadline, f"PDB status not computed: {status}"
        time.sleep(0.2)


def evict(server: Server, ns: str, name: str) -> Any:
    return server.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        },
    )


def test_eviction_is_429_while_the_budget_forbids_it_and_201_once_it_allows(
    server: Server,
) -> None:
    ns = server.namespace()
    running_pod(server, ns, "train-0")
    server.ok(
        "POST",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {
            "metadata": {"name": "train"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
        },
    )
    assert wait_for_budget(server, ns, healthy=1)["status"]["disruptionsAllowed"] == 0
    refused = evict(server, ns, "train-0")
    assert (refused.code, refused.reason) == (429, "TooManyRequests")
    assert refused.body["message"] == (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    (cause,) = refused.body["details"]["causes"]
    assert cause["reason"] == "DisruptionBudget"
    assert (
        cause["message"] == "The disruption budget train needs 1 healthy pods and has 1 currently"
    )
    pod = server.ok("GET", f"/api/v1/namespaces/{ns}/pods/train-0")
    assert "deletionTimestamp" not in pod["metadata"]

    running_pod(server, ns, "train-1")
    assert wait_for_budget(server, ns, healthy=2)["status"]["disruptionsAllowed"] == 1
    allowed = evict(server, ns, "train-0")
    assert allowed.code == 201
    assert allowed.body["status"] == "Success"
    evicted = server.ok("GET", f"/api/v1/namespaces/{ns}/pods/train-0")
    assert evicted["metadata"]["deletionTimestamp"]  # bound to a node: terminating gracefully
    missing = evict(server, ns, "nobody")
    assert (missing.code, missing.reason) == (404, "NotFound")
