"""Recovery and the administrator's word, against the real operator process: a transient
fault is cordoned and then released; a cordon an administrator placed survives recovery; an
administrator's uncordon cancels the incident for good; excluded nodes and DryRun policies
change nothing."""

from __future__ import annotations

import asyncio
import time

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


async def stays(check: object, seconds: float, what: str) -> None:
    """`check` holds on every poll for `seconds` (a bounded watch of a negative property)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert callable(check)
        assert check(), what
        await asyncio.sleep(0.1)


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=CONFIG.with_(agent="kind"))
async def test_transient_fault_is_cordoned_then_released_and_uncordoned(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    operator = await cluster.start_operator("operator-a", "--retention", "3s")

    cluster.fleet.inject(node, "transient")

    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    await eventually(lambda: cluster.phase(node) == "Succeeded", what="recovery")
    status = cluster.remediation(node)["status"]  # type: ignore[index]
    assert status["reason"] == "Recovered"
    assert status["cordonedByUs"] is True
    spec = cluster.node(node)["spec"]  # type: ignore[index]
    assert not spec.get("unschedulable")
    assert not has_our_taint(cluster.node(node))
    await eventually(
        lambda: (
            {"FaultDetected", "FaultCleared", "Recovered"} <= cluster.event_reasons(node, "Node")
        ),
        what="the incident's Events on the node",
    )
    metrics = await operator.metrics()
    assert (operator.gauge(metrics, "gpuops_remediation_reaction_seconds_count") or 0) >= 1
    assert any(
        line.startswith(
            'gpuops_remediation_steps_finished_total{action="Cordon",outcome="Succeeded"'
        )
        and line.endswith(" 1.0")
        for line in metrics.splitlines()
    )
    assert operator.gauge(metrics, "gpuops_remediation_nodes_quarantined") == 0
    # Finished Remediations are deleted once older than --retention.
    await eventually(lambda: not cluster.remediations(node), what="retention clean-up")


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=CONFIG.with_(agent="kind"))
async def test_a_cordon_placed_by_an_administrator_survives_recovery(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.api.store.patch("nodes", node, {"spec": {"unschedulable": True}})
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()

    cluster.fleet.inject(node, "transient")

    await eventually(lambda: has_our_taint(cluster.node(node)), what="our taint")
    await eventually(lambda: cluster.phase(node) == "Succeeded", what="recovery")
    status = cluster.remediation(node)["status"]  # type: ignore[index]
    assert status["cordonedByUs"] is False
    assert cluster.node(node)["spec"]["unschedulable"] is True  # type: ignore[index]
    assert not has_our_taint(cluster.node(node))


async def test_an_administrator_uncordoning_cancels_and_we_stay_out(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("reason") == "LadderExhausted"
        ),
        what="the cordon recorded as done",
    )

    cluster.api.store.patch("nodes", node, {"spec": {"unschedulable": None}})

    await eventually(lambda: cluster.phase(node) == "Cancelled", what="cancellation")
    status = cluster.remediation(node)["status"]  # type: ignore[index]
    assert status["reason"] == "AdminUncordoned"
    await eventually(lambda: not has_our_taint(cluster.node(node)), what="our taint removed")
    # The fault is still there, yet the node is not cordoned again in this episode.
    await stays(
        lambda: not (cluster.node(node) or {}).get("spec", {}).get("unschedulable"),
        3.0,
        "the node was cordoned again after the administrator uncordoned it",
    )
    assert len(cluster.remediations(node)) == 1


async def test_an_excluded_node_is_left_alone(cluster: Cluster) -> None:
    excluded, control = cluster.node_names()[:2]
    cluster.api.store.patch(
        "nodes", excluded, {"metadata": {"labels": {"remediation.gpuops.io/exclude": "true"}}}
    )
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()

    cluster.fleet.inject(excluded, "xid-62")
    cluster.fleet.inject(control, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(control)), what="control cordoned")
    await stays(
        lambda: not (cluster.node(excluded) or {}).get("spec", {}).get("unschedulable"),
        2.0,
        "the excluded node was cordoned",
    )
    assert not has_our_taint(cluster.node(excluded))
    assert all(
        r["spec"]["nodeName"] != excluded or r["status"].get("phase") in (None, "Pending")
        for r in cluster.remediations()
    )


async def test_dry_run_records_decisions_but_changes_no_node(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    before = {n: cluster.node(n)["spec"] for n in nodes}  # type: ignore[index]
    cluster.apply(policy(mode="DryRun"))
    await cluster.start_operator()

    cluster.fleet.inject(nodes[0], "xid-62")

    remediation = await eventually(lambda: cluster.remediation(nodes[0]), what="a Remediation")
    assert remediation["status"]["dryRun"] is True
    await eventually(
        lambda: "DryRun" in cluster.event_reasons(nodes[0], "Node"),
        what="a DryRun Event explaining what would have been done",
    )
    await stays(
        lambda: all((cluster.node(n) or {}).get("spec") == before[n] for n in nodes),
        2.0,
        "a node spec changed in DryRun",
    )
    node_writes = [e for e in cluster.writes_by("operator-a") if e.resource in ("nodes", "pods")]
    assert node_writes == []
    assert not cluster.api.store.list("jobs", "remediation-system")
