"""High availability on a real kube-apiserver: two replicas share a real Lease; the leader is
killed (SIGKILL, no release) in the middle of a drain that a real PodDisruptionBudget holds
up; the standby takes the Lease over once it has expired and finishes the ladder without
repeating a step or opening a second Remediation."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Scenario
from tests.e2e.test_ladder import blocker, pdb_settled, pod_phase
from tests.integration.conftest import eventually, is_cordoned_by_us

LADDER = [
    {"action": "Cordon", "escalateAfter": "0s"},
    {"action": "Drain", "timeout": "60s"},
]


def drain_policy(e2e: Scenario) -> dict[str, Any]:
    fault = e2e.policy()["spec"]["faults"][0] | {"ladder": LADDER, "onExhausted": "Fail"}
    return e2e.policy(faults=[fault])


def lease(e2e: Scenario) -> dict[str, Any]:
    found = e2e.admin.find(
        f"/apis/coordination.k8s.io/v1/namespaces/{e2e.namespace}/leases/remediation-operator"
    )
    spec: dict[str, Any] = (found or {}).get("spec") or {}
    return spec


async def test_the_leader_killed_mid_drain_is_replaced_by_the_standby(scenario: Scenario) -> None:
    e2e = scenario
    training = e2e.shape.training_namespace
    node = e2e.node_names()[0]
    pod, pdb = blocker(node, training)
    e2e.admin.create(f"/api/v1/namespaces/{training}/pods", pod)
    e2e.admin.create(f"/apis/policy/v1/namespaces/{training}/poddisruptionbudgets", pdb)
    await eventually(lambda: pod_phase(e2e, training, "blocker") == "Running", what="blocker")
    await eventually(lambda: pdb_settled(e2e, training), what="PDB status from the controller")
    e2e.apply(drain_policy(e2e))
    await e2e.start_operator("operator-a")
    await eventually(lambda: lease(e2e).get("holderIdentity") == "operator-a", what="a leads")
    standby = await e2e.start_operator("operator-b")
    assert await standby.probe("/readyz") == 200  # a standby is ready too
    assert "gpuops_remediation_leader 0.0" in await standby.metrics()

    e2e.fleet.inject(node, "xid-62")
    await eventually(
        lambda: (e2e.remediation(node) or {}).get("status", {}).get("step") == "Drain",
        what="drain started",
    )
    leader = await e2e.leader()
    assert leader.identity == "operator-a"
    await leader.kill()  # SIGKILL: no clean-up, the Lease is not released
    assert is_cordoned_by_us(e2e.node(node))

    await eventually(
        lambda: lease(e2e).get("holderIdentity") == "operator-b", within=30, what="takeover"
    )
    assert lease(e2e)["leaseTransitions"] >= 1
    e2e.admin.delete(f"/apis/policy/v1/namespaces/{training}/poddisruptionbudgets/blocker")

    await eventually(lambda: e2e.phase(node) == "Failed", within=60, what="ladder done")
    steps = (e2e.remediation(node) or {})["status"]["steps"]
    assert [(s["action"], s["attempt"]) for s in steps] == [("Cordon", 1), ("Drain", 1)]
    assert steps[1]["outcome"] == "Succeeded"
    assert len(e2e.remediations(node)) == 1
    assert pod_phase(e2e, training, "blocker") is None
    assert is_cordoned_by_us(e2e.node(node))
    assert "gpuops_remediation_leader 1.0" in await standby.metrics()
