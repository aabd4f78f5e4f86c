"""No single object blinds the operator, on a real kube-apiserver (issue 24, items 1 and 3): a
Node as large as etcd accepts (a 1.4 MiB condition message: its watch event is longer than
aiohttp's line limit) does not stop fault detection on the other nodes; a node relabelled out
of the policy's selector mid-incident closes `NodeUnselected` and is given back."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from tests.e2e.conftest import Scenario
from tests.integration.conftest import cordon_only, eventually, has_our_taint, is_cordoned_by_us

MESSAGE_SIZE = 1_400_000
RESTARTS = 'gpuops_remediation_task_restarts_total{task="node-watch"}'


async def test_a_large_unselected_node_does_not_stop_detection(scenario: Scenario) -> None:
    e2e = scenario
    first, second = e2e.node_names()[:2]
    e2e.apply(e2e.policy(faults=cordon_only()))
    operator = await e2e.start_operator()
    big = f"{e2e.shape.node_prefix}-big"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    e2e.admin.create("/api/v1/nodes", {"metadata": {"name": big, "labels": {"role": "cpu"}}})
    try:
        e2e.admin.patch(
            f"/api/v1/nodes/{big}/status",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "AcceleratedHardwareReady",
                            "status": "True",
                            "reason": "AcceleratedHardwareIsReady",
                            "message": "<" * MESSAGE_SIZE,  # JSON-escaped: a ~8 MiB watch line
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ]
                }
            },
            kind="strategic",
        )
        e2e.fleet.inject(first, "xid-62")
        await eventually(lambda: is_cordoned_by_us(e2e.node(first)), within=30, what="cordon")
        e2e.admin.patch(f"/api/v1/nodes/{big}", {"metadata": {"labels": {"touched": "yes"}}})
        e2e.fleet.inject(second, "xid-62")
        await eventually(lambda: is_cordoned_by_us(e2e.node(second)), within=30, what="cordon")
        assert await operator.probe("/healthz") == 200
        # Read whole, not survived by a restart of the watch (handlers.supervision would
        # also recover, at the cost of a relist): the watch never ended.
        assert RESTARTS + " 0.0" in (await operator.metrics()).splitlines()
    finally:
        with contextlib.suppress(Exception):
            e2e.admin.delete(f"/api/v1/nodes/{big}")


async def test_a_node_relabelled_out_of_the_selector_is_given_back(scenario: Scenario) -> None:
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

    e2e.admin.patch(
        f"/api/v1/nodes/{node}", {"metadata": {"labels": {"karpenter.sh/nodepool": "elsewhere"}}}
    )

    await eventually(lambda: e2e.phase(node) == "Cancelled", within=30, what="incident closed")
    assert (e2e.remediation(node) or {})["status"]["reason"] == "NodeUnselected"
    await eventually(lambda: not has_our_taint(e2e.node(node)), what="our taint removed")
    spec = (e2e.node(node) or {})["spec"]
    assert not spec.get("unschedulable")
    annotations = (e2e.node(node) or {})["metadata"].get("annotations") or {}
    assert "remediation.gpuops.io/quarantined-by" not in annotations
