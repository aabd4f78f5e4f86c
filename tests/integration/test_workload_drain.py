"""Workload-aware drain against the real operator process (issue 15): a Job's pod allowed to
complete is waited for, then the drain goes on; a drain before a GPU reset with
`gpuPodsOnlyBeforeReset` moves the GPU pod and leaves a CPU-only pod in place."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.conftest import (
    NAMESPACE,
    Cluster,
    eventually,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.integration


def pod(
    node: str,
    name: str,
    *,
    owner: str | None = None,
    gpus: int = 0,
    namespace: str = "training",
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if gpus:
        container["resources"] = {
            "requests": {"nvidia.com/gpu": str(gpus)},
            "limits": {"nvidia.com/gpu": str(gpus)},
        }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": name}}
    if owner is not None:
        kind, owner_name = owner.split("/")
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [container]},
    }


def running(cluster: Cluster, name: str, namespace: str = "training") -> bool:
    found = cluster.api.store.find("pods", name, namespace)
    return found is not None and (found.get("status") or {}).get("phase") == "Running"


def gone(cluster: Cluster, name: str, namespace: str = "training") -> bool:
    found = cluster.api.store.find("pods", name, namespace)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def gpu_reset_jobs(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        j
        for j in cluster.api.store.list("jobs", NAMESPACE)
        if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "GPUReset"
    ]


async def test_allow_completion_waits_for_a_jobs_pod_then_drains(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.api.store.create("pods", pod(node, "trainer-0", owner="Job/trainer"), "training")
    cluster.api.store.create("pods", pod(node, "web-1", owner="ReplicaSet/web"), "training")
    await eventually(lambda: running(cluster, "trainer-0"), what="the Job's pod running")
    await eventually(lambda: running(cluster, "web-1"), what="the ReplicaSet's pod running")
    # The emulated fleet's own training pods are evicted as usual; ours may complete.
    mine = {
        "matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer-0", "web-1"]}]
    }
    rules = {
        "pods": [
            {
                "handling": "AllowCompletion",
                "namespaces": ["training"],
                "podSelector": mine,
                "waitFor": "1h",
            }
        ]
    }
    cluster.apply(policy(drain=rules))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    # A ReplicaSet's pod never finishes by itself: AllowCompletion evicts it at once.
    await eventually(lambda: gone(cluster, "web-1"), within=20, what="the ReplicaSet pod evicted")
    await asyncio.sleep(3)  # several eviction rounds (every 5 s at most) go by
    assert running(cluster, "trainer-0")
    remediation = cluster.remediation(node)
    assert remediation is not None
    assert remediation["status"]["step"] == "Drain"
    assert remediation["status"]["phase"] == "Running"
    assert not gpu_reset_jobs(cluster)

    # The training Job's pod finishes; the drain is then complete and the ladder goes on.
    finished = cluster.api.store.get("pods", "trainer-0", "training")
    finished["status"] = {**(finished.get("status") or {}), "phase": "Succeeded"}
    cluster.api.store.replace("pods", "trainer-0", finished, "training", subresource="status")
    await asyncio.sleep(8)
    await eventually(lambda: gpu_reset_jobs(cluster), within=30, what="the GPU reset after it")
    drain = next(s for s in cluster.remediation(node)["status"]["steps"] if s["action"] == "Drain")  # type: ignore[index]
    assert drain["outcome"] == "Succeeded"


async def test_gpu_only_drain_before_a_reset_leaves_a_cpu_pod_in_place(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.api.store.create("pods", pod(node, "trainer-0", gpus=8), "training")
    cluster.api.store.create("pods", pod(node, "log-shipper", namespace="default"), "default")
    await eventually(lambda: running(cluster, "trainer-0"), what="the GPU pod running")
    await eventually(lambda: running(cluster, "log-shipper", "default"), what="the CPU pod running")
    cluster.apply(policy(drain={"gpuPodsOnlyBeforeReset": True}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: gone(cluster, "trainer-0"), within=30, what="the GPU pod evicted")
    await eventually(lambda: gpu_reset_jobs(cluster), within=30, what="the GPU reset")
    assert running(cluster, "log-shipper", "default")
    remediation = cluster.remediation(node)
    assert remediation is not None
    drain = next(s for s in remediation["status"]["steps"] if s["action"] == "Drain")
    assert drain["outcome"] == "Succeeded"


def reboot_jobs(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        j
        for j in cluster.api.store.list("jobs", NAMESPACE)
        if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "Reboot"
    ]


async def test_a_reboot_after_a_gpu_only_drain_first_evicts_the_pods_left_honouring_budgets(
    cluster: Cluster,
) -> None:
    """Issue 22, D54: the CPU pod the GPU-only drain left would stop with the node. Before the
    Reboot it is evicted under the full drain rules; its PodDisruptionBudget holds the reboot
    (named in status and an Event) until the budget allows the eviction."""
    node = cluster.node_names()[0]
    cluster.api.store.create("pods", pod(node, "trainer-0", gpus=8), "training")
    cluster.api.store.create("pods", pod(node, "log-shipper", namespace="default"), "default")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "log-shipper", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "log-shipper"}}},
    }
    cluster.api.store.create("poddisruptionbudgets", budget, "default")
    await eventually(lambda: running(cluster, "log-shipper", "default"), what="the CPU pod running")
    cluster.apply(policy(drain={"gpuPodsOnlyBeforeReset": True}))  # the reset does not fix it
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("reason")
            == "EvictingBeforeReboot"
        ),
        within=40,
        what="the reboot waiting for the pods the drain left",
    )
    status = cluster.remediation(node)["status"]  # type: ignore[index]
    assert status["step"] == "Reboot"
    assert "default/log-shipper" in status["message"]
    await eventually(
        lambda: (
            "PodDisruptionBudget default/log-shipper"
            in (cluster.remediation(node) or {}).get("status", {}).get("message", "")
        ),
        within=30,
        what="the budget named",
    )
    await eventually(
        lambda: any(
            e["reason"] == "EvictingBeforeReboot" and "default/log-shipper" in e["message"]
            for e in cluster.events(node, "Node")
        ),
        what="an Event naming the pod",
    )
    await asyncio.sleep(3)  # several checks of the Reboot step go by
    assert running(cluster, "log-shipper", "default"), "the budget is honoured"
    assert not reboot_jobs(cluster), "no reboot while the budget refuses the eviction"

    cluster.api.store.delete("poddisruptionbudgets", "log-shipper", "default")

    await eventually(lambda: gone(cluster, "log-shipper", "default"), within=40, what="evicted")
    (job,) = await eventually(lambda: reboot_jobs(cluster), within=40, what="the reboot Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    boot = cluster.remediation(node)["status"]["bootIDAtStepStart"]  # type: ignore[index]
    assert boot
    # The node program reboots only while the node still has this bootID (D55).
    assert {"name": "REMEDIATION_EXPECTED_BOOT_ID", "value": boot} in container["env"]
