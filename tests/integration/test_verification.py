"""Verification after a repair against sticky agents, with the real operator process (issue 21
findings 2 and 5, D71).

The emulated EKS agent and node-problem-detector keep a fault condition until their pod
restarts, and the emulated device plugin keeps a GPU it saw fail unhealthy until its pod
restarts (docs/emulator.md). With `validation.restartPods` the operator restarts those pods
on the node after the reset, validates, and recovers the node without a Reboot when the reset
worked; when it did not, the ladder climbs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import CONFIG, Cluster, eventually, is_cordoned_by_us, policy
from tests.integration.test_recovery import stays

pytestmark = pytest.mark.integration

EKS_AGENT = {
    "namespace": "kube-system",
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "eks-node-monitoring-agent"}},
}
NPD = {
    "namespace": "remediation-system-node-problem-detector",
    "podSelector": {
        "matchLabels": {"app.kubernetes.io/name": "remediation-operator-node-problem-detector"}
    },
}
DEVICE_PLUGIN = {
    "namespace": "gpu-operator",
    "podSelector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
}
LADDER = [
    {"action": "Cordon", "escalateAfter": "0s"},
    {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
    {"action": "GPUReset", "timeout": "20s", "escalateAfter": "0s"},
    {"action": "Reboot", "timeout": "30s", "escalateAfter": "0s"},
    {"action": "Replace", "timeout": "60s"},
]


def double_bit(condition: str, status: str) -> dict[str, Any]:
    # The emulated EKS agent reports XID 48 as NvidiaDoubleBitError; the emulated NPD sees
    # only kernel XIDs its rules name NvidiaXID<n>Error (docs/emulator.md), so its cases
    # inject XID 62 (RESET_GPU), whose reset works or not the same way.
    reasons = "NvidiaDoubleBitError|NvidiaXID(48|62)Error"
    return {
        "name": "gpu-double-bit-ecc",
        "match": [{"type": condition, "status": status, "reason": reasons}],
        "tolerate": "0s",
        "ladder": LADDER,
    }


def verified(condition: str, status: str, *restart: dict[str, Any]) -> dict[str, Any]:
    return policy(
        faults=[double_bit(condition, status)],
        validation={"after": ["GPUReset", "Reboot"], "timeout": "60s", "restartPods": [*restart]},
    )


def steps(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    return list((cluster.remediation(node) or {}).get("status", {}).get("steps", []))


def gpus(cluster: Cluster, node: str, part: str) -> str | None:
    return ((cluster.node(node) or {}).get("status", {}).get(part) or {}).get("nvidia.com/gpu")


def reason(cluster: Cluster, node: str) -> str | None:
    said = (cluster.remediation(node) or {}).get("status", {}).get("reason")
    return None if said is None else str(said)


def agent_pods(cluster: Cluster, namespace: str, label: str, node: str) -> list[str]:
    items = cluster.api.store.list("pods", namespace)
    return [
        p["metadata"]["name"]
        for p in items
        if p["spec"].get("nodeName") == node
        and label in (p["metadata"].get("labels") or {}).values()
        and not p["metadata"].get("deletionTimestamp")
    ]


EKS_WORKS = CONFIG.with_(agent="eks", device_plugin_marks=True, reset_clears=1.0)
EKS_FAILS = CONFIG.with_(agent="eks", device_plugin_marks=True, reset_clears=0.0)
NPD_WORKS = CONFIG.with_(agent="npd", device_plugin_marks=True, reset_clears=1.0)
NPD_FAILS = CONFIG.with_(agent="npd", device_plugin_marks=True, reset_clears=0.0)


@pytest.mark.fleet(config=EKS_WORKS)
async def test_eks_a_reset_that_worked_recovers_the_node_without_a_reboot(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(verified("AcceleratedHardwareReady", "False", EKS_AGENT, DEVICE_PLUGIN))
    await cluster.start_operator()
    before = agent_pods(cluster, "kube-system", "eks-node-monitoring-agent", node)
    assert len(before) == 1, "the EKS agent runs on every node"

    cluster.fleet.inject(node, "xid-48")
    await eventually(lambda: gpus(cluster, node, "allocatable") == "7", what="the plugin's mark")
    await eventually(lambda: reason(cluster, node) == "Recovered", within=60, what="recovered")

    actions = [s["action"] for s in steps(cluster, node)]
    assert actions == ["Cordon", "Drain", "GPUReset", "RestartPods", "Validate"]
    restart = steps(cluster, node)[3]
    assert restart["reason"] == "NodePodsRestarted"
    assert "kube-system/eks-node-monitoring-agent-" in restart["message"]
    assert "gpu-operator/nvidia-device-plugin-daemonset-" in restart["message"]
    after = agent_pods(cluster, "kube-system", "eks-node-monitoring-agent", node)
    assert len(after) == 1
    assert after != before, "a new agent pod"
    # The restart cleared the device plugin's mark without a human (D68's hold never came).
    assert gpus(cluster, node, "allocatable") == "8"
    assert "GPUsNotAdvertised" not in cluster.event_reasons(node, "Node")
    assert "RestartingNodePods" in cluster.event_reasons(node, "Node")
    assert not is_cordoned_by_us(cluster.node(node))


@pytest.mark.fleet(config=EKS_FAILS)
async def test_eks_a_reset_that_did_not_work_climbs_to_reboot(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(verified("AcceleratedHardwareReady", "False", EKS_AGENT, DEVICE_PLUGIN))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-48")
    await eventually(
        lambda: any(s["action"] == "Reboot" for s in steps(cluster, node)),
        within=60,
        what="the ladder climbs to Reboot",
    )
    actions = [s["action"] for s in steps(cluster, node)]
    assert actions[:5] == ["Cordon", "Drain", "GPUReset", "RestartPods", "Validate"]
    validate = steps(cluster, node)[4]
    assert validate["outcome"] == "PermanentFailure"
    assert "Recovered" not in cluster.event_reasons(node, "Node")


@pytest.mark.fleet(config=NPD_WORKS.with_(npd_lookback=0.0))
async def test_npd_a_reset_that_worked_recovers_the_node_without_a_reboot(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(verified("GPUProblem", "True", NPD, DEVICE_PLUGIN))
    await cluster.start_operator()
    npd = "remediation-operator-node-problem-detector"
    assert agent_pods(cluster, "remediation-system-node-problem-detector", npd, node)

    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: reason(cluster, node) == "Recovered", within=60, what="recovered")
    actions = [s["action"] for s in steps(cluster, node)]
    assert actions == ["Cordon", "Drain", "GPUReset", "RestartPods", "Validate"]
    assert gpus(cluster, node, "allocatable") == "8"
    assert not is_cordoned_by_us(cluster.node(node))


@pytest.mark.fleet(config=NPD_FAILS.with_(npd_lookback=0.0))
async def test_npd_a_reset_that_did_not_work_climbs_to_reboot(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(verified("GPUProblem", "True", NPD, DEVICE_PLUGIN))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    await eventually(
        lambda: any(s["action"] == "Reboot" for s in steps(cluster, node)),
        within=60,
        what="the ladder climbs to Reboot",
    )
    assert "Recovered" not in cluster.event_reasons(node, "Node")


@pytest.mark.fleet(config=EKS_WORKS)
async def test_pods_that_never_come_back_hold_the_node(cluster: Cluster) -> None:
    """A selector that names a pod the node runs but whose DaemonSet never brings it back (here
    a DaemonSet the fleet does not play: its pod, created by hand, is not recreated)."""
    node = cluster.node_names()[0]
    orphan = {"namespace": "training", "podSelector": {"matchLabels": {"app": "by-hand"}}}
    owner = cluster.api.store.create(
        "daemonsets",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "by-hand", "namespace": "training"},
            "spec": {
                "selector": {"matchLabels": {"app": "by-hand"}},
                "template": {
                    "metadata": {"labels": {"app": "by-hand"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        },
        "training",
    )
    cluster.api.store.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "by-hand",
                "namespace": "training",
                "labels": {"app": "by-hand"},
                # DaemonSet-owned: the drain leaves it on the node, as it does the agents.
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "by-hand",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        },
        "training",
    )
    body = verified("AcceleratedHardwareReady", "False", EKS_AGENT, orphan)
    body["spec"]["validation"]["timeout"] = "5s"
    cluster.apply(body)
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-48")
    await eventually(
        lambda: reason(cluster, node) == "NodePodsNotBack", within=60, what="held: not back"
    )
    status = (cluster.remediation(node) or {})["status"]
    assert status["phase"] == "Blocked"
    assert "training/app=by-hand" in steps(cluster, node)[-1]["message"]
    # A plan's Events are applied after its status write: the Warning may trail it.
    await eventually(
        lambda: "NodePodsNotBack" in cluster.event_reasons(node, "Node"),
        what="a NodePodsNotBack Event",
    )
    await stays(
        lambda: (
            reason(cluster, node) == "NodePodsNotBack"
            and is_cordoned_by_us(cluster.node(node))
            and not any(s["action"] == "Reboot" for s in steps(cluster, node))
        ),
        3.0,
        "held, cordoned, no climb",
    )
