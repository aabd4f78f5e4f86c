"""Verbs, errors and patches, as the operator and the fleet send them, on both servers."""

from __future__ import annotations

from typing import Any

from tests.contract.conftest import GROUP_VERSION, Server, unique

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"


def lease(name: str, holder: str = "replica-a") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def ready_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"contract.gpuops.io/test": "true"}},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-12-01T10:00:00Z",
                    "lastTransitionTime": "2026-12-01T10:00:00Z",
                }
            ]
        },
    }


def test_leader_election_verbs_and_their_errors(server: Server) -> None:
    """What k8s/leader.py does with a Lease: create, get, update with a resourceVersion."""
    ns = server.namespace()
    path = LEASES.format(ns=ns)
    created = server.request("POST", path, lease("op"))
    assert created.code == 201
    assert created.body["spec"]["holderIdentity"] == "replica-a"
    again = server.request("POST", path, lease("op"))
    assert (again.code, again.reason) == (409, "AlreadyExists")
    assert again.body["details"]["name"] == "op"
    got = server.ok("GET", f"{path}/op")
    stale = got["metadata"]["resourceVersion"]
    got["spec"]["holderIdentity"] = "replica-b"
    updated = server.request("PUT", f"{path}/op", got)
    assert updated.code == 200
    assert updated.body["metadata"]["resourceVersion"] != stale
    got["metadata"]["resourceVersion"] = stale
    conflict = server.request("PUT", f"{path}/op", got)
    assert (conflict.code, conflict.reason) == (409, "Conflict")
    missing = server.request("GET", f"{path}/nobody")
    assert (missing.code, missing.reason) == (404, "NotFound")
    assert missing.body["details"]["name"] == "nobody"
    assert server.request("DELETE", f"{path}/op").code == 200
    assert server.request("GET", f"{path}/op").code == 404


def test_a_namespaced_object_in_a_missing_namespace_is_404(server: Server) -> None:
    """Issue 13: the operator's Lease in a namespace nobody created (no namespace on demand)."""
    missing = unique("absent")
    answer = server.request("POST", LEASES.format(ns=missing), lease("op"))
    assert (answer.code, answer.reason) == (404, "NotFound")
    assert answer.body["details"]["kind"] == "namespaces"
    assert answer.body["details"]["name"] == missing
    assert server.request("GET", f"/api/v1/namespaces/{missing}").code == 404


def test_node_conditions_by_strategic_merge_and_cordon_by_merge_patch(server: Server) -> None:
    """The agent's condition patch (merge key `type`) and the operator's cordon."""
    name = unique("node")
    created = server.ok("POST", "/api/v1/nodes", ready_node(name))
    assert [c["type"] for c in created["status"]["conditions"]] == ["Ready"]
    gpu = {
        "type": "GPUHealthy",
        "status": "False",
        "reason": "NvidiaXID79Error",
        "message": "GPU has fallen off the bus",
        "lastHeartbeatTime": "2026-12-01T10:01:00Z",
        "lastTransitionTime": "2026-12-01T10:01:00Z",
    }
    patched = server.ok(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": {"conditions": [gpu]}},
        content_type="application/strategic-merge-patch+json",
    )
    by_type = {c["type"]: c for c in patched["status"]["conditions"]}
    assert set(by_type) == {"Ready", "GPUHealthy"}
    assert by_type["GPUHealthy"]["reason"] == "NvidiaXID79Error"
    cordoned = server.ok(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )
    assert cordoned["spec"]["unschedulable"] is True
    assert {c["type"] for c in cordoned["status"]["conditions"]} == {"Ready", "GPUHealthy"}
    # A status patch through the main resource changes nothing in status.
    ignored = server.ok(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"status": {"conditions": [{**gpu, "status": "True"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert {c["type"]: c["status"] for c in ignored["status"]["conditions"]}["GPUHealthy"] == (
        "False"
    )
    server.ok("DELETE", f"/api/v1/nodes/{name}")


def test_json_patch_test_failure_changes_nothing(server: Server) -> None:
    name = unique("node")
    server.ok("POST", "/api/v1/nodes", ready_node(name))
    failed = server.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        [
            {"op": "test", "path": "/spec/unschedulable", "value": True},
            {"op": "add", "path": "/metadata/labels/x", "value": "y"},
        ],
        content_type="application/json-patch+json",
    )
    assert failed.code == 422
    assert "x" not in server.ok("GET", f"/api/v1/nodes/{name}")["metadata"]["labels"]
    server.ok("DELETE", f"/api/v1/nodes/{name}")


def remediation(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "remediation.gpuops.io/v1alpha1",
        "kind": "Remediation",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "gpu-1", "policyName": "gpu"},
        "status": {"phase": "Running"},
    }


STATUS = {
    "phase": "Running",
    "reason": "StepStarted",
    "message": "Cordon started.",
    "fault": "gpu-xid",
    "startedAt": "2026-12-01T10:00:00Z",
    "step": "Cordon",
    "attempt": 1,
}


def test_custom_resource_status_is_written_only_through_its_subresource(server: Server) -> None:
    """Why a new Remediation has no status for a moment: create drops it (status subresource),
    so records.create_remediation writes it with a second request, a PUT to /status."""
    name = unique("rem")
    path = f"{GROUP_VERSION}/remediations"
    created = server.ok("POST", path, remediation(name))
    assert "status" not in created
    assert created["metadata"]["generation"] == 1
    written = server.ok("PUT", f"{path}/{name}/status", {**created, "status": STATUS})
    assert written["status"]["phase"] == "Running"
    assert written["metadata"]["generation"] == 1
    stale = {**created, "status": {**STATUS, "attempt": 2}}
    conflict = server.request("PUT", f"{path}/{name}/status", stale)
    assert (conflict.code, conflict.reason) == (409, "Conflict")
    strategic = server.request(
        "PATCH",
        f"{path}/{name}",
        {"metadata": {"labels": {"a": "b"}}},
        content_type="application/strategic-merge-patch+json",
    )
    assert (strategic.code, strategic.reason) == (415, "UnsupportedMediaType")
    server.ok("DELETE", f"{path}/{name}")


def bound_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"contract.gpuops.io/test": "true"}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }


