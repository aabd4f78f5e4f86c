"""The fleet as the operator finds it: GPU nodes, NodeClaims, owners, Running workloads."""

from __future__ import annotations

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import fleet, resources
from remediation_emulator.fleet.agent import UnknownNodeError
from remediation_emulator.fleet.client import KubeClient
from remediation_emulator.fleet.fleet import Fleet
from remediation_emulator.fleet.manifests import Shape
from tests.emulator.fleet.conftest import FLEET_USER, TEST_CONFIG, connection, eventually


async def test_nodes_look_like_karpenter_gpu_nodes_owned_by_their_nodeclaims(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    nodes = (await admin.list(resources.NODES, label_selector="nvidia.com/gpu.present=true"))[
        "items"
    ]
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-0000", "gpu-0001", "gpu-0002"]
    claims = {c["metadata"]["name"]: c for c in (await admin.list(resources.NODECLAIMS))["items"]}
    zones = set()
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
        assert labels["karpenter.sh/nodepool"] == "gpu-h100"
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        zones.add(labels["topology.kubernetes.io/zone"])
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert node["status"]["allocatable"]["pods"] == "110"
        assert node["status"]["nodeInfo"]["bootID"]
        provider = node["spec"]["providerID"]
        assert provider.startswith(f"aws:///{labels['topology.kubernetes.io/zone']}/i-0")
        (owner,) = node["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"]) == ("karpenter.sh/v1", "NodeClaim")
        assert owner["blockOwnerDeletion"] is True
        claim = claims[owner["name"]]
        assert owner["uid"] == claim["metadata"]["uid"]
        assert claim["status"]["providerID"] == provider
        assert claim["status"]["nodeName"] == node["metadata"]["name"]
        assert claim["metadata"]["finalizers"] == ["karpenter.sh/termination"]
        assert claim["spec"]["nodeClassRef"] == {
            "group": "karpenter.k8s.aws",
            "kind": "EC2NodeClass",
            "name": "default",
        }
        types = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert types["Ready"] == "True"
        assert types["AcceleratedHardwareReady"] == "True"
        assert types["GPUHealthy"] == "True"
    assert len(zones) == 3  # spread over the zones


async def test_workload_pods_become_running_and_ready_with_their_owners(
    api: ApiServer, gpus: Fleet
) -> None:
    def all_ready() -> list[dict[str, object]] | None:
        pods = api.store.list("pods")
        ready = [
            p
            for p in pods
            if p["status"].get("phase") == "Running"
            and {"type": "Ready", "status": "True"}.items()
            <= next(c for c in p["status"]["conditions"] if c["type"] == "Ready").items()
        ]
        return pods if pods and len(ready) == len(pods) else None

    pods = await eventually(all_ready, what="every pod Running and Ready")
    owners = {(p["metadata"]["ownerReferences"][0]["kind"], p["spec"]["nodeName"]) for p in pods}
    for node in ("gpu-0000", "gpu-0001", "gpu-0002"):
        assert ("DaemonSet", node) in owners
        assert ("Job", node) in owners
    assert api.store.list("poddisruptionbudgets", "training")
    assert api.store.list("daemonsets", "gpu-operator")
    # The kubelet's writes are pod status patches made by the fleet's own user.
    patches = api.request_log.matching(verb="patch", resource="pods", subresource="status")
    assert patches
    assert all(e.user == FLEET_USER and e.code == 200 for e in patches)


async def test_a_deleted_pod_goes_away_after_its_grace_period(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    pod = next(p for p in api.store.list("pods", "training"))
    name = pod["metadata"]["name"]
    deleted = await admin.delete(resources.PODS, name, namespace="training")
    assert deleted["metadata"]["deletionTimestamp"]  # graceful: the kubelet finishes it
    await eventually(lambda: api.store.find("pods", name, "training") is None, what="pod removal")
    removals = [
        e
        for e in api.request_log.matching(verb="delete", resource="pods")
        if e.name == name and e.user == FLEET_USER
    ]
    assert removals
    assert removals[-1].code == 200


async def test_pointed_at_a_real_cluster_the_fleet_leaves_other_nodes_alone(
    api: ApiServer,
) -> None:
    api.store.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "real-1"}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-real", "namespace": "default"},
        "spec": {"nodeName": "real-1", "containers": [{"name": "c", "image": "busybox"}]},
    }
    api.store.create("pods", pod, "default")
    settings = TEST_CONFIG.with_(adopt_all_nodes=False)
    shape = Shape(nodes=1, training_pods_per_node=0)
    async with fleet.running(connection(api), shape=shape, config=settings) as gpus:
        await eventually(
            lambda: all(
                p["status"].get("phase") == "Running"
                for p in api.store.list("pods", "gpu-operator")
            ),
            what="the fleet's own pods Running",
        )
        with pytest.raises(UnknownNodeError):
            gpus.inject("real-1", "xid-79")
        # The agent has gone round its heartbeat schedule; real-1 was never in it.
        await eventually(lambda: gpus.agent.heartbeats >= 2, what="two heartbeat rounds")
    assert api.store.get("pods", "on-real", "default")["status"].get("phase") != "Running"
    assert not api.store.get("nodes", "real-1").get("status", {}).get("conditions")
