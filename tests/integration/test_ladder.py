"""The whole ladder against the real operator process: a RESET_GPU-class fault that neither a
GPU reset nor a reboot clears climbs cordon, drain (held up by a PodDisruptionBudget for a
while), reset Job, reboot (new bootID), and ends with the NodeClaim deleted and the node
replaced by Karpenter."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import (
    NAMESPACE,
    Cluster,
    eventually,
    has_our_taint,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.integration


def blocker(node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod on `node` and a PodDisruptionBudget that refuses its eviction (minAvailable 1)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "blocker", "namespace": "training", "labels": {"app": "blocker"}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "blocker", "namespace": "training"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "blocker"}}},
    }
    return pod, pdb


async def test_reset_class_fault_climbs_the_whole_ladder_to_replacement(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    pod, pdb = blocker(node)
    cluster.api.store.create("pods", pod, "training")
    cluster.api.store.create("poddisruptionbudgets", pdb, "training")
    await eventually(
        lambda: (
            (cluster.api.store.get("pods", "blocker", "training").get("status") or {}).get("phase")
            == "Running"
        ),
        what="blocker pod running",
    )
    claim = cluster.node(node)["metadata"]["ownerReferences"][0]["name"]  # type: ignore[index]
    boot_before = cluster.node(node)["status"]["nodeInfo"]["bootID"]  # type: ignore[index]
    cluster.apply(policy())
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    # Cordon: unschedulable plus our taint (value: the fault's name).
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    taint = next(
        t
        for t in cluster.node(node)["spec"]["taints"]  # type: ignore[index]
        if t["key"] == "remediation.gpuops.io/quarantine"
    )
    assert taint == {
        "key": "remediation.gpuops.io/quarantine",
        "value": "gpu-xid",
        "effect": "NoSchedule",
    }

    # Drain is held by the PDB and says so, on the Node's events.
    await eventually(
        lambda: "DrainBlockedByPDB" in cluster.event_reasons(node, "Node"),
        what="a DrainBlockedByPDB event on the node",
    )
    annotations = cluster.node(node)["metadata"].get("annotations") or {}  # type: ignore[index]
    assert annotations.get("karpenter.sh/do-not-disrupt") == "true"
    assert cluster.phase(node) in ("Running", "Blocked")
    assert cluster.api.store.find("pods", "blocker", "training") is not None
    # The PDB relents: the drain completes through the Eviction API.
    cluster.api.store.delete("poddisruptionbudgets", "blocker", "training")

    # GPU reset: a Job pinned to the node, tolerating our taint, in the operator namespace.
    jobs = await eventually(
        lambda: [
            j
            for j in cluster.api.store.list("jobs", NAMESPACE)
            if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "GPUReset"
        ],
        within=40,
        what="a GPUReset Job",
    )
    job = jobs[0]
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "remediation-operator"
    assert job["metadata"]["annotations"]["remediation.gpuops.io/node"] == node
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == node
    assert {
        "key": "remediation.gpuops.io/quarantine",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in pod_spec["tolerations"]
    assert cluster.api.store.find("pods", "blocker", "training") is None

    # Reboot: a new bootID while the fault persists.
    await eventually(
        lambda: (
            (n := cluster.node(node)) is not None
            and n["status"]["nodeInfo"]["bootID"] != boot_before
        ),
        within=40,
        what="the node rebooted (new bootID)",
    )

    # Replace: the NodeClaim is deleted, Karpenter removes the node; the incident closes.
    await eventually(lambda: cluster.phase(node) == "Succeeded", within=60, what="closed")
    remediation = cluster.remediation(node)
    assert remediation is not None
    status = remediation["status"]
    assert status["reason"] == "NodeReplaced"
    assert [s["action"] for s in status["steps"]] == [
        "Cordon",
        "Drain",
        "GPUReset",
        "Reboot",
        "Replace",
    ]
    assert all(s.get("finishedAt") for s in status["steps"])
    assert [s["outcome"] for s in status["steps"][:4]] == ["Succeeded"] * 4
    assert status["cordonedByUs"] is True
    assert cluster.api.store.find("nodeclaims", claim) is None
    assert cluster.node(node) is None
    # One Event per decision, on the Node (it outlives the Node; handlers/event_queue.py).
    await eventually(
        lambda: (
            {"FaultDetected", "StepStarted", "StepSucceeded", "NodeReplaced"}
            <= cluster.event_reasons(node, "Node")
        ),
        what="the incident's Events on the Node",
    )
    # Karpenter's replacement joins with a fresh name and nothing of ours on it.
    await eventually(lambda: len(cluster.node_names()) == 3, within=20, what="replacement")
    assert not any(has_our_taint(cluster.node(n)) for n in cluster.node_names())
