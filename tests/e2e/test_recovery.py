"""Recovery and the administrator's word on a real kube-apiserver: a transient fault is
cordoned and then released; a cordon an administrator placed (kubectl cordon: a strategic
merge patch of spec.unschedulable) survives recovery; an administrator's uncordon cancels the
incident for good."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import E2E_CONFIG, Scenario
from tests.integration.conftest import (
    cordon_only,
    eventually,
    has_our_taint,
    is_cordoned_by_us,
)
from tests.integration.test_recovery import stays


def kubectl_cordon(e2e: Scenario, node: str, unschedulable: bool) -> None:
    """What `kubectl cordon` / `kubectl uncordon` send."""
    e2e.admin.patch(
        f"/api/v1/nodes/{node}",
        {"spec": {"unschedulable": True if unschedulable else None}},
        kind="strategic",
    )


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=E2E_CONFIG.with_(agent="kind"))
async def test_transient_fault_is_cordoned_then_released_and_uncordoned(scenario: Scenario) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(e2e.policy(faults=cordon_only()))
    operator = await e2e.start_operator("operator-a")

    e2e.fleet.inject(node, "transient")

    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), what="cordon")
    await eventually(lambda: e2e.phase(node) == "Succeeded", within=30, what="recovery")
    status = (e2e.remediation(node) or {})["status"]
    assert status["reason"] == "Recovered"
    assert status["cordonedByUs"] is True
    assert not (e2e.node(node) or {})["spec"].get("unschedulable")
    assert not has_our_taint(e2e.node(node))
    await eventually(
        lambda: {"FaultDetected", "FaultCleared", "Recovered"} <= e2e.event_reasons(node, "Node"),
        what="the incident's Events on the node",
    )
    metrics = await operator.metrics()
    assert operator.gauge(metrics, "gpuops_remediation_nodes_quarantined") == 0


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=E2E_CONFIG.with_(agent="kind"))
async def test_a_cordon_placed_by_an_administrator_survives_recovery(scenario: Scenario) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    kubectl_cordon(e2e, node, True)
    e2e.apply(e2e.policy(faults=cordon_only()))
    await e2e.start_operator()

    e2e.fleet.inject(node, "transient")

    await eventually(lambda: has_our_taint(e2e.node(node)), what="our taint")
    await eventually(lambda: e2e.phase(node) == "Succeeded", within=30, what="recovery")
    status = (e2e.remediation(node) or {})["status"]
    assert status["cordonedByUs"] is False
    assert (e2e.node(node) or {})["spec"]["unschedulable"] is True
    assert not has_our_taint(e2e.node(node))


async def test_an_administrator_uncordoning_cancels_and_we_stay_out(scenario: Scenario) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(e2e.policy(faults=cordon_only()))
    await e2e.start_operator()
    e2e.fleet.inject(node, "xid-62")
    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), what="cordon")
    await eventually(
        lambda: (e2e.remediation(node) or {}).get("status", {}).get("reason") == "LadderExhausted",
        what="the cordon recorded as done",
    )

    kubectl_cordon(e2e, node, False)

    await eventually(lambda: e2e.phase(node) == "Cancelled", what="cancellation")
    assert (e2e.remediation(node) or {})["status"]["reason"] == "AdminUncordoned"
    await eventually(lambda: not has_our_taint(e2e.node(node)), what="our taint removed")
    # The fault is still there, yet the node is not cordoned again in this episode.
    await stays(
        lambda: not (e2e.node(node) or {}).get("spec", {}).get("unschedulable"),
        3.0,
        "the node was cordoned again after the administrator uncordoned it",
    )
    assert len(e2e.remediations(node)) == 1
