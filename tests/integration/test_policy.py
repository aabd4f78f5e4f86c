"""Policy-level guarantees against the real operator process: an invalid update is rejected
while the last accepted version keeps working; a budget holds a second node back until the
first is done; the circuit breaker stops everything when too much of a pool faults at once."""

from __future__ import annotations

import pytest

from remediation_emulator.fleet.manifests import Shape
from tests.integration.conftest import (
    Cluster,
    cordon_only,
    eventually,
    is_cordoned_by_us,
    policy,
)
from tests.integration.test_ladder import blocker
from tests.integration.test_recovery import stays

pytestmark = pytest.mark.integration


async def test_invalid_update_is_rejected_and_the_accepted_version_keeps_working(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()
    await eventually(
        lambda: (cluster.condition("gpu", "Accepted") or {}).get("status") == "True",
        what="Accepted=True",
    )

    # Passes the CRD schema (the API server accepts it) but not the semantic rules.
    broken = policy(faults=cordon_only())
    broken["spec"]["faults"][0]["match"][0]["reason"] = "NvidiaXID(62"
    cluster.apply(broken)

    accepted = await eventually(
        lambda: (c := cluster.condition("gpu", "Accepted")) and c["status"] == "False" and c,
        what="Accepted=False",
    )
    assert accepted["reason"] == "PolicyInvalid"
    assert "spec.faults[0].match[0].reason" in accepted["message"]
    status = cluster.policy_status()
    assert status["lastAcceptedGeneration"] == 1
    assert status["observed"] == 3
    # The previous, valid spec still runs: a fault is still cordoned at once.
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon by old spec")
    operator = cluster.operators[0]
    assert 'gpuops_remediation_policy_accepted{policy="gpu"} 0.0' in await operator.metrics()


async def test_budget_holds_the_second_node_until_the_first_is_done(cluster: Cluster) -> None:
    first, second = cluster.node_names()[:2]
    pod, pdb = blocker(first)
    cluster.api.store.create("pods", pod, "training")
    cluster.api.store.create("poddisruptionbudgets", pdb, "training")
    ladder = [
        {"action": "Cordon", "escalateAfter": "0s"},
        {"action": "Drain", "timeout": "60s"},
    ]
    fault = cordon_only()[0] | {"ladder": ladder, "onExhausted": "Fail"}
    cluster.apply(policy(faults=[fault], budgets=[{"nodes": "1", "actions": ["Drain"]}]))
    await cluster.start_operator()

    cluster.fleet.inject(first, "xid-62")
    await eventually(
        lambda: (cluster.remediation(first) or {}).get("status", {}).get("step") == "Drain",
        what="first node draining",
    )
    cluster.fleet.inject(second, "xid-62")

    await eventually(
        lambda: (
            (s := (cluster.remediation(second) or {}).get("status", {})).get("phase") == "Blocked"
            and s.get("reason") == "BudgetExhausted"
        ),
        what="second node Blocked/BudgetExhausted",
    )
    status = cluster.remediation(second)["status"]  # type: ignore[index]
    assert status.get("step") in (None, "Cordon")
    assert is_cordoned_by_us(cluster.node(second))  # the cordon is not budgeted
    await eventually(
        lambda: "BudgetExhausted" in cluster.event_reasons(second, "Node"),
        what="a BudgetExhausted Event on the node",
    )
    blocked = 'gpuops_remediation_blocked{policy="gpu",reason="BudgetExhausted"} 1.0'

    async def blocked_metric() -> bool:
        return blocked in await cluster.operators[0].metrics()

    await eventually(blocked_metric, what="the blocked gauge")

    cluster.api.store.delete("poddisruptionbudgets", "blocker", "training")

    await eventually(lambda: cluster.phase(first) == "Failed", within=40, what="first done")
    await eventually(
        lambda: (cluster.remediation(second) or {}).get("status", {}).get("step") == "Drain",
        within=20,
        what="second node draining once the first is done",
    )


@pytest.mark.fleet(shape=Shape(nodes=10, nodes_per_training_job=5, pdb_every=0))
async def test_breaker_opens_when_30_percent_of_a_pool_faults_at_once(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    faulty = nodes[:4]  # 40% of the pool
    cluster.apply(
        policy(
            faults=cordon_only(tolerate="2s"),
            circuitBreaker={"maxUnhealthy": "30%", "minNodes": 3, "cooldown": "30s"},
        )
    )
    await cluster.start_operator()

    for node in faulty:
        cluster.fleet.inject(node, "xid-62")

    opened = await eventually(
        lambda: (c := cluster.condition("gpu", "CircuitOpen")) and c["status"] == "True" and c,
        what="CircuitOpen=True",
    )
    assert opened["reason"] == "CircuitOpen"
    assert cluster.policy_status()["circuitState"] == "Open"
    await stays(
        lambda: (
            not any((cluster.node(n) or {}).get("spec", {}).get("unschedulable") for n in nodes)
        ),
        3.0,
        "a node was cordoned while the breaker was open",
    )
    metrics = await cluster.operators[0].metrics()
    assert 'gpuops_remediation_circuit_open{group="",policy="gpu"} 1.0' in metrics


async def test_replace_waits_for_an_administrators_approval(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    ladder = [{"action": "Cordon", "escalateAfter": "0s"}, {"action": "Replace", "timeout": "60s"}]
    fault = cordon_only()[0] | {"ladder": ladder}
    fault.pop("onExhausted")
    cluster.apply(
        policy(
            faults=[fault],
            requireApproval=["Replace"],
            actions={"replace": {"provider": "DeleteNode"}},
        )
    )
    await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")

    await eventually(
        lambda: (
            (s := (cluster.remediation(node) or {}).get("status", {})).get("phase") == "Blocked"
            and s.get("reason") == "AwaitingApproval"
        ),
        what="Blocked/AwaitingApproval",
    )
    assert cluster.node(node) is not None
    name = cluster.remediation(node)["metadata"]["name"]  # type: ignore[index]

    cluster.api.store.patch(
        "remediations",
        name,
        {"metadata": {"annotations": {"remediation.gpuops.io/approve": "Replace"}}},
    )

    done = await eventually(
        lambda: (
            (r := cluster.api.store.find("remediations", name))
            and r["status"].get("phase") == "Succeeded"
            and r
        ),
        within=30,
        what="replaced",
    )
    assert done["status"]["reason"] == "NodeReplaced"
    assert cluster.node(node) is None
