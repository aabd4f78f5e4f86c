"""Karpenter: deleting a NodeClaim drains and removes its Node, then a replacement arrives."""

from __future__ import annotations

from typing import Any

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import resources
from remediation_emulator.fleet.client import KubeClient
from remediation_emulator.fleet.fleet import Fleet
from tests.emulator.fleet.conftest import FLEET_USER, eventually


def claim_of(api: ApiServer, node: str) -> str:
    owner = api.store.get("nodes", node)["metadata"]["ownerReferences"][0]
    return str(owner["name"])


async def test_deleting_a_nodeclaim_replaces_the_node(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    tainted: list[bool] = []

    def watch_taints(key: str, old: object, new: dict[str, Any] | None) -> None:
        if key == "gpu-0001" and new is not None:
            taints = new["spec"].get("taints", [])
            tainted.append(any(t["key"] == "karpenter.sh/disrupted" for t in taints))

    gpus.nodes.subscribe(watch_taints)
    old = api.store.get("nodes", "gpu-0001")
    zone = old["metadata"]["labels"]["topology.kubernetes.io/zone"]
    claim = claim_of(api, "gpu-0001")
    await admin.delete(resources.NODECLAIMS, claim)
    await eventually(lambda: api.store.find("nodes", "gpu-0001") is None, what="node removal")
    await eventually(
        lambda: api.store.find("nodeclaims.karpenter.sh", claim) is None, what="claim removal"
    )
    assert any(tainted)
    evictions = api.request_log.matching(verb="create", resource="pods", subresource="eviction")
    assert evictions
    assert {e.user for e in evictions} == {FLEET_USER}
    assert all(e.namespace == "training" for e in evictions)  # DaemonSet pods are not evicted

    new = await eventually(lambda: api.store.find("nodes", "gpu-0003"), what="replacement node")
    assert new["metadata"]["labels"]["topology.kubernetes.io/zone"] == zone
    assert new["spec"]["providerID"] != old["spec"]["providerID"]
    ready = next(c for c in new["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    new_claim = api.store.get("nodeclaims.karpenter.sh", claim_of(api, "gpu-0003"))
    assert new_claim["metadata"]["name"] != claim
    assert new_claim["status"]["nodeName"] == "gpu-0003"
    await eventually(lambda: gpus.karpenter.launched == ["gpu-0003"], what="launch recorded")
    # Pods left on the removed node are garbage-collected.
    await eventually(
        lambda: not [p for p in api.store.list("pods") if p["spec"]["nodeName"] == "gpu-0001"],
        what="pod GC",
    )


async def test_a_blocking_pdb_holds_the_drain_until_it_allows_eviction(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    # The training Job's own PDB (maxUnavailable: 1) is tightened to allow no disruption.
    await admin.patch(
        resources.PDBS, "train-0000", {"spec": {"maxUnavailable": 0}}, namespace="training"
    )
    await admin.delete(resources.NODECLAIMS, claim_of(api, "gpu-0002"))
    await eventually(
        lambda: api.request_log.matching(subresource="eviction", code=429),
        what="a refused eviction",
    )
    node = api.store.get("nodes", "gpu-0002")
    assert node["metadata"]["deletionTimestamp"]  # held by the finalizer while draining
    await admin.patch(
        resources.PDBS, "train-0000", {"spec": {"maxUnavailable": 1}}, namespace="training"
    )
    await eventually(lambda: api.store.find("nodes", "gpu-0002") is None, what="node removal")


async def test_deleting_the_node_directly_also_removes_its_nodeclaim(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    claim = claim_of(api, "gpu-0000")
    await admin.delete(resources.NODES, "gpu-0000")
    await eventually(
        lambda: api.store.find("nodeclaims.karpenter.sh", claim) is None, what="claim removal"
    )
    assert api.store.find("nodes", "gpu-0000") is None
    await eventually(lambda: gpus.karpenter.launched, what="replacement")
