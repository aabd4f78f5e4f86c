"""Crash safety and high availability of the real operator process: killed mid-drain and
restarted, it resumes without repeating the cordon or losing the step; with two replicas only
the Lease holder ever writes, and the other takes over when the holder dies; a clean stop
releases the Lease; health and metrics endpoints answer."""

from __future__ import annotations

import pytest

from remediation_emulator.requestlog import Entry
from tests.integration.conftest import (
    NAMESPACE,
    Cluster,
    eventually,
    is_cordoned_by_us,
    policy,
)
from tests.integration.test_ladder import blocker

pytestmark = pytest.mark.integration

LADDER = [
    {"action": "Cordon", "escalateAfter": "0s"},
    {"action": "Drain", "timeout": "60s"},
]


def drain_policy() -> dict[str, object]:
    fault = policy()["spec"]["faults"][0] | {"ladder": LADDER, "onExhausted": "Fail"}
    return policy(faults=[fault])


def acting_writes(cluster: Cluster, user: str) -> list[Entry]:
    """Writes that act on the fleet (everything but the leader election itself)."""
    return [e for e in cluster.writes_by(user) if e.resource != "leases"]


async def test_killed_mid_drain_resumes_without_repeating_a_step(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    pod, pdb = blocker(node)
    cluster.api.store.create("pods", pod, "training")
    cluster.api.store.create("poddisruptionbudgets", pdb, "training")
    cluster.apply(drain_policy())
    first = await cluster.start_operator("operator-a")
    cluster.fleet.inject(node, "xid-62")
    await eventually(
        lambda: (cluster.remediation(node) or {}).get("status", {}).get("step") == "Drain",
        what="drain started",
    )

    await first.kill()  # SIGKILL: no clean-up, the Lease is not released
    assert is_cordoned_by_us(cluster.node(node))
    second = await cluster.start_operator("operator-b")
    cluster.api.store.delete("poddisruptionbudgets", "blocker", "training")

    await eventually(lambda: cluster.phase(node) == "Failed", within=40, what="ladder done")
    steps = cluster.remediation(node)["status"]["steps"]  # type: ignore[index]
    assert [(s["action"], s["attempt"]) for s in steps] == [("Cordon", 1), ("Drain", 1)]
    assert steps[1]["outcome"] == "Succeeded"
    assert len(cluster.remediations(node)) == 1
    # The new leader did not cordon again: it never patched the node's spec... except to
    # leave it cordoned (the ladder failed: the node stays quarantined for a human).
    assert is_cordoned_by_us(cluster.node(node))
    assert acting_writes(cluster, "operator-b"), "the second replica never acted"
    await second.stop()


async def test_two_replicas_never_both_act_and_the_standby_takes_over(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.apply(drain_policy())
    a = await cluster.start_operator("operator-a")
    await eventually(
        lambda: (
            (cluster.api.store.find("leases", "remediation-operator", NAMESPACE) or {})
            .get("spec", {})
            .get("holderIdentity")
            == "operator-a"
        ),
        what="operator-a holds the Lease",
    )
    b = await cluster.start_operator("operator-b")
    assert await b.probe("/readyz") == 200  # a standby is ready too
    assert "gpuops_remediation_leader 0.0" in await b.metrics()
    assert "gpuops_remediation_leader 1.0" in await a.metrics()

    cluster.fleet.inject(nodes[0], "xid-62")
    await eventually(lambda: cluster.phase(nodes[0]) == "Failed", within=40, what="first done")
    assert acting_writes(cluster, "operator-a")
    assert not acting_writes(cluster, "operator-b")

    await a.kill()
    cluster.fleet.inject(nodes[1], "xid-62")
    await eventually(lambda: cluster.phase(nodes[1]) == "Failed", within=40, what="takeover")
    lease = cluster.api.store.get("leases", "remediation-operator", NAMESPACE)
    assert lease["spec"]["holderIdentity"] == "operator-b"
    assert lease["spec"]["leaseTransitions"] >= 1
    last_a = max(e.time for e in acting_writes(cluster, "operator-a"))
    first_b = min(e.time for e in acting_writes(cluster, "operator-b"))
    assert last_a < first_b


async def test_clean_stop_releases_the_lease(cluster: Cluster) -> None:
    cluster.apply(drain_policy())
    operator = await cluster.start_operator("operator-a")
    assert await operator.probe("/healthz") == 200
    await eventually(
        lambda: (
            (cluster.api.store.find("leases", "remediation-operator", NAMESPACE) or {})
            .get("spec", {})
            .get("holderIdentity")
            == "operator-a"
        ),
        what="operator-a holds the Lease",
    )

    assert await operator.stop() == 0

    lease = cluster.api.store.get("leases", "remediation-operator", NAMESPACE)
    assert not lease["spec"].get("holderIdentity")
