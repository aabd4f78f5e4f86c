"""The operator scenarios whose API requests define what the operator needs.

Each scenario is a policy over its own node(s) (selected by hostname), so they run at the same
time against one operator deployment and together take about as long as the slowest one. They
cover every code path that talks to the API server: kopf's startup scans, leader election with
a standby replica taking over, the whole ladder (eviction held by a PodDisruptionBudget then
forced, GPU-reset and reboot Jobs, Karpenter replacement), DeleteNode replacement after an
approval, a NodeClaim found by providerID, a DryRun policy, a transient fault that recovers
and is uncordoned (twice, so a repeated Event is counted), retention deleting finished
Remediations, a budget that blocks a second node, an invalid policy update and a deleted policy.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.conftest import (
    NAMESPACE,
    Cluster,
    cordon_only,
    eventually,
    is_cordoned_by_us,
    policy,
)

RETENTION = "3s"
"""Finished Remediations are deleted this long after they finish (exercises deletion)."""


def on_nodes(name: str, nodes: list[str], **spec: Any) -> dict[str, Any]:
    """The shared test policy, restricted to `nodes` by their hostname label."""
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(nodes)}
        ]
    }
    return policy(name, nodeSelector=selector, **spec)


def add_blocker(cluster: Cluster, node: str, name: str) -> None:
    """A pod on `node` whose PodDisruptionBudget refuses every eviction (minAvailable 1)."""
    labels = {"app": name}
    cluster.api.store.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "training", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1.36"}]},
        },
        "training",
    )
    cluster.api.store.create(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "training"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
        "training",
    )


FORCED_LADDER = [
    {"action": "Cordon", "escalateAfter": "0s"},
    {"action": "Drain", "timeout": "2s", "onTimeout": "Force", "escalateAfter": "0s"},
    {"action": "GPUReset", "timeout": "20s", "escalateAfter": "1s"},
    {"action": "Reboot", "timeout": "20s", "escalateAfter": "1s"},
    {"action": "Replace", "timeout": "30s"},
]


def _fault(ladder: list[dict[str, Any]]) -> dict[str, Any]:
    fault = cordon_only()[0] | {"ladder": ladder}
    fault.pop("onExhausted")
    return fault


def forbidden(cluster: Cluster, user: str) -> list[str]:
    """The requests of `user` the server refused with 403, one line each."""
    return [
        f"{e.verb} {e.group or 'core'}/{e.resource}"
        f"{'/' + e.subresource if e.subresource else ''} ns={e.namespace!r} name={e.name!r}"
        for e in cluster.api.request_log
        if e.user == user and e.code == 403
    ]


async def full_ladder(cluster: Cluster, node: str, *, fail_on_403: str = "") -> dict[str, Any]:
    """A fault nothing but replacement fixes: cordon, drain (a PDB refuses the eviction until
    the timeout forces the pod out), GPU-reset Job, reboot Job, Karpenter replacement.
    Returns the closed Remediation's status. `fail_on_403`: a user whose first refused request
    ends the wait at once (the operator would only retry it)."""

    def closed() -> bool:
        refused = forbidden(cluster, fail_on_403) if fail_on_403 else []
        if refused:
            pytest.fail(f"{fail_on_403} was refused:\n" + "\n".join(refused))
        return cluster.phase(node) == "Succeeded"

    add_blocker(cluster, node, f"blocker-{node}")
    cluster.apply(on_nodes("ladder", [node], faults=[_fault(FORCED_LADDER)]))
    cluster.fleet.inject(node, "xid-62")
    await eventually(closed, within=60, what="replaced")
    status: dict[str, Any] = cluster.remediation(node)["status"]  # type: ignore[index]
    return status


async def approved_delete(cluster: Cluster, node: str) -> None:
    """Replace by deleting the Node, after an administrator approves it."""
    ladder = [{"action": "Cordon", "escalateAfter": "0s"}, {"action": "Replace", "timeout": "60s"}]
    cluster.apply(
        on_nodes(
            "approval",
            [node],
            faults=[_fault(ladder)],
            requireApproval=["Replace"],
            actions={"replace": {"provider": "DeleteNode"}},
        )
    )
    cluster.fleet.inject(node, "xid-62")
    blocked = await eventually(
        lambda: (
            (r := cluster.remediation(node))
            and r["status"].get("reason") == "AwaitingApproval"
            and r
        ),
        what="Blocked/AwaitingApproval",
    )
    cluster.api.store.patch(
        "remediations",
        blocked["metadata"]["name"],
        {"metadata": {"annotations": {"remediation.gpuops.io/approve": "Replace"}}},
    )
    await eventually(lambda: cluster.node(node) is None, within=30, what="node deleted")


async def dry_run_then_invalid_then_deleted(cluster: Cluster, node: str) -> None:
    """DryRun decides and tells; then an invalid update is refused; then the policy goes."""
    cluster.apply(on_nodes("dryrun", [node], mode="DryRun"))
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: "DryRun" in cluster.event_reasons(node, "Node"), what="a DryRun Event")
    broken = on_nodes("dryrun", [node], mode="DryRun")
    broken["spec"]["faults"][0]["match"][0]["reason"] = "NvidiaXID(62"
    cluster.apply(broken)
    await eventually(
        lambda: (cluster.condition("dryrun", "Accepted") or {}).get("status") == "False",
        what="Accepted=False",
    )
    cluster.api.store.delete("remediationpolicies", "dryrun")
    await eventually(
        lambda: cluster.api.store.find("remediationpolicies", "dryrun") is None,
        what="policy deleted",
    )


async def transient_then_retention(cluster: Cluster, node: str) -> None:
    """A transient fault is cordoned, recovers, is uncordoned, and its record expires."""
    cluster.apply(on_nodes("transient", [node], faults=cordon_only()))
    cluster.fleet.inject(node, "transient")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    await eventually(lambda: cluster.phase(node) == "Succeeded", what="recovery")
    await eventually(lambda: not cluster.remediations(node), what="retention clean-up")
    # The same fault again: the same Events on the Node are counted (patched), not re-created.
    cluster.fleet.inject(node, "transient")
    await eventually(lambda: cluster.phase(node) == "Succeeded", what="second recovery")
    await eventually(
        lambda: any((e.get("count") or 1) > 1 for e in cluster.events(node, "Node")),
        what="a repeated Event counted",
    )


async def replace_by_provider_id(cluster: Cluster, node: str) -> None:
    """A node without an ownerReference to its NodeClaim: found by providerID among all."""
    body = cluster.node(node)
    assert body is not None
    assert body["spec"].get("providerID"), "fleet nodes carry a providerID"
    cluster.api.store.patch("nodes", node, {"metadata": {"ownerReferences": None}})
    ladder = [{"action": "Cordon", "escalateAfter": "0s"}, {"action": "Replace", "timeout": "60s"}]
    cluster.apply(on_nodes("orphan", [node], faults=[_fault(ladder)]))
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: cluster.node(node) is None, within=30, what="orphan replaced")


async def budget_blocks_second(cluster: Cluster, first: str, second: str) -> None:
    """With a drain budget of one node, the second faulty node waits, Blocked."""
    add_blocker(cluster, first, f"blocker-{first}")
    ladder = [{"action": "Cordon", "escalateAfter": "0s"}, {"action": "Drain", "timeout": "60s"}]
    fault = cordon_only()[0] | {"ladder": ladder, "onExhausted": "Fail"}
    cluster.apply(
        on_nodes(
            "budget",
            [first, second],
            faults=[fault],
            budgets=[{"nodes": "1", "actions": ["Drain"]}],
        )
    )
    cluster.fleet.inject(first, "xid-62")
    await eventually(
        lambda: (cluster.remediation(first) or {}).get("status", {}).get("step") == "Drain",
        what="first node draining",
    )
    cluster.fleet.inject(second, "xid-62")
    await eventually(
        lambda: (
            (cluster.remediation(second) or {}).get("status", {}).get("reason") == "BudgetExhausted"
        ),
        what="second node Blocked/BudgetExhausted",
    )


async def leader(cluster: Cluster, index: int) -> bool:
    text = await cluster.operators[index].metrics()
    return cluster.operators[index].gauge(text, "gpuops_remediation_leader") == 1.0


async def everything(cluster: Cluster) -> None:
    """Every scenario at once under two replicas; the standby takes over at the end."""
    nodes = cluster.node_names()
    retention = ("--retention", RETENTION, "--job-retention", RETENTION)
    await cluster.start_operator("operator-a", *retention)
    await eventually(lambda: leader(cluster, 0), what="operator-a leads")
    await cluster.start_operator("operator-b", *retention)
    # A stale status write (409) makes the operator re-read that Remediation: the conflict
    # path must be covered by the roles too, so provoke it once.
    cluster.api.faults.error(409, verb="update", resource="remediations", subresource="status")
    await asyncio.gather(
        full_ladder(cluster, nodes[0]),
        approved_delete(cluster, nodes[1]),
        dry_run_then_invalid_then_deleted(cluster, nodes[2]),
        transient_then_retention(cluster, nodes[3]),
        budget_blocks_second(cluster, nodes[4], nodes[5]),
        replace_by_provider_id(cluster, nodes[6]),
    )
    executors = getattr(cluster, "executor_namespace", "") or NAMESPACE
    requests = cluster.api.request_log
    assert any(e.verb == "create" and e.resource == "jobs" for e in requests), "executor Jobs"
    await eventually(
        lambda: any(
            e.verb == "delete" and e.resource == "jobs" and e.namespace == executors
            for e in cluster.api.request_log
        ),
        what="an executor Job deleted after --job-retention",
    )
    await cluster.operators[0].stop()
    await eventually(lambda: leader(cluster, 1), what="operator-b takes over")
