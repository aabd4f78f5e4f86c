"""The REST API over real HTTP with aiohttp: discovery, Status bodies, lists, faults, the log."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from remediation_emulator.apiserver import ApiServer
from tests.emulator.conftest import ready_node
from tests.emulator.crd_fixtures import remediation_crd

MERGE = {"Content-Type": "application/merge-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}


async def _json(resp: aiohttp.ClientResponse) -> Any:
    return json.loads(await resp.text())


async def test_discovery_documents(http: aiohttp.ClientSession) -> None:
    async with http.get("/api") as resp:
        assert (await _json(resp))["versions"] == ["v1"]
    async with http.get("/api/v1") as resp:
        resources = {r["name"]: r for r in (await _json(resp))["resources"]}
    assert resources["pods/eviction"]["group"] == "policy"
    assert resources["pods/eviction"]["kind"] == "Eviction"
    assert "nodes/status" in resources
    assert "namespaces" in resources
    assert resources["nodes"]["shortNames"] == ["no"]
    async with http.get("/apis") as resp:
        groups = {g["name"] for g in (await _json(resp))["groups"]}
    assert {"policy", "batch", "coordination.k8s.io", "apiextensions.k8s.io"} <= groups
    async with http.get("/version") as resp:
        assert (await _json(resp))["minor"] == "32"


async def test_crd_posted_over_http_is_discoverable(http: aiohttp.ClientSession) -> None:
    async with http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=remediation_crd()
    ) as resp:
        assert resp.status == 201
    async with http.get("/apis/remediation.gpuops.io/v1alpha1") as resp:
        resources = {r["name"]: r for r in (await _json(resp))["resources"]}
    assert resources["remediations"]["namespaced"] is False
    assert resources["remediations"]["shortNames"] == ["rem"]
    assert "remediations/status" in resources
    async with http.post(
        "/apis/remediation.gpuops.io/v1alpha1/remediations",
        json={"metadata": {"name": "r1"}, "spec": {"nodeName": "n"}},
    ) as resp:
        assert resp.status == 201


async def test_not_found_status_body(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/nodes/missing") as resp:
        assert resp.status == 404
        assert await _json(resp) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'nodes "missing" not found',
            "reason": "NotFound",
            "details": {"name": "missing", "kind": "nodes"},
            "code": 404,
        }


async def test_conflict_and_invalid_status_bodies(http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/nodes", json=ready_node("a")) as resp:
        node = await _json(resp)
    async with http.patch(
        "/api/v1/nodes/a", json={"metadata": {"labels": {"x": "1"}}}, headers=MERGE
    ) as resp:
        assert resp.status == 200
    async with http.put("/api/v1/nodes/a", json=node) as resp:
        body = await _json(resp)
        assert resp.status == 409
        assert body["reason"] == "Conflict"
    async with http.post("/api/v1/nodes", json=ready_node("Bad_Name")) as resp:
        body = await _json(resp)
        assert resp.status == 422
        assert body["reason"] == "Invalid"
        assert body["details"]["causes"][0]["field"] == "metadata.name"


async def test_unsupported_field_selector_is_400(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/pods", params={"fieldSelector": "spec.bogus=1"}) as resp:
        assert resp.status == 400
        assert (await _json(resp))["message"] == "field label not supported: spec.bogus"


async def test_paginated_list_over_http(http: aiohttp.ClientSession) -> None:
    for i in range(5):
        async with http.post("/api/v1/nodes", json=ready_node(f"n{i}")) as resp:
            assert resp.status == 201
    names: list[str] = []
    params = {"limit": "2"}
    while True:
        async with http.get("/api/v1/nodes", params=params) as resp:
            body = await _json(resp)
        assert body["kind"] == "NodeList"
        assert body["metadata"]["resourceVersion"]
        names += [n["metadata"]["name"] for n in body["items"]]
        if not body["metadata"].get("continue"):
            break
        params = {"limit": "2", "continue": body["metadata"]["continue"]}
    assert names == [f"n{i}" for i in range(5)]


async def test_injected_error_changes_nothing_and_is_logged(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    rv = api.store.resource_version
    api.faults.error(500, verb="patch", resource="nodes", name="a")
    async with http.patch(
        "/api/v1/nodes/a", json={"spec": {"unschedulable": True}}, headers=STRATEGIC
    ) as resp:
        assert resp.status == 500
        assert (await _json(resp))["reason"] == "InternalError"
    assert api.store.resource_version == rv
    assert "unschedulable" not in (api.store.get("nodes", "a").get("spec") or {})
    async with http.patch(
        "/api/v1/nodes/a", json={"spec": {"unschedulable": True}}, headers=STRATEGIC
    ) as resp:
        assert resp.status == 200  # the rule fired once
    patches = api.request_log.matching(verb="patch", resource="nodes", name="a")
    assert [e.code for e in patches] == [500, 200]
    assert patches[0].user == "tester"
    assert patches[0].group == ""


async def test_injected_delay_and_rate(api: ApiServer, http: aiohttp.ClientSession) -> None:
    api.faults.error(503, resource="nodes", verb="list", times=None, rate=0.5)
    codes = []
    for _ in range(40):
        async with http.get("/api/v1/nodes") as resp:
            codes.append(resp.status)
    assert 5 < codes.count(503) < 35
    assert codes.count(200) + codes.count(503) == 40


async def test_request_log_records_rbac_attributes(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create(
        "pods",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        "default",
    )
    async with http.get("/api/v1/namespaces/default/pods/p") as resp:
        assert resp.status == 200
    async with http.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=x"}) as resp:
        assert resp.status == 200
    async with http.delete("/api/v1/namespaces/default/pods/p") as resp:
        assert resp.status == 200
    async with http.get(
        "/apis/policy/v1/poddisruptionbudgets", params={"watch": "1", "timeoutSeconds": "1"}
    ) as resp:
        await resp.read()
    seen = [(e.verb, e.group, e.resource, e.namespace, e.name, e.code) for e in api.request_log]
    assert seen == [
        ("get", "", "pods", "default", "p", 200),
        ("list", "", "pods", "", "", 200),
        ("delete", "", "pods", "default", "p", 200),
        ("watch", "policy", "poddisruptionbudgets", "", "", 200),
    ]


async def test_delete_returns_status_for_nodes_and_object_for_pods(
    http: aiohttp.ClientSession,
) -> None:
    async with http.post("/api/v1/nodes", json=ready_node("a")) as resp:
        assert resp.status == 201
    async with http.delete("/api/v1/nodes/a") as resp:
        body = await _json(resp)
        assert body["kind"] == "Status"
        assert body["status"] == "Success"
        assert body["details"]["name"] == "a"


async def test_dry_run_changes_nothing(api: ApiServer, http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/nodes", params={"dryRun": "All"}, json=ready_node("a")) as resp:
        assert resp.status == 201
    assert api.store.find("nodes", "a") is None


async def test_table_rendering_of_printer_columns(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("customresourcedefinitions", remediation_crd())
    api.store.create(
        "remediations", {"metadata": {"name": "r"}, "spec": {"nodeName": "gpu-1", "fault": "xid"}}
    )
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with http.get(
        "/apis/remediation.gpuops.io/v1alpha1/remediations", headers={"Accept": accept}
    ) as resp:
        table = await _json(resp)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Node",
        "Fault",
        "Step",
        "Phase",
        "Attempt",
        "Reason",
        "Age",
    ]
    cells = table["rows"][0]["cells"]
    assert cells[:3] == ["r", "gpu-1", "xid"]
    assert cells[3] is None
    assert cells[5] == 1
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


async def test_server_side_apply_is_refused_clearly(
    api: ApiServer, http: aiohttp.ClientSession
) -> None:
    api.store.create("nodes", ready_node("a"))
    async with http.patch(
        "/api/v1/nodes/a",
        params={"fieldManager": "me"},
        data="metadata:\n  labels: {x: y}\n",
        headers={"Content-Type": "application/apply-patch+yaml"},
    ) as resp:
        body = await _json(resp)
    assert resp.status == 415
    assert "server-side apply" in body["message"]
    assert "labels" not in api.store.get("nodes", "a")["metadata"]


async def test_lease_takeover_race_has_one_winner(http: aiohttp.ClientSession) -> None:
    """Leader election: two candidates PUT the same Lease version; exactly one wins."""
    lease = {
        "metadata": {"name": "leader", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "renewTime": "2026-11-30T12:00:00.000000Z",
        },
    }
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    async with http.post(path, json=lease) as resp:
        current = await _json(resp)
    codes = []
    for holder in ("b", "c"):
        attempt = {**current, "spec": {**current["spec"], "holderIdentity": holder}}
        async with http.put(f"{path}/leader", json=attempt) as resp:
            codes.append(resp.status)
    assert codes == [200, 409]
    async with http.get(f"{path}/leader") as resp:
        assert (await _json(resp))["spec"]["holderIdentity"] == "b"


async def test_put_status_changes_only_status(http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/nodes", json=ready_node("a")) as resp:
        node = await _json(resp)
    changed = {
        **node,
        "spec": {"unschedulable": True},
        "status": {**node["status"], "phase": "Running"},
    }
    async with http.put("/api/v1/nodes/a/status", json=changed) as resp:
        out = await _json(resp)
    assert out["status"]["phase"] == "Running"
    assert "spec" not in out or not out["spec"].get("unschedulable")


async def test_delete_collection_by_label(api: ApiServer, http: aiohttp.ClientSession) -> None:
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        api.store.create(
            "configmaps", {"metadata": {"name": name, "labels": {"team": team}}}, "default"
        )
    async with http.delete(
        "/api/v1/namespaces/default/configmaps", params={"labelSelector": "team=x"}
    ) as resp:
        assert resp.status == 200
    assert [c["metadata"]["name"] for c in api.store.list("configmaps", "default")] == ["c"]
    assert api.request_log[-1].verb == "deletecollection"
