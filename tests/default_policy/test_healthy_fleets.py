"""The shipped default policy leaves a healthy fleet alone, whichever GPU agent it runs.

Issue 12, defect 1: the default policy's `{type: GPUProblem, staleAfter: 5m}` treated a
condition that no agent publishes as stale, so on a cluster running only the EKS node
monitoring agent every GPU node was quarantined, up to the budget, before any fault. A source
that never reported is not a stale source (`whenMissing: Ignore`), and staleness is judged on
the operator's clock from when it saw a condition change, so live agents that keep
heart-beating are never stale, however long the fleet runs.

Real: the policy files as shipped (examples/ and the chart's `defaultPolicy`), their parser,
the planner, the reconciler and the in-memory cluster with agents heart-beating every 5
minutes (the EKS agent's period, and node-problem-detector's upstream default). Faked: time.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_operator.api import policy_parsing
from remediation_operator.domain.policy import ConditionMatch, Fault, Policy, WhenMissing
from remediation_operator.engine import reconciler
from remediation_operator.sim.memory_cluster import MemoryCluster, MemoryRecorder

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GPU_LABELS = {"nvidia.com/gpu.present": "true", "topology.kubernetes.io/zone": "z1"}
BEAT = timedelta(minutes=5)


def shipped_example() -> Policy:
    return policy_parsing.parse_policy(
        yaml.safe_load((ROOT / "examples" / "gpu-xid-ladders-policy.yaml").read_text())
    )


def chart_default() -> Policy:
    values = yaml.safe_load((ROOT / "charts" / "remediation-operator" / "values.yaml").read_text())
    spec: dict[str, Any] = values["defaultPolicy"]["spec"]
    body = {
        "apiVersion": "remediation.gpuops.io/v1alpha1",
        "kind": "RemediationPolicy",
        "metadata": {"name": values["defaultPolicy"]["name"]},
        "spec": {**spec, "mode": "Enforce"},  # shipped as DryRun; judge what it would do
    }
    return policy_parsing.parse_policy(body)


EKS = {"AcceleratedHardwareReady": ("True", "AcceleratedHardwareIsReady")}
"""The EKS node monitoring agent alone (its other condition types are not GPU ones)."""
NPD = {"GPUProblem": ("False", "NoGPUProblem")}
"""node-problem-detector alone (NPD convention: the type names the problem, False when well)."""
AGENTS = {"eks-agent-only": EKS, "npd-only": NPD}
POLICIES = {"example": shipped_example, "chart": chart_default}


def fleet(agent: dict[str, tuple[str, str]], nodes: int = 8) -> MemoryCluster:
    """Healthy GPU nodes, a day old, whose agents heart-beat every 5 minutes."""
    cluster = MemoryCluster(T0 - timedelta(days=1), heartbeat=BEAT)
    for i in range(nodes):
        name = f"gpu-{i}"
        cluster.add_node(name, labels=GPU_LABELS)
        for type_, (status, reason) in agent.items():
            cluster.set_condition(name, type_, status, reason)
    cluster.advance(T0)
    return cluster


async def run(cluster: MemoryCluster, policy: Policy, minutes: int) -> None:
    """The operator, started at T0, reconciling every minute for `minutes` minutes."""
    ports = cluster.ports(MemoryRecorder())
    cluster.restart_operator()  # it first sees every condition now
    for minute in range(minutes + 1):
        cluster.advance(T0 + timedelta(minutes=minute))
        await reconciler.reconcile(policy, cluster.views(), ports, cluster.now)


@pytest.mark.parametrize("agent", sorted(AGENTS))
@pytest.mark.parametrize("source", sorted(POLICIES))
async def test_a_healthy_fleet_is_left_alone_long_after_every_staleness_window(
    agent: str, source: str
) -> None:
    cluster = fleet(AGENTS[agent])
    policy = POLICIES[source]()

    await run(cluster, policy, minutes=60)  # staleAfter 15m, tolerate 2m: four times over

    assert cluster.remediations() == []
    assert not any(method == "cordon" for method, _ in cluster.calls)
    summary = cluster.policy_state(policy.name).summary
    assert summary is not None
    assert summary.unhealthy == 0


async def test_an_agent_that_stops_reporting_is_cordoned_and_never_disrupted() -> None:
    """The control: the same run does act when a present source goes silent."""
    cluster = fleet(EKS)
    cluster.silent.add("gpu-3")
    policy = shipped_example()

    await run(cluster, policy, minutes=60)

    (incident,) = [r.state for r in cluster.remediations()]
    assert (incident.node, incident.fault) == ("gpu-3", "gpu-health-unknown")
    assert cluster.calls[("cordon", "gpu-3")] == 1
    assert {node for _, node in cluster.calls} == {"gpu-3"}
    assert not any(method in ("evict", "run_executor", "replace") for method, _ in cluster.calls)


async def test_whenmissing_fault_is_what_quarantines_a_fleet_without_the_condition() -> None:
    """What defect 1 did by default is now an explicit choice of the policy."""
    cluster = fleet(EKS, nodes=10)
    example = shipped_example()
    expect_npd = Fault(
        "npd-expected",
        (ConditionMatch("GPUProblem", stale_after=BEAT * 3, when_missing=WhenMissing.Fault),),
        example.faults[-1].ladder,
    )
    policy = replace(example, faults=(*example.faults, expect_npd), circuit_breaker=None)

    await run(cluster, policy, minutes=10)

    assert {r.state.fault for r in cluster.remediations()} == {"npd-expected"}
    assert cluster.calls[("cordon", "gpu-0")] == 1
