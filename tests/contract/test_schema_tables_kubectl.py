"""CRD validation, server-side tables, OpenAPI for `kubectl explain`, protobuf, kubectl itself."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import threading
import time
from typing import Any

import pytest

from tests.contract.conftest import GROUP_VERSION, JSON, PROTOBUF, TABLE, Server, unique
from tests.contract.test_objects import STATUS, remediation

POLICIES = f"{GROUP_VERSION}/remediationpolicies"


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "remediation.gpuops.io/v1alpha1",
        "kind": "RemediationPolicy",
        "metadata": {"name": name},
        "spec": {
            "faults": [
                {
                    "name": "gpu-xid",
                    "match": [{"type": "GPUHealthy", "status": "False"}],
                    "ladder": [{"action": "Cordon"}],
                    "onExhausted": "Hold",
                }
            ],
            **spec,
        },
    }


def test_schema_errors_are_422_with_one_cause_per_field(server: Server) -> None:
    name = unique("bad")
    answer = server.request(
        "POST",
        POLICIES,
        policy(
            name,
            mode="Sometimes",
            budgets=[{"nodes": -1}, {"nodes": "abc"}],
            circuitBreaker={"maxUnhealthy": "150%"},
        ),
    )
    assert (answer.code, answer.reason) == (422, "Invalid")
    assert answer.body["details"]["kind"] == "RemediationPolicy"
    assert answer.body["details"]["name"] == name
    assert answer.causes == {
        "<nil>",  # "some validation rules were not checked": CEL rules skipped
        "spec.mode",
        "spec.budgets[0].nodes",
        "spec.budgets[1].nodes",
        "spec.circuitBreaker.maxUnhealthy",
    }
    assert server.request("GET", f"{POLICIES}/{name}").code == 404


def test_int_or_string_accepts_both_forms_within_its_pattern_and_minimum(server: Server) -> None:
    name = unique("good")
    created = server.ok(
        "POST",
        POLICIES,
        policy(name, budgets=[{"nodes": 2}, {"nodes": "10%"}], circuitBreaker={"maxUnhealthy": 3}),
    )
    assert [b["nodes"] for b in created["spec"]["budgets"]] == [2, "10%"]
    server.ok("DELETE", f"{POLICIES}/{name}")


def test_strict_field_validation_names_the_unknown_field(server: Server) -> None:
    name = unique("strict")
    answer = server.request(
        "POST", POLICIES, policy(name, bogus=1), params={"fieldValidation": "Strict"}
    )
    assert (answer.code, answer.reason) == (400, "BadRequest")
    assert 'unknown field "spec.bogus"' in answer.body["message"]
    pruned = server.ok("POST", POLICIES, policy(name, bogus=1))  # without Strict: pruned
    assert "bogus" not in pruned["spec"]
    server.ok("DELETE", f"{POLICIES}/{name}")


def test_server_side_table_of_remediations_has_the_printer_columns(server: Server) -> None:
    name = unique("rem")
    path = f"{GROUP_VERSION}/remediations"
    created = server.ok("POST", path, remediation(name))
    server.ok("PUT", f"{path}/{name}/status", {**created, "status": STATUS})
    table = server.ok("GET", f"{path}/{name}", accept=TABLE)
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    columns = [c["name"] for c in table["columnDefinitions"]]
    types = {c["name"]: c["type"] for c in table["columnDefinitions"]}
    assert (types["Attempt"], types["Age"]) == ("integer", "date")
    assert columns == [
        "Name",
        "Node",
        "Fault",
        "Step",
        "Phase",
        "Attempt",
        "Reason",
        "Age",
        "Message",
    ]
    (row,) = table["rows"]
    cells = dict(zip(columns, row["cells"], strict=True))
    assert {k: cells[k] for k in ("Name", "Node", "Fault", "Step", "Phase", "Attempt")} == {
        "Name": name,
        "Node": "gpu-1",
        "Fault": "gpu-xid",
        "Step": "Cordon",
        "Phase": "Running",
        "Attempt": 1,
    }
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == name
    server.ok("DELETE", f"{path}/{name}")


def test_server_side_table_of_nodes(server: Server) -> None:
    name = unique("node")
    server.ok(
        "POST", "/api/v1/nodes", {"metadata": {"name": name}, "spec": {"unschedulable": True}}
    )
    table = server.ok("GET", f"/api/v1/nodes/{name}", accept=TABLE)
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Status", "Roles", "Age", "Version"]
    assert {c["type"] for c in table["columnDefinitions"]} == {"string"}
    cells = dict(zip(columns, table["rows"][0]["cells"], strict=False))
    assert cells["Status"] == "Unknown,SchedulingDisabled"
    assert cells["Roles"] == "<none>"
    server.ok("DELETE", f"/api/v1/nodes/{name}")


def test_server_side_table_of_leases(server: Server) -> None:
    """`kubectl get leases -n remediation-system`: who leads."""
    ns = server.namespace()
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    server.ok("POST", path, {"metadata": {"name": "op"}, "spec": {"holderIdentity": "replica-a"}})
    table = server.ok("GET", path, accept=TABLE)
    definitions = [(c["name"], c["type"]) for c in table["columnDefinitions"]]
    assert definitions == [("Name", "string"), ("Holder", "string"), ("Age", "string")]
    assert table["rows"][0]["cells"][:2] == ["op", "replica-a"]


def test_openapi_v3_names_each_kind_for_kubectl_explain(server: Server) -> None:
    answer = server.request("GET", "/openapi/v3")
    assert answer.code == 200
    root = answer.body if isinstance(answer.body, dict) else json.loads(answer.body)
    entry = root["paths"]["apis/remediation.gpuops.io/v1alpha1"]
    document = server.ok("GET", entry["serverRelativeURL"].split("?")[0])
    kinds = {
        gvk["kind"]
        for schema in document["components"]["schemas"].values()
        for gvk in schema.get("x-kubernetes-group-version-kind", [])
        if gvk.get("group") == "remediation.gpuops.io"
    }
    assert kinds >= {"RemediationPolicy", "Remediation"}


@pytest.mark.usefixtures("kubectl_available")
def test_kubectl_explain_reads_the_crd_schema(server: Server) -> None:
    out = server.kubectl("explain", "remediationpolicy.spec.faults")
    assert out.returncode == 0, out.stderr
    assert "ladder" in out.stdout
    status = server.kubectl("explain", "remediation.status.conditions")
    assert status.returncode == 0, status.stderr
    assert "Reconciling" in status.stdout


def test_protobuf_for_a_custom_resource_is_refused(server: Server) -> None:
    """Custom resources have no protobuf form (client-go never sends it for them). The
    emulator answers 415 with the message of the real server's content negotiation; the real
    v1.36.2 server instead panics in apiextensions' schemaCoercingDecoder (nil pointer,
    customresource_handler.go) and drops the connection. Either way nothing is created."""
    name = unique("pb")
    body = (
        b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1b\n\x13\n\x03"
        + name.encode()[:3]
        + b'\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00"\x00'
    )  # what kubectl sends for `create namespace`, posted where a Remediation is expected
    try:
        answer = server.request(
            "POST", f"{GROUP_VERSION}/remediations", body, content_type=PROTOBUF
        )
    except http.client.RemoteDisconnected:
        assert server.name == "real"
    else:
        assert (answer.code, answer.reason) == (415, "UnsupportedMediaType")
        assert "application/json" in answer.body["message"]
    assert server.request("GET", f"{GROUP_VERSION}/remediations/{name[:3]}").code == 404


def test_a_client_accepting_only_protobuf_gets_406_for_a_custom_resource(server: Server) -> None:
    answer = server.request("GET", f"{GROUP_VERSION}/remediations", accept=PROTOBUF)
    assert answer.code == 406
    both = server.request("GET", f"{GROUP_VERSION}/remediations", accept=f"{PROTOBUF},{JSON}")
    assert (both.code, both.body["kind"]) == (200, "RemediationList")


@pytest.mark.usefixtures("kubectl_available")
def test_kubectl_typed_creates_send_protobuf_and_work(server: Server) -> None:
    """kubectl create namespace/configmap/secret/serviceaccount/role/rolebinding/pdb send
    protobuf (client-go does not fall back to JSON after a 415 for protobuf)."""
    ns = unique("created")
    steps = [
        ("create", "namespace", ns),
        ("-n", ns, "create", "configmap", "c", "--from-literal=a=b"),
        ("-n", ns, "create", "secret", "generic", "s", "--from-literal=a=b"),
        ("-n", ns, "create", "serviceaccount", "operator"),
        ("-n", ns, "create", "role", "r", "--verb=get", "--resource=pods"),
        ("-n", ns, "create", "rolebinding", "rb", "--role=r", f"--serviceaccount={ns}:operator"),
        ("-n", ns, "create", "pdb", "p", "--selector=app=x", "--min-available=0"),
    ]
    for args in steps:
        out = server.kubectl(*args)
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    assert server.ok("GET", f"/api/v1/namespaces/{ns}/configmaps/c")["data"] == {"a": "b"}
    secret = server.ok("GET", f"/api/v1/namespaces/{ns}/secrets/s")
    assert (secret["data"], secret["type"]) == ({"a": "Yg=="}, "Opaque")
    pdb = server.ok("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/p")
    assert pdb["spec"]["minAvailable"] == 0
    binding = server.ok(
        "GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/rb"
    )
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}]


@pytest.mark.usefixtures("kubectl_available")
def test_kubectl_get_watch_shows_a_new_remediation_as_the_server_tables_it(
    server: Server,
) -> None:
    """`kubectl get rem -w`: a new Remediation's row as created (no status yet: the status
    subresource drops it on create), then with the status the operator writes next."""
    label = unique("watch")
    path = f"{GROUP_VERSION}/remediations"
    first, second = unique("rem"), unique("rem")
    server.ok("POST", path, remediation(first, watch=label))
    watcher = subprocess.Popen(
        ["kubectl", "get", "remediations", "--watch", "-l", f"watch={label}"],
        env={**os.environ, "KUBECONFIG": str(server.kubeconfig), "HOME": str(server.home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    stdout = watcher.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")))
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not any(first in line for line in lines):
            assert time.monotonic() < deadline, lines  # listed: the watch opens next
            time.sleep(0.1)
        created = server.ok("POST", path, remediation(second, watch=label))
        server.ok("PUT", f"{path}/{second}/status", {**created, "status": STATUS})
        while sum(second in line for line in lines) < 2:
            assert time.monotonic() < deadline, lines
            time.sleep(0.1)
    finally:
        watcher.terminate()
        watcher.wait(10)
        reader.join(10)
    rows = [line.split() for line in lines if second in line]
    assert rows[0] == [second, "gpu-1", rows[0][-1]]  # NAME, NODE, AGE: no status yet
    assert rows[1][:7] == [second, "gpu-1", "gpu-xid", "Cordon", "Running", "1", "StepStarted"]
