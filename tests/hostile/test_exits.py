"""Every way an incident ends gives back what we placed (issue 24, item 3), against the real
operator process and the emulator: a node relabelled out of the policy's selector mid-repair
closes `NodeUnselected` (it was not deleted) and loses our cordon, quarantine taint, our
annotations and `karpenter.sh/do-not-disrupt`; an administrator's cordon stays."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import (
    FAULT_REASONS,
    Cluster,
    eventually,
    has_our_taint,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.hostile

OURS = (
    "remediation.gpuops.io/quarantined-by",
    "remediation.gpuops.io/uncordon-on-release",
    "karpenter.sh/do-not-disrupt",
)


def cordon_then_drain() -> list[dict[str, Any]]:
    """Cordon, then a Drain that succeeds and waits ten minutes before anything else: the
    incident stays open with the node cordoned, tainted and protected from consolidation."""
    return [
        {
            "name": "gpu-xid",
            "match": [
                {"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}
            ],
            "tolerate": "0s",
            "ladder": [
                {"action": "Cordon", "escalateAfter": "0s"},
                {"action": "Drain", "timeout": "60s", "escalateAfter": "10m"},
            ],
            "onExhausted": "Hold",
        }
    ]


def node_annotations(cluster: Cluster, node: str) -> dict[str, str]:
    return dict(((cluster.node(node) or {}).get("metadata") or {}).get("annotations") or {})


def reason(cluster: Cluster, node: str) -> str | None:
    remediation = cluster.remediation(node)
    return remediation["status"].get("reason") if remediation else None


async def open_protected_incident(cluster: Cluster, node: str) -> None:
    cluster.apply(policy(faults=cordon_then_drain()))
    await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: has_our_taint(cluster.node(node)), what="our taint")
    await eventually(
        lambda: node_annotations(cluster, node).get("karpenter.sh/do-not-disrupt") == "true",
        what="do-not-disrupt during the drain",
    )
    await eventually(lambda: reason(cluster, node) == "WaitingToEscalate", what="drained")


async def test_a_node_relabelled_out_of_the_selector_is_given_back(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    await open_protected_incident(cluster, node)
    assert is_cordoned_by_us(cluster.node(node))

    cluster.api.store.patch(
        "nodes", node, {"metadata": {"labels": {"nvidia.com/gpu.present": None}}}
    )

    await eventually(lambda: cluster.phase(node) == "Cancelled", what="incident closed")
    assert reason(cluster, node) == "NodeUnselected"
    await eventually(lambda: not has_our_taint(cluster.node(node)), what="taint removed")
    await eventually(
        lambda: not any(key in node_annotations(cluster, node) for key in OURS),
        what="our annotations removed",
    )
    assert not (cluster.node(node) or {}).get("spec", {}).get("unschedulable")
    # The Event is posted after the node's writes: under load it can trail them (D78).
    incident = (cluster.remediation(node) or {})["metadata"]["name"]
    await eventually(
        lambda: (
            "NodeUnselected"
            in cluster.event_reasons(node, "Node") | cluster.event_reasons(incident)
        ),
        what="a NodeUnselected Event",
    )


async def test_an_administrators_cordon_survives_leaving_the_selector(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.api.store.patch("nodes", node, {"spec": {"unschedulable": True}})
    await open_protected_incident(cluster, node)

    cluster.api.store.patch(
        "nodes", node, {"metadata": {"labels": {"nvidia.com/gpu.present": "false"}}}
    )

    await eventually(lambda: reason(cluster, node) == "NodeUnselected", what="incident closed")
    await eventually(lambda: not has_our_taint(cluster.node(node)), what="taint removed")
    await eventually(
        lambda: "karpenter.sh/do-not-disrupt" not in node_annotations(cluster, node),
        what="do-not-disrupt removed",
    )
    assert cluster.node(node)["spec"]["unschedulable"] is True  # type: ignore[index]
