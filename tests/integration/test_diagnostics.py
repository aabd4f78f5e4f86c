"""Diagnostics before a Reboot against the real operator process (issue 15, D39): a Job pinned
to the node writes to the policy's claim first, the Remediation's status says where, and the
reboot follows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import (
    CONFIG,
    FAULT_REASONS,
    NAMESPACE,
    Cluster,
    eventually,
    policy,
)

pytestmark = pytest.mark.integration


def jobs_of(cluster: Cluster, action: str) -> list[dict[str, Any]]:
    return [
        j
        for j in cluster.api.store.list("jobs", NAMESPACE)
        if j["metadata"]["labels"].get("remediation.gpuops.io/action") == action
    ]


@pytest.mark.fleet(config=CONFIG.with_(reboot_clears=1.0))
async def test_diagnostics_are_collected_before_a_reboot_and_status_says_where(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    boot_before = cluster.node(node)["status"]["nodeInfo"]["bootID"]  # type: ignore[index]
    fault = {
        "name": "gpu-xid",
        "match": [{"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}],
        "tolerate": "0s",
        "ladder": [
            {"action": "Cordon"},
            {"action": "Reboot", "timeout": "30s", "escalateAfter": "30s"},
            {"action": "Replace", "timeout": "30s"},
        ],
    }
    diagnostics = {"destination": "pvc://gpu-diagnostics/reports", "before": ["Reboot"]}
    cluster.apply(policy(faults=[fault], diagnostics=diagnostics))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    (job,) = await eventually(lambda: jobs_of(cluster, "Diagnose"), within=30, what="Diagnose Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == node
    assert {"name": "diagnostics", "persistentVolumeClaim": {"claimName": "gpu-diagnostics"}} in (
        pod["volumes"]
    )
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    name = job["metadata"]["annotations"]["remediation.gpuops.io/remediation"]
    location = f"pvc://gpu-diagnostics/reports/{name}/diagnose-1"
    assert env["REMEDIATION_DIAGNOSTICS_LOCATION"] == location
    assert env["REMEDIATION_DIAGNOSTICS_DIR"] == f"/diagnostics/reports/{name}/diagnose-1"

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=40, what="recovered")
    status = cluster.remediation(node)["status"]  # type: ignore[index]
    assert [s["action"] for s in status["steps"]] == ["Cordon", "Diagnose", "Reboot"]
    diagnose = status["steps"][1]
    assert diagnose["location"] == location
    assert (diagnose["outcome"], diagnose["reason"]) == ("Succeeded", "DiagnosticsCollected")
    assert diagnose["message"].startswith(f"Diagnostics collected to {location} in ")
    # The reboot started only once the diagnostics were over.
    assert diagnose["finishedAt"] <= status["steps"][2]["startedAt"]
    assert cluster.node(node)["status"]["nodeInfo"]["bootID"] != boot_before  # type: ignore[index]
    await eventually(
        lambda: (
            {"CollectingDiagnostics", "DiagnosticsCollected"} <= cluster.event_reasons(node, "Node")
        ),
        what="diagnostics Events on the Node",
    )
