"""A deleted RemediationPolicy gives its nodes back (D13): its open Remediations close
Cancelled/PolicyDeleted, our taint and do-not-disrupt come off, and a node is uncordoned only
if we cordoned it; also when the policy was deleted while no operator was running."""

from __future__ import annotations

import pytest

from tests.integration.conftest import (
    Cluster,
    cordon_only,
    eventually,
    has_our_taint,
    is_cordoned_by_us,
    policy,
)

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


def closed_by_deletion(cluster: Cluster, node: str) -> bool:
    remediation = cluster.remediation(node) or {}
    status = remediation.get("status") or {}
    return status.get("phase") == "Cancelled" and status.get("reason") == "PolicyDeleted"


async def test_deleting_the_policy_closes_its_incidents_and_releases_the_nodes(
    cluster: Cluster,
) -> None:
    ours, admins = cluster.node_names()[:2]
    cluster.api.store.patch("nodes", admins, {"spec": {"unschedulable": True}})
    cluster.apply(policy(faults=cordon_only()))
    operator = await cluster.start_operator()
    cluster.fleet.inject(ours, "xid-62")
    cluster.fleet.inject(admins, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(ours)), what="our cordon")
    await eventually(lambda: has_our_taint(cluster.node(admins)), what="our taint")

    cluster.api.store.delete("remediationpolicies", "gpu")

    await eventually(lambda: closed_by_deletion(cluster, ours), what="closed PolicyDeleted")
    await eventually(lambda: closed_by_deletion(cluster, admins), what="closed PolicyDeleted")
    await eventually(
        lambda: not (cluster.node(ours) or {})["spec"].get("unschedulable"), what="uncordon"
    )
    assert not has_our_taint(cluster.node(ours))
    await eventually(lambda: not has_our_taint(cluster.node(admins)), what="taint removed")
    # The administrator's cordon is not ours to lift.
    assert cluster.node(admins)["spec"]["unschedulable"] is True  # type: ignore[index]
    remediation = cluster.remediation(ours)
    assert remediation is not None
    await eventually(
        lambda: "PolicyDeleted" in cluster.event_reasons(ours, "Node"),
        what="a PolicyDeleted Event on the node",
    )
    # The fault is still there, but no policy: nothing new opens, and the worker stops.
    assert len(cluster.remediations(ours)) == 1
    await eventually(
        lambda: "policy_worker_retired" in operator.log.read_text(), what="the worker retired"
    )


async def test_a_policy_deleted_while_the_operator_was_down_is_noticed_at_start(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    operator = await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="our cordon")
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("phase") == "Blocked"
            or (cluster.remediation(node) or {}).get("status", {}).get("reason")
            == "LadderExhausted"
        ),
        what="the cordon recorded",
    )
    await operator.kill()

    cluster.api.store.delete("remediationpolicies", "gpu")
    await cluster.start_operator("operator-b")

    await eventually(lambda: closed_by_deletion(cluster, node), what="closed PolicyDeleted")
    await eventually(lambda: not is_cordoned_by_us(cluster.node(node)), what="released")
    assert not has_our_taint(cluster.node(node))
    assert not (cluster.node(node) or {})["spec"].get("unschedulable")
