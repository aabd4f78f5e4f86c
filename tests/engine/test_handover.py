"""A cordon-only incident hands its node to another policy's acting fault (issue 21, D76).

Two policies select the same nodes: one for the network (cordon and hold), one for GPU XIDs
(a ladder that acts). Before D76, an XID on a node the network incident held waited behind it
for as long as the network fault lasted, the GPU never reset. Now the hold yields: its incident
ends `SupersededByPolicy` without giving anything back, and the GPU policy's cordon takes the
quarantine over in one write. The node is never schedulable in between, also when the
operator dies between the two writes. Real: the ownership rule, the planner, the reconciler
and the in-memory cluster; the policies are reconciled in turn as the runtime's workers are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest

from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    Mode,
    OnExhausted,
    Policy,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.engine import reconciler
from remediation_operator.sim.memory_cluster import (
    QUARANTINE,
    QUARANTINED_BY,
    UNCORDON_ON_RELEASE,
)
from tests.engine.conftest import T0, Harness

XID = "AcceleratedHardwareReady"
NODE = "gpu-0"
POOL = LabelSelector(match_labels={"pool": "a"})
NETWORK_FAULT = Fault(
    name="node-networking",
    match=(ConditionMatch("NetworkingReady", "False"),),
    ladder=(Step(Action.Cordon),),
    on_exhausted=OnExhausted.Hold,
)
GPU_FAULT = Fault(
    name="gpu-xid-reset",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(62|79)Error"),),
    ladder=(Step(Action.Cordon, escalate_after=timedelta(0)), Step(Action.Drain)),
)


def named(name: str, fault: Fault, *, weight: int = 0) -> Policy:
    return Policy(
        name=name,
        faults=(fault,),
        node_selector=POOL,
        weight=weight,
        created_at=T0 - timedelta(days=1),
    )


# The network policy is the heavier one: weight alone would keep the GPU fault waiting.
NETWORK = named("network", NETWORK_FAULT, weight=10)
GPU = named("gpu", GPU_FAULT)
BOTH = (NETWORK, GPU)


class ProcessKilledError(Exception):
    """Stands for the operator process dying at that instant."""


async def reconcile(harness: Harness, policy: Policy, policies: Sequence[Policy]) -> None:
    """One round of `policy`'s worker, told what the runtime tells it (engine.ownership)."""
    cluster, now = harness.cluster, harness.clock.now
    await reconciler.reconcile(
        policy,
        cluster.views(),
        cluster.ports(harness.recorder),
        now,
        foreign=lambda: cluster.foreign(policy, policies, now),
        superseding=lambda: cluster.superseding(policy, policies, now),
        claimed=lambda: cluster.claimed(policy, policies, now),
    )


async def rounds(harness: Harness, times: int = 1, step: timedelta = timedelta(0)) -> None:
    """Every policy's worker in turn, `times` over; the node must stay cordoned throughout."""
    for _ in range(times):
        for policy in BOTH:
            await reconcile(harness, policy, BOTH)
            assert cordoned(harness), f"node schedulable after a round of {policy.name}"
        harness.clock.advance(step)


def cordoned(harness: Harness) -> bool:
    return harness.cluster.node(NODE)["spec"].get("unschedulable") is True


def quarantine(harness: Harness) -> tuple[str | None, str | None, str | None]:
    """(quarantined-by, uncordon-on-release, our taint's value) on the node."""
    obj = harness.cluster.node(NODE)
    annotations = obj["metadata"]["annotations"]
    values = [t["value"] for t in obj["spec"].get("taints", []) if t["key"] == QUARANTINE]
    return (
        annotations.get(QUARANTINED_BY),
        annotations.get(UNCORDON_ON_RELEASE),
        values[0] if values else None,
    )


def incidents(harness: Harness, policy: str) -> list[RemediationState]:
    return [r.state for r in harness.cluster.remediations(policy)]


def open_incident(harness: Harness, policy: str) -> RemediationState | None:
    return next((s for s in incidents(harness, policy) if not s.terminal), None)


