"""kubectl 1.32 against the emulator: get, printer columns, apply, drain with and without a PDB.

Skipped with a message when kubectl is not installed. The kubelet's part of a drain (removing
pods once they are terminating) is played by a small thread in this file.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from remediation_emulator.apiserver import ThreadedApiServer
from tests.emulator.conftest import RUNNING_READY, Kubectl, pod, ready_node
from tests.emulator.crd_fixtures import policy_crd, remediation_crd

pytestmark = pytest.mark.integration


@pytest.fixture
def kubelet(threaded: ThreadedApiServer) -> Iterator[None]:
    """Deletes terminating pods with gracePeriodSeconds=0, as a kubelet does after shutdown."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.1):
            for item in threaded.store.list("pods"):
                meta = item["metadata"]
                if meta.get("deletionTimestamp"):
                    threaded.store.delete(
                        "pods", meta["name"], meta["namespace"], grace_period_seconds=0
                    )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=5)


def test_get_nodes(threaded: ThreadedApiServer, kubectl: Kubectl) -> None:
    threaded.store.create("nodes", ready_node("gpu-1"))
    threaded.store.create("nodes", ready_node("gpu-2"))
    threaded.store.patch("nodes", "gpu-2", {"spec": {"unschedulable": True}})
    out = kubectl("get", "nodes")
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert lines[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert lines[1][:3] == ["gpu-1", "Ready", "<none>"]
    assert lines[2][:2] == ["gpu-2", "Ready,SchedulingDisabled"]


def test_get_remediations_shows_printer_columns(
    threaded: ThreadedApiServer, kubectl: Kubectl
) -> None:
    threaded.store.create("customresourcedefinitions", remediation_crd())
    threaded.store.create(
        "remediations",
        {
            "metadata": {"name": "gpu-17-incident"},
            "spec": {"nodeName": "gpu-17", "fault": "gpu-xid-reset"},
        },
    )
    threaded.store.patch(
        "remediations",
        "gpu-17-incident",
        {"status": {"phase": "Running", "step": "GPUReset", "reason": "StepStarted"}},
        subresource="status",
    )
    out = kubectl("get", "remediations")
    assert out.returncode == 0, out.stderr
    header, row = (line.split() for line in out.stdout.splitlines())
    assert header == ["NAME", "NODE", "FAULT", "STEP", "PHASE", "ATTEMPT", "REASON", "AGE"]
    assert row[:7] == [
        "gpu-17-incident",
        "gpu-17",
        "gpu-xid-reset",
        "GPUReset",
        "Running",
        "1",
        "StepStarted",
    ]
    short = kubectl("get", "rem", "-o", "name")
    assert short.stdout.strip() == "remediation.remediation.gpuops.io/gpu-17-incident"


POLICY = """\
apiVersion: remediation.gpuops.io/v1alpha1
kind: RemediationPolicy
metadata:
  name: default
spec:
  mode: {mode}
  faults:
  - name: gpu-xid-reset
"""


def test_apply_creates_then_patches_a_policy(threaded: ThreadedApiServer, kubectl: Kubectl) -> None:
    threaded.store.create("customresourcedefinitions", policy_crd())
    created = kubectl("apply", "-f", "-", stdin=POLICY.format(mode="DryRun"))
    assert created.returncode == 0, created.stderr
    assert "remediationpolicy.remediation.gpuops.io/default created" in created.stdout
    configured = kubectl("apply", "-f", "-", stdin=POLICY.format(mode="Enforce"))
    assert configured.returncode == 0, configured.stderr
    assert "configured" in configured.stdout
    policy = threaded.store.get("remediationpolicies", "default")
    assert policy["spec"]["mode"] == "Enforce"
    assert policy["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in policy["metadata"]["annotations"]
    patch = threaded.request_log.matching(verb="patch", resource="remediationpolicies")
    assert [e.code for e in patch] == [200]
    rejected = kubectl("apply", "-f", "-", stdin=POLICY.format(mode="Sometimes"))
    assert rejected.returncode != 0
    assert "supported values" in rejected.stderr


def _workload(threaded: ThreadedApiServer, name: str, node: str, app: str) -> None:
    threaded.store.create("pods", pod(name, node, app=app), "default")
    threaded.store.patch("pods", name, RUNNING_READY, "default", subresource="status")


def test_drain_succeeds_without_a_blocking_pdb(
    threaded: ThreadedApiServer, kubectl: Kubectl, kubelet: None
) -> None:
    threaded.store.create("nodes", ready_node("gpu-1"))
    _workload(threaded, "train-0", "gpu-1", "train")
    _workload(threaded, "train-1", "gpu-1", "train")
    _workload(threaded, "elsewhere", "gpu-2", "train")
    out = kubectl(
        "drain", "gpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s"
    )
    assert out.returncode == 0, out.stderr
    assert "node/gpu-1 drained" in out.stdout
    assert threaded.store.get("nodes", "gpu-1")["spec"]["unschedulable"] is True
    left = [p["metadata"]["name"] for p in threaded.store.list("pods")]
    assert left == ["elsewhere"]
    evictions = threaded.request_log.matching(verb="create", subresource="eviction")
    assert sorted(e.name for e in evictions) == ["train-0", "train-1"]


def test_drain_keeps_retrying_on_a_blocking_pdb(
    threaded: ThreadedApiServer, kubectl: Kubectl, kubelet: None
) -> None:
    threaded.store.create("nodes", ready_node("gpu-1"))
    _workload(threaded, "guarded", "gpu-1", "web")
    _workload(threaded, "peer", "gpu-2", "web")
    threaded.store.create(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
        "default",
    )
    out = kubectl("drain", "gpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3s")
    assert out.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in out.stderr
    assert "will retry after" in out.stderr
    assert (
        threaded.store.get("pods", "guarded", "default")["metadata"].get("deletionTimestamp")
        is None
    )
    refused = threaded.request_log.matching(verb="create", subresource="eviction", code=429)
    assert refused
    assert all(e.name == "guarded" for e in refused)


def test_get_watch_prints_changes(threaded: ThreadedApiServer, kubectl: Kubectl) -> None:
    threaded.store.create("nodes", ready_node("gpu-1"))
    env = {**os.environ, "KUBECONFIG": str(kubectl.kubeconfig), "HOME": str(kubectl.home)}
    process = subprocess.Popen(
        ["kubectl", "get", "nodes", "--watch"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        assert "gpu-1" in process.stdout.readline() + process.stdout.readline()
        threaded.store.patch("nodes", "gpu-1", {"spec": {"unschedulable": True}})
        assert "Ready,SchedulingDisabled" in process.stdout.readline()
    finally:
        process.terminate()
        process.communicate(timeout=10)


PROJECT = Path(__file__).resolve().parents[2]


def test_project_crds_and_example_policy_through_kubectl(
    threaded: ThreadedApiServer, kubectl: Kubectl
) -> None:
    """`kubectl apply -f crds/` then the example policy, as a user of the project would."""
    crds = sorted((PROJECT / "crds").glob("*.yaml"))
    example = PROJECT / "examples" / "gpu-xid-ladders-policy.yaml"
    if not crds or not example.exists():
        pytest.skip("crds/ or examples/gpu-xid-ladders-policy.yaml not generated yet")
    applied = kubectl("apply", "-f", str(PROJECT / "crds"))
    assert applied.returncode == 0, applied.stderr
    policy = kubectl("apply", "-f", str(example))
    assert policy.returncode == 0, policy.stderr
    assert "remediationpolicy.remediation.gpuops.io/gpu-xid-ladders created" in policy.stdout
    threaded.store.create(
        "remediations",
        {
            "metadata": {"name": "gpu-17-incident"},
            "spec": {"nodeName": "gpu-17", "policyName": "gpu-xid-ladders"},
        },
    )
    crd = yaml.safe_load((PROJECT / "crds" / "remediations.remediation.gpuops.io.yaml").read_text())
    columns = [
        c["name"].upper()
        for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
        if not c.get("priority")
    ]
    out = kubectl("get", "remediations")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["NAME", *columns]
    assert row.split()[:2] == ["gpu-17-incident", "gpu-17"]
