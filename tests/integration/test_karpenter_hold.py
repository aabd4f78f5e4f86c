"""A node the operator holds cordoned is kept from Karpenter's consolidation (issue 22, D56).

A catch-all fault whose ladder only cordons and holds for a human, or a long Cordon window,
keeps the node cordoned for hours; Karpenter consolidates cordoned nodes unless they carry
`karpenter.sh/do-not-disrupt` (karpenter `pkg/controllers/state/statenode.go`). The operator
sets it with the cordon and removes it when it gives the node back.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import (
    CONFIG,
    Cluster,
    cordon_only,
    eventually,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.integration
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def annotation(cluster: Cluster, node: str) -> str | None:
    return ((cluster.node(node) or {}).get("metadata", {}).get("annotations") or {}).get(
        DO_NOT_DISRUPT
    )


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=CONFIG.with_(agent="kind"))
async def test_a_node_held_cordoned_is_not_disruptable_until_released(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordoned")
    await eventually(lambda: annotation(cluster, node) == "true", what="do-not-disrupt set")
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("reason") == "LadderExhausted"
        ),
        what="held for a human",
    )
    assert annotation(cluster, node) == "true"

    cluster.fleet.clear(node)

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=30, what="recovered")
    await eventually(lambda: annotation(cluster, node) is None, what="do-not-disrupt removed")
