"""Against the real operator process: overlapping policies open one incident per node, and a
node opts out with the exclude key as an annotation as well as a label (issue 12, defects 3
and 14)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.conftest import (
    CONFIG,
    Cluster,
    cordon_only,
    eventually,
    has_our_taint,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.integration

EXCLUDE = "remediation.gpuops.io/exclude"


async def stays(check: Callable[[], bool], seconds: float, what: str) -> None:
    """`check` holds on every poll for `seconds` (a bounded watch of a negative property)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        await asyncio.sleep(0.1)


async def test_a_node_annotated_to_opt_out_is_left_alone(cluster: Cluster) -> None:
    excluded, control = cluster.node_names()[:2]
    cluster.api.store.patch("nodes", excluded, {"metadata": {"annotations": {EXCLUDE: "true"}}})
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()

    cluster.fleet.inject(excluded, "xid-62")
    cluster.fleet.inject(control, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(control)), what="control cordoned")
    await stays(
        lambda: not (cluster.node(excluded) or {}).get("spec", {}).get("unschedulable"),
        2.0,
        "the annotated node was cordoned",
    )
    assert not has_our_taint(cluster.node(excluded))
    assert all(
        r["spec"]["nodeName"] != excluded or r["status"].get("phase") in (None, "Pending")
        for r in cluster.remediations()
    )


async def test_an_opt_out_annotation_added_mid_incident_stops_the_ladder(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")

    cluster.api.store.patch("nodes", node, {"metadata": {"annotations": {EXCLUDE: "true"}}})

    await eventually(
        lambda: (cluster.remediation(node) or {}).get("status", {}).get("reason") == "NodeExcluded",
        what="the incident held for the opt-out",
    )


def open_incidents(cluster: Cluster) -> dict[str, list[str]]:
    by_node: dict[str, list[str]] = {}
    for r in cluster.remediations():
        if (r.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Cancelled"):
            by_node.setdefault(r["spec"]["nodeName"], []).append(r["spec"]["policyName"])
    return by_node


async def test_two_overlapping_policies_open_one_incident_on_a_node(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy("light", weight=1, faults=cordon_only()))
    cluster.apply(policy("heavy", weight=10, faults=cordon_only()))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    await stays(
        lambda: all(len(p) == 1 for p in open_incidents(cluster).values()),
        3.0,
        "two incidents were open on one node",
    )
    assert open_incidents(cluster) == {node: ["heavy"]}
    assert {r["spec"]["policyName"] for r in cluster.remediations()} == {"heavy"}
    annotations = (cluster.node(node) or {}).get("metadata", {}).get("annotations") or {}
    assert annotations.get("remediation.gpuops.io/quarantined-by") == "heavy"


async def test_the_losing_policy_shows_the_overlap_in_its_status(cluster: Cluster) -> None:
    """Issue 12, defect 3: the policy that loses a node says so, naming the owner."""
    nodes = len(cluster.node_names())
    cluster.apply(policy("light", weight=1, faults=cordon_only()))
    cluster.apply(policy("heavy", weight=10, faults=cordon_only()))
    await cluster.start_operator()

    def overlapping(name: str) -> dict[str, Any]:
        return cluster.condition(name, "Overlapping") or {}

    await eventually(
        lambda: (
            overlapping("light").get("status") == "True"
            and overlapping("heavy").get("status") == "False"
        ),
        what="the Overlapping conditions",
    )
    light = cluster.policy_status("light")
    assert light["overlappedNodes"] == nodes
    assert light["overlappedBy"] == ["heavy"]
    assert overlapping("light")["reason"] == "OwnedByOtherPolicy"
    assert "owned by heavy" in overlapping("light")["message"]
    heavy = cluster.policy_status("heavy")
    assert heavy["overlappedNodes"] == 0
    assert heavy["overlappedBy"] == []

    cluster.api.store.delete("remediationpolicies", "heavy")
    await eventually(
        lambda: (
            overlapping("light").get("status") == "False"
            and cluster.policy_status("light").get("overlappedNodes") == 0
        ),
        what="the overlap gone with the heavier policy",
    )


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=CONFIG.with_(agent="kind"))
async def test_an_open_incident_keeps_its_node_until_it_ends_then_the_heavier_policy_owns_it(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy("light", weight=1, faults=cordon_only()))
    await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: open_incidents(cluster) == {node: ["light"]}, what="light's incident")

    cluster.apply(policy("heavy", weight=10, faults=cordon_only()))
    await stays(
        lambda: open_incidents(cluster) == {node: ["light"]},
        2.0,
        "the heavier policy took a node whose incident was still open",
    )

    cluster.fleet.clear(node)
    await eventually(lambda: not open_incidents(cluster), what="light's incident ended")
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: open_incidents(cluster) == {node: ["heavy"]}, what="heavy owns it")


def silence_only(stale_after: str = "3s") -> list[dict[str, Any]]:
    """A fault that fires only when the GPU agent's condition is not seen to change."""
    return [
        {
            "name": "agent-silent",
            "match": [{"type": "AcceleratedHardwareReady", "staleAfter": stale_after}],
            "tolerate": "0s",
            "ladder": [{"action": "Cordon"}],
            "onExhausted": "Hold",
        }
    ]


async def test_a_silent_agent_is_cordoned_on_our_clock_and_a_live_one_never_is(
    cluster: Cluster,
) -> None:
    """Defect 4: staleness is judged from when the operator saw the condition change, and going
    stale (which no watch event announces) is noticed when it happens."""
    silent, live = cluster.node_names()[:2]
    cluster.apply(policy(faults=silence_only()))
    await cluster.start_operator()
    cluster.fleet.inject(silent, "agent-silent")

    await eventually(lambda: is_cordoned_by_us(cluster.node(silent)), what="silent cordoned")
    await stays(lambda: not is_cordoned_by_us(cluster.node(live)), 4.0, "a live agent was cordoned")
    message = ((cluster.remediation(silent) or {}).get("status") or {}).get("message", "")
    events = " ".join(e.get("message", "") for e in cluster.events(silent))
    assert "AcceleratedHardwareReady" in message + events
