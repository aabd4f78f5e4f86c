"""A host that stops answering: the control plane's `Ready=Unknown`, held for the window the
policy sets (`positiveAfter`), is positive evidence that the host is gone (issue 23, item 1).

Before the window, and without `positiveAfter`, Unknown is weak evidence: the node is cordoned
and nothing disruptive happens. EKS node repair and Karpenter replace a node NotReady for 30
minutes; a partition that takes many nodes at once is held by the circuit breaker."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediation_operator.domain.policy import (
    Action,
    CircuitBreaker,
    ConditionMatch,
    Fault,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from tests.engine.conftest import Driver, Harness
from tests.engine.test_ladder import policy, reached

UNREACHABLE = Fault(
    name="host-unreachable",
    match=(
        ConditionMatch("Ready", "False"),
        ConditionMatch("Ready", "Unknown", positive_after=timedelta(minutes=30)),
    ),
    tolerate=timedelta(minutes=2),
    ladder=(
        Step(Action.Cordon, escalate_after=timedelta(0)),
        Step(Action.Replace, timeout=timedelta(minutes=60)),
    ),
)


def unreachable(harness: Harness, node: str) -> None:
    """The node lifecycle controller's verdict, as it writes it."""
    harness.cluster.set_condition(
        node, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    )


async def test_an_unknown_ready_held_for_its_window_leads_to_replace(harness: Harness) -> None:
    clock = harness.clock
    drive = Driver(harness, policy(UNREACHABLE))
    since = clock.now
    unreachable(harness, "gpu-0")

    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Cordon))
    await drive.run_until(lambda: drive.remediation("gpu-0").phase is Phase.Blocked)
    state = drive.remediation("gpu-0")
    assert state.reason is Reason.EvidenceInsufficient
    assert (
        "becomes positive evidence that the host is gone once it has held for 30m, at 11:30:00Z"
        in state.message
    )
    assert harness.cluster.replacement_requested("gpu-0") is None

    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Replace))
    waited = clock.now - since
    assert timedelta(minutes=30) <= waited <= timedelta(minutes=31)


async def test_without_positive_after_an_unknown_ready_only_cordons(harness: Harness) -> None:
    weak_only = Fault(
        name=UNREACHABLE.name,
        match=(ConditionMatch("Ready", "Unknown"),),
        tolerate=UNREACHABLE.tolerate,
        ladder=UNREACHABLE.ladder,
    )
    drive = Driver(harness, policy(weak_only))
    unreachable(harness, "gpu-0")
    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Cordon))
    with pytest.raises(AssertionError, match="still not done"):
        await drive.run_until(lambda: reached(drive, "gpu-0", Action.Replace))
    state = drive.remediation("gpu-0")
    assert (state.phase, state.reason) == (Phase.Blocked, Reason.EvidenceInsufficient)


async def test_a_kubelet_that_comes_back_in_the_window_gives_the_node_back(
    harness: Harness,
) -> None:
    clock = harness.clock
    drive = Driver(harness, policy(UNREACHABLE))
    unreachable(harness, "gpu-0")
    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Cordon))
    clock.advance(timedelta(minutes=10))
    harness.cluster.set_condition("gpu-0", "Ready", "True", "KubeletReady")
    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    state = drive.remediation("gpu-0")
    assert state.phase is Phase.Succeeded
    assert not any(s.action is Action.Replace for s in state.steps)


async def test_a_partition_of_a_third_of_a_zone_is_held_by_the_breaker(harness: Harness) -> None:
    cluster, clock = harness.cluster, harness.clock
    for i in range(4, 12):
        cluster.add_node(f"gpu-{i}", labels={"pool": "a"})
    drive = Driver(
        harness,
        policy(
            UNREACHABLE,
            circuit_breaker=CircuitBreaker(
                max_unhealthy="20%", min_nodes=5, cooldown=timedelta(minutes=15)
            ),
        ),
    )
    for i in range(4):  # a third of the 12 nodes stop answering at once
        unreachable(harness, f"gpu-{i}")
    clock.advance(timedelta(hours=2))
    await drive.settle()
    assert not [r for r in cluster.remediations()], "a partition opened Remediations"
    assert all(cluster.replacement_requested(f"gpu-{i}") is None for i in range(4))