def test_drain_reads_and_the_kubelets_force_delete_with_a_uid_precondition(
    server: Server,
) -> None:
    """Drain lists a node's pods by field selector in pages; the fleet's kubelet finishes a
    terminating pod with gracePeriodSeconds=0 and a uid precondition."""
    ns = server.namespace()
    node = unique("gpu")
    for i in range(3):
        server.ok("POST", f"/api/v1/namespaces/{ns}/pods", bound_pod(f"p{i}", node))
    server.ok("POST", f"/api/v1/namespaces/{ns}/pods", bound_pod("elsewhere", unique("gpu")))
    selector = {"fieldSelector": f"spec.nodeName={node}", "limit": "2"}
    page = server.ok("GET", f"/api/v1/namespaces/{ns}/pods", params=selector)
    assert [p["metadata"]["name"] for p in page["items"]] == ["p0", "p1"]
    token = page["metadata"]["continue"]
    rest = server.ok("GET", f"/api/v1/namespaces/{ns}/pods", params={**selector, "continue": token})
    assert [p["metadata"]["name"] for p in rest["items"]] == ["p2"]
    assert not rest["metadata"].get("continue")
    bad = server.request(
        "GET", f"/api/v1/namespaces/{ns}/pods", params={"fieldSelector": "spec.bogus=x"}
    )
    assert (bad.code, bad.reason) == (400, "BadRequest")

    path = f"/api/v1/namespaces/{ns}/pods/p0"
    terminating = server.ok("DELETE", path)  # bound to a node: graceful
    assert terminating["metadata"]["deletionTimestamp"]
    uid = terminating["metadata"]["uid"]
    wrong = server.request(
        "DELETE", path, {"gracePeriodSeconds": 0, "preconditions": {"uid": "not-" + uid}}
    )
    assert (wrong.code, wrong.reason) == (409, "Conflict")
    server.ok("DELETE", path, {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
    assert server.request("GET", path).code == 404


def test_events_about_a_node_and_their_field_selectors(server: Server) -> None:
    """The operator posts core/v1 Events about Nodes in `default` and lists them back."""
    node = unique("gpu")
    event = {
        "metadata": {"generateName": f"{node}."},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": "FaultDetected",
        "message": "GPUHealthy is False.",
        "type": "Warning",
        "source": {"component": "remediation-operator"},
        "firstTimestamp": "2026-12-01T10:00:00Z",
        "lastTimestamp": "2026-12-01T10:00:00Z",
        "count": 1,
    }
    created = server.request("POST", "/api/v1/namespaces/default/events", event)
    assert created.code == 201
    assert created.body["metadata"]["name"].startswith(f"{node}.")
    listed = server.ok(
        "GET",
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": f"involvedObject.name={node},reason=FaultDetected"},
    )
    assert [e["message"] for e in listed["items"]] == ["GPUHealthy is False."]


def test_a_job_as_the_operator_creates_it(server: Server) -> None:
    """GPU reset and reboot Jobs: defaulted by the server; restartPolicy must be Never or
    OnFailure (an omitted one defaults to Always and is refused)."""
    ns = server.namespace()
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gpu-reset"},
        "spec": {
            "template": {
                "spec": {
                    "nodeName": "gpu-1",
                    "restartPolicy": "Never",
                    "containers": [{"name": "reset", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }
    created = server.ok("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    assert created["spec"]["backoffLimit"] == 6
    assert created["spec"]["template"]["metadata"]["labels"]["job-name"] == "gpu-reset"
    del job["spec"]["template"]["spec"]["restartPolicy"]
    job["metadata"]["name"] = "no-restart-policy"
    refused = server.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    assert (refused.code, refused.reason) == (422, "Invalid")
    assert "spec.template.spec.restartPolicy" in refused.causes


def test_finalizers_hold_a_deleted_object_until_removed(server: Server) -> None:
    """Karpenter's NodeClaim and Node: delete marks the object; no finalizer may be added
    afterwards; removing the last one deletes it."""
    name = unique("rem")
    path = f"{GROUP_VERSION}/remediations/{name}"
    body = remediation(name)
    body["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    server.ok("POST", f"{GROUP_VERSION}/remediations", body)
    marked = server.ok("DELETE", path)
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == ["karpenter.sh/termination"]
    added = server.request(
        "PATCH",
        path,
        {"metadata": {"finalizers": ["karpenter.sh/termination", "example.com/late"]}},
        content_type="application/merge-patch+json",
    )
    assert (added.code, added.reason) == (422, "Invalid")
    server.ok(
        "PATCH",
        path,
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert server.request("GET", path).code == 404
