"""A Node as large as the API server accepts does not blind the operator (issue 24, item 1).

Against the real operator process and the emulator: a 1,000,000-character condition message
(the EKS node monitoring agent appends each finding to its condition's message) on a node no
policy selects, and then on a selected node; a fault on a selected node is still detected and
the node cordoned, and `/healthz` stays ok because nothing died."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.conftest import Cluster, cordon_only, eventually, is_cordoned_by_us, policy

pytestmark = pytest.mark.hostile

MESSAGE = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus. " * 16_130  # ~1,000,000


def large_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": [
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "True",
                    "reason": "AcceleratedHardwareIsReady",
                    "message": MESSAGE[:1_000_000],
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
            ]
        },
    }


async def test_a_megabyte_node_outside_the_selector_does_not_stop_detection(
    cluster: Cluster,
) -> None:
    first, second = cluster.node_names()[:2]
    cluster.apply(policy(faults=cordon_only()))
    operator = await cluster.start_operator()

    cluster.api.store.create("nodes", large_node("cpu-big", {"role": "cpu"}))
    cluster.fleet.inject(first, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(first)), within=15, what="cordon")
    # The large node changes again (a watch MODIFIED event of a megabyte), then another fault.
    cluster.api.store.patch("nodes", "cpu-big", {"metadata": {"labels": {"touched": "yes"}}})
    cluster.fleet.inject(second, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(second)), within=15, what="cordon")
    assert await operator.probe("/healthz") == 200
    # Read whole, not survived by a restart of the watch (the supervisor would also recover).
    restarts = 'gpuops_remediation_task_restarts_total{task="node-watch"} 0.0'
    assert restarts in (await operator.metrics()).splitlines()


async def test_a_megabyte_message_on_a_selected_node_is_remediated(cluster: Cluster) -> None:
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()
    body = large_node("gpu-big", {"nvidia.com/gpu.present": "true"})
    body["status"]["conditions"][0].update(status="False", reason="NvidiaXID79Error")
    cluster.api.store.create("nodes", body)

    await eventually(lambda: is_cordoned_by_us(cluster.node("gpu-big")), within=15, what="cordon")
    await eventually(
        lambda: (
            (cluster.remediation("gpu-big") or {}).get("status", {}).get("reason")
            == "LadderExhausted"
        ),
        within=15,
        what="the cordon recorded",
    )
    status = cluster.remediation("gpu-big")["status"]  # type: ignore[index]
    assert len(str(status)) < 64_000  # the message is not copied whole (bounded writes)
