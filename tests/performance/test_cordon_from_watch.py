"""A cordon starts from the watched copy of the Node, and a stale copy still ends right."""

from __future__ import annotations

from typing import Any

from remediation_emulator.apiserver import ApiServer
from remediation_operator.k8s import nodes
from remediation_operator.k8s.client import Client

QUARANTINE = "remediation.gpuops.io/quarantine"


def node_requests(api: ApiServer, verb: str) -> int:
    return sum(1 for e in api.request_log if e.resource == "nodes" and e.verb == verb)


def our_taints(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in body["spec"].get("taints") or [] if t["key"] == QUARANTINE]


async def test_a_current_copy_saves_the_read(api: ApiServer, client: Client) -> None:
    known = api.store.create("nodes", {"metadata": {"name": "n1"}})
    await nodes.cordon(client, "n1", "gpu-xid", "gpu-default", known)
    assert node_requests(api, "get") == 0
    assert node_requests(api, "patch") == 1
    written = api.store.get("nodes", "n1")
    assert written["spec"]["unschedulable"] is True
    assert our_taints(written) == [{"key": QUARANTINE, "value": "gpu-xid", "effect": "NoSchedule"}]


async def test_a_stale_copy_is_refused_then_the_node_is_read_and_nothing_is_lost(
    api: ApiServer, client: Client
) -> None:
    known = api.store.create("nodes", {"metadata": {"name": "n1"}})
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}
    api.store.patch("nodes", "n1", {"spec": {"taints": [other]}})
    await nodes.cordon(client, "n1", "gpu-xid", "gpu-default", known)
    assert node_requests(api, "get") == 1  # after the 409 on the stale copy
    written = api.store.get("nodes", "n1")
    assert other in written["spec"]["taints"]  # the concurrent taint survived
    assert len(our_taints(written)) == 1
