"""The whole ladder on a real kube-apiserver: a fault that neither a GPU reset nor a reboot
clears climbs cordon, drain through the real Eviction API (refused with 429 while a real
PodDisruptionBudget, whose status the real disruption controller computes, forbids it), a GPU
reset and a reboot run as real Jobs by the real Job controller, a new bootID, and ends with the
NodeClaim (a real CRD) deleted and the node replaced by the fleet's Karpenter."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import NODECLAIMS, Scenario
from tests.integration.conftest import eventually, has_our_taint, is_cordoned_by_us

QUARANTINE_TOLERATION = {
    "key": "remediation.gpuops.io/quarantine",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def blocker(node: str, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod on `node` and a PodDisruptionBudget that refuses its eviction (minAvailable 1)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "blocker", "namespace": namespace, "labels": {"app": "blocker"}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "blocker", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "blocker"}}},
    }
    return pod, pdb


def pod_phase(e2e: Scenario, namespace: str, name: str) -> str | None:
    pod = e2e.admin.find(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return ((pod or {}).get("status") or {}).get("phase")


def pdb_settled(e2e: Scenario, namespace: str) -> bool:
    """The disruption controller has looked at the blocker's PDB (0 disruptions allowed)."""
    pdb = e2e.admin.find(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/blocker")
    status = (pdb or {}).get("status") or {}
    return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0


async def test_reset_class_fault_climbs_the_whole_ladder_to_replacement(scenario: Scenario) -> None:
    e2e = scenario
    training = e2e.shape.training_namespace
    node = e2e.node_names()[0]
    pod, pdb = blocker(node, training)
    e2e.admin.create(f"/api/v1/namespaces/{training}/pods", pod)
    e2e.admin.create(f"/apis/policy/v1/namespaces/{training}/poddisruptionbudgets", pdb)
    await eventually(lambda: pod_phase(e2e, training, "blocker") == "Running", what="blocker")
    await eventually(lambda: pdb_settled(e2e, training), what="PDB status from the controller")
    before = e2e.node(node)
    assert before is not None
    claim = before["metadata"]["ownerReferences"][0]["name"]
    boot_before = before["status"]["nodeInfo"]["bootID"]
    e2e.apply(e2e.policy())
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-62")

    # Cordon: unschedulable plus our taint (value: the fault's name).
    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), what="cordon")
    taints = (e2e.node(node) or {})["spec"]["taints"]
    assert {
        "key": "remediation.gpuops.io/quarantine",
        "value": "gpu-xid",
        "effect": "NoSchedule",
    } in taints

    # Drain is refused by the real server (429 from the PDB) and the operator says so.
    await eventually(
        lambda: "DrainBlockedByPDB" in e2e.event_reasons(node, "Node"),
        what="a DrainBlockedByPDB event on the node",
    )
    annotations = (e2e.node(node) or {})["metadata"].get("annotations") or {}
    assert annotations.get("karpenter.sh/do-not-disrupt") == "true"
    assert e2e.phase(node) in ("Running", "Blocked")
    assert pod_phase(e2e, training, "blocker") == "Running"
    # The PDB relents: the eviction goes through and the fleet's kubelet ends the pod.
    e2e.admin.delete(f"/apis/policy/v1/namespaces/{training}/poddisruptionbudgets/blocker")

    # GPU reset: a real Job, pinned to the node and tolerating our taint, in our namespace,
    # whose pod the real Job controller created.
    def reset_jobs() -> list[dict[str, Any]]:
        return [
            j
            for j in e2e.jobs()
            if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "GPUReset"
        ]

    job = (await eventually(reset_jobs, within=60, what="a GPUReset Job"))[0]
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "remediation-operator"
    assert job["metadata"]["annotations"]["remediation.gpuops.io/node"] == node
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == node
    assert QUARANTINE_TOLERATION in pod_spec["tolerations"]
    assert pod_phase(e2e, training, "blocker") is None

    def reset_completed_by_the_job_controller() -> bool:
        done = [j for j in reset_jobs() if (j.get("status") or {}).get("succeeded") == 1]
        return bool(done)

    await eventually(
        reset_completed_by_the_job_controller, within=40, what="the reset Job Complete"
    )
    job_pods = [
        p
        for p in e2e.pods(e2e.namespace)
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name")
        == job["metadata"]["name"]
    ]
    assert job_pods, "the Job controller created the reset pod"

    # Reboot: a new bootID while the fault persists.
    await eventually(
        lambda: (
            (n := e2e.node(node)) is not None and n["status"]["nodeInfo"]["bootID"] != boot_before
        ),
        within=60,
        what="the node rebooted (new bootID)",
    )

    reboot_job = await eventually(
        lambda: [
            j
            for j in e2e.jobs()
            if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "Reboot"
            and (j.get("status") or {}).get("succeeded") == 1
        ],
        within=30,
        what="the reboot Job Complete (by the Job controller)",
    )
    assert reboot_job[0]["spec"]["template"]["spec"]["nodeName"] == node

    # Replace: the NodeClaim is deleted, Karpenter removes the node; the incident closes.
    await eventually(lambda: e2e.phase(node) == "Succeeded", within=90, what="closed")
    remediation = e2e.remediation(node)
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
    assert [s["outcome"] for s in status["steps"][:4]] == ["Succeeded"] * 4
    await eventually(lambda: e2e.node(node) is None, within=30, what="the node removed")
    # Karpenter removes the Node before its NodeClaim's finalizer (the instance is terminated
    # first): the claim may outlive the incident's close by a moment.
    await eventually(
        lambda: e2e.admin.find(f"{NODECLAIMS}/{claim}") is None,
        within=30,
        what="the NodeClaim removed",
    )
    # Karpenter's replacement joins with nothing of ours on it.
    await eventually(lambda: len(nodes_of(e2e)) == 3, within=30, what="a replacement node")
    assert not any(has_our_taint(n) for n in nodes_of(e2e))


def nodes_of(e2e: Scenario) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = e2e.admin.get(
        "/api/v1/nodes", labelSelector=f"karpenter.sh/nodepool={e2e.shape.nodepool}"
    )["items"]
    return [n for n in items if not n["metadata"].get("deletionTimestamp")]
