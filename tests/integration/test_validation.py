"""Validation before return to service against the real operator process (issue 15, D37).

The emulated fleet runs the validation Job: it fails while the node shows its fault and after
a repair that left a latent one (the `row-remap-failure` class: a reboot clears its XID but
DCGM diagnostics still fail), and passes otherwise."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.integration.conftest import (
    CONFIG,
    FAULT_REASONS,
    JOB_TEMPLATE,
    NAMESPACE,
    Cluster,
    eventually,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.integration

REBOOTS_FIX = CONFIG.with_(reboot_clears=1.0)


def reboot_then_replace(validation: dict[str, Any]) -> dict[str, Any]:
    return policy(
        faults=[
            {
                "name": "gpu-xid",
                "match": [
                    {"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}
                ],
                "tolerate": "0s",
                "ladder": [
                    {"action": "Cordon"},
                    {"action": "Reboot", "timeout": "30s", "escalateAfter": "30s"},
                    {"action": "Replace", "timeout": "30s"},
                ],
            }
        ],
        recovery={"healthyFor": "2s"},
        validation=validation,
    )


def validation_jobs(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        j
        for j in cluster.api.store.list("jobs", NAMESPACE)
        if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "Validate"
    ]


@pytest.mark.fleet(config=REBOOTS_FIX)
async def test_a_reboot_followed_by_a_failing_validation_escalates_to_replace(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    nccl: dict[str, Any] = copy.deepcopy(JOB_TEMPLATE)  # a user's own check (an NCCL test)
    nccl["spec"]["template"]["spec"]["containers"][0]["name"] = "nccl-tests"
    cluster.apply(reboot_then_replace({"after": ["Reboot"], "level": 3, "jobTemplate": nccl}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "row-remap-failure")

    await eventually(lambda: validation_jobs(cluster), within=40, what="a Validate Job")
    job = validation_jobs(cluster)[0]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == node
    (container,) = pod["containers"]
    assert container["name"] == "nccl-tests"
    assert {"name": "REMEDIATION_DIAG_LEVEL", "value": "3"} in container["env"]

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=60, what="replaced")
    remediation = cluster.remediation(node)
    assert remediation is not None
    status = remediation["status"]
    assert status["reason"] == "NodeReplaced"
    steps = status["steps"]
    assert [s["action"] for s in steps] == ["Cordon", "Reboot", "Validate", "Replace"]
    validate = steps[2]
    assert validate["outcome"] == "PermanentFailure"
    assert validate["reason"] == "ValidationFailed"
    assert validate["message"].startswith("Validation failed after ")
    assert "escalating to Replace" in validate["message"]
    assert validate["startedAt"]
    assert validate["finishedAt"]
    await eventually(
        lambda: {"ValidationStarted", "ValidationFailed"} <= cluster.event_reasons(node, "Node"),
        what="validation Events on the Node",
    )
    metrics = await cluster.operators[0].metrics()
    assert 'action="Validate",outcome="PermanentFailure"' in metrics


@pytest.mark.fleet(config=REBOOTS_FIX)
async def test_a_passing_validation_releases_the_node_after_probation(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(reboot_then_replace({}))  # the default: validate.yaml of --job-templates
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    await eventually(lambda: validation_jobs(cluster), within=40, what="a Validate Job")
    (container,) = validation_jobs(cluster)[0]["spec"]["template"]["spec"]["containers"]
    assert {"name": "REMEDIATION_DIAG_LEVEL", "value": "2"} in container["env"]
    await eventually(lambda: cluster.phase(node) == "Succeeded", within=40, what="recovered")
    status = cluster.remediation(node)["status"]  # type: ignore[index]
    assert status["reason"] == "Recovered"
    assert [s["action"] for s in status["steps"]] == ["Cordon", "Reboot", "Validate"]
    validate = status["steps"][2]
    assert (validate["outcome"], validate["reason"]) == ("Succeeded", "ValidationPassed")
    assert validate["message"].startswith("Validation passed in ")
    await eventually(
        lambda: not (cluster.node(node) or {}).get("spec", {}).get("unschedulable"),
        what="uncordoned",
    )
    assert "ValidationPassed" in cluster.event_reasons(node, "Node")