async def network_holds_the_node(harness: Harness) -> None:
    harness.cluster.set_condition(NODE, "NetworkingReady", "False", "InterfaceNotUp")
    for _ in range(2):  # the cordon, then its completion observed
        for policy in BOTH:
            await reconcile(harness, policy, BOTH)
    held = open_incident(harness, "network")
    assert held is not None
    assert held.reason is Reason.LadderExhausted, held
    assert quarantine(harness) == ("network", "true", "node-networking")


async def test_an_acting_fault_of_another_policy_takes_the_node_from_a_cordon_only_incident(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    await network_holds_the_node(harness)

    cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error", "GPU has fallen off the bus")
    await rounds(harness, 3, timedelta(seconds=10))

    (network,) = incidents(harness, "network")
    assert (network.phase, network.reason) == (Phase.Cancelled, Reason.SupersededByPolicy)
    assert "gpu" in network.message
    assert GPU_FAULT.name in network.message
    gpu = open_incident(harness, "gpu")
    assert gpu is not None
    assert gpu.fault == GPU_FAULT.name
    assert gpu.step is Action.Drain, "the GPU ladder acts"
    assert gpu.cordoned_by_us, "the cordon it took over is its to undo"
    # The quarantine changed owner in place: no release, no second cordon of a free node.
    assert quarantine(harness) == ("gpu", "true", GPU_FAULT.name)
    assert cluster.calls[("release", NODE)] == 0
    reasons = [e.reason for e in harness.recorder.explanations if e.node == NODE]
    assert Reason.SupersededByPolicy in reasons

    # Both faults clear: the GPU incident recovers and gives the node back, uncordoned.
    cluster.set_condition(NODE, XID, "True", "NvidiaAcceleratedHardwareReady")
    cluster.set_condition(NODE, "NetworkingReady", "True", "InterfaceUp")
    for _ in range(30):
        for policy in BOTH:
            await reconcile(harness, policy, BOTH)
        if open_incident(harness, "gpu") is None:
            break
        harness.clock.advance(timedelta(minutes=1))
    (done,) = incidents(harness, "gpu")
    assert done.reason is Reason.Recovered
    assert not cordoned(harness)
    assert quarantine(harness) == (None, None, None)


async def test_an_acting_incident_is_not_superseded(harness: Harness) -> None:
    """Only a hold yields: an incident whose ladder acts keeps its node (one active incident
    per node), and the other policy's fault waits, named in its status."""
    acting_network = named(
        "network",
        Fault(
            name="node-networking",
            match=(ConditionMatch("NetworkingReady", "False"),),
            ladder=(Step(Action.Cordon, escalate_after=timedelta(hours=1)), Step(Action.Drain)),
        ),
        weight=10,
    )
    policies = (acting_network, GPU)
    harness.cluster.set_condition(NODE, "NetworkingReady", "False", "InterfaceNotUp")
    for policy in policies:
        await reconcile(harness, policy, policies)
    harness.cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error")
    for _ in range(3):
        for policy in policies:
            await reconcile(harness, policy, policies)
        harness.clock.advance(timedelta(seconds=10))
    assert open_incident(harness, "network") is not None
    assert incidents(harness, "gpu") == []


async def test_the_cordon_is_kept_when_the_operator_dies_between_the_two_writes(
    harness: Harness,
) -> None:
    """Killed after the cordon-only incident ended and before the GPU policy's worker ran:
    the network fault clears meanwhile, yet the cordon is not released; the GPU incident,
    with a tolerate window, records it as its own."""
    cluster = harness.cluster
    tolerant = named("gpu", replace(GPU_FAULT, tolerate=timedelta(minutes=2)))
    policies = (NETWORK, tolerant)
    await network_holds_the_node(harness)

    cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error")
    await reconcile(harness, NETWORK, policies)  # the network incident yields ...
    assert incidents(harness, "network")[0].reason is Reason.SupersededByPolicy
    # ... its quarantine names the GPU policy now, still cordoned ...
    assert cordoned(harness)
    assert quarantine(harness) == ("gpu", "true", GPU_FAULT.name)
    # ... and the process dies before the GPU policy's worker runs.
    cluster.set_condition(NODE, "NetworkingReady", "True", "InterfaceUp")
    for _ in range(4):  # past the grace after which an unrecorded cordon is released
        harness.clock.advance(timedelta(seconds=30))
        await reconcile(harness, NETWORK, policies)
        assert cordoned(harness)
        assert quarantine(harness)[0] == "gpu"
    # The GPU policy's worker runs again; its fault is tolerated for 2 minutes first.
    for _ in range(6):
        await reconcile(harness, NETWORK, policies)
        await reconcile(harness, tolerant, policies)
        assert cordoned(harness)
        harness.clock.advance(timedelta(seconds=30))
    gpu = open_incident(harness, "gpu")
    assert gpu is not None
    assert gpu.step is Action.Drain, gpu
    assert quarantine(harness) == ("gpu", "true", GPU_FAULT.name)
    assert cluster.calls[("release", NODE)] == 0


async def test_killed_before_the_yield_is_recorded(harness: Harness) -> None:
    """Killed after the quarantine was pointed at the GPU policy, before the network
    incident's end was written: the incident is still open, so the node is the network
    policy's (`claimed` for the GPU policy, which releases nothing even with its fault
    gone); the next round yields again."""
    cluster = harness.cluster
    await network_holds_the_node(harness)
    cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error")
    cluster.inject("update_remediation", ProcessKilledError())
    with pytest.raises(ProcessKilledError):
        await reconcile(harness, NETWORK, BOTH)
    assert quarantine(harness) == ("gpu", "true", GPU_FAULT.name)
    assert open_incident(harness, "network") is not None
    # The GPU fault flaps off for a while: the GPU policy sees its mark and no fault of its
    # own, but the network incident holds the node: nothing is released.
    cluster.set_condition(NODE, XID, "True", "NvidiaAcceleratedHardwareReady")
    for _ in range(4):
        await reconcile(harness, GPU, BOTH)
        assert cordoned(harness)
        harness.clock.advance(timedelta(seconds=30))
    assert cluster.calls[("release", NODE)] == 0
    cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error")
    await rounds(harness, 3, timedelta(seconds=10))
    assert incidents(harness, "network")[-1].reason is Reason.SupersededByPolicy
    gpu = open_incident(harness, "gpu")
    assert gpu is not None
    assert gpu.cordoned_by_us


async def test_killed_after_the_takeover_before_its_record(harness: Harness) -> None:
    """Killed after the GPU policy's cordon took the quarantine over, before its Remediation
    was written: the node says whose cordon it is now, and the next round records it as the
    GPU incident's own, to undo at the end."""
    cluster = harness.cluster
    await network_holds_the_node(harness)
    cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error")
    await reconcile(harness, NETWORK, BOTH)
    cluster.inject("create_remediation", ProcessKilledError())
    with pytest.raises(ProcessKilledError):
        await reconcile(harness, GPU, BOTH)
    assert quarantine(harness) == ("gpu", "true", GPU_FAULT.name)
    assert incidents(harness, "gpu") == []

    await rounds(harness, 3, timedelta(seconds=10))
    gpu = open_incident(harness, "gpu")
    assert gpu is not None
    assert gpu.cordoned_by_us
    assert gpu.step is Action.Drain
    assert cluster.calls[("release", NODE)] == 0


async def test_a_dry_run_policy_does_not_take_the_node(harness: Harness) -> None:
    """A fault of a policy that would change nothing (DryRun) does not end a real hold."""
    watching = replace(GPU, mode=Mode.DryRun)
    policies = (NETWORK, watching)
    harness.cluster.set_condition(NODE, "NetworkingReady", "False", "InterfaceNotUp")
    for policy in policies:
        await reconcile(harness, policy, policies)
    harness.cluster.set_condition(NODE, XID, "False", "NvidiaXID79Error")
    for policy in policies:
        await reconcile(harness, policy, policies)
    assert open_incident(harness, "network") is not None
    assert quarantine(harness)[0] == "network"
