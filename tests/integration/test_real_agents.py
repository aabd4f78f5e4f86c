"""Real agents, against the real operator process (issue 21, D58, D60): the emulated agent lets
the newest finding overwrite the reason of AcceleratedHardwareReady=False and keeps its
lastTransitionTime, as the EKS node monitoring agent's `Fatal` does. A milder reason is no
recovery; a more severe one moves the same incident onto its ladder; and a Drain does not make
the evidence old, so an agent that reports once and heartbeats every 5 minutes does not hold a
Drain -> Replace ladder."""

from __future__ import annotations

import time
from typing import Any

import pytest

from remediation_emulator.watch import Watcher
from tests.integration.conftest import (
    CONFIG,
    QUARANTINE,
    Cluster,
    eventually,
    is_cordoned_by_us,
    policy,
)
from tests.integration.test_recovery import stays

pytestmark = pytest.mark.integration

XID = "AcceleratedHardwareReady"
QUARANTINED_BY = "remediation.gpuops.io/quarantined-by"


def fault(name: str, reasons: str, ladder: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "match": [{"type": XID, "status": "False", "reason": reasons}],
        "tolerate": "0s",
        "ladder": ladder,
    }


CONTACT_SUPPORT = fault(
    "gpu-contact-support",
    "NvidiaXID54Error",
    [
        {"action": "Cordon", "escalateAfter": "0s"},
        {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
        {"action": "Replace", "timeout": "60s"},
    ],
)
DOUBLE_BIT = fault(
    "gpu-double-bit-ecc",
    "NvidiaXID48Error|NvidiaDoubleBitError",
    [
        {"action": "Cordon", "escalateAfter": "1h"},
        {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
        {"action": "GPUReset", "timeout": "20s", "escalateAfter": "5m"},
        {"action": "Replace", "timeout": "60s"},
    ],
)
RESET = fault(
    "gpu-xid-reset",
    "NvidiaXID62Error",
    [
        {"action": "Cordon", "escalateAfter": "1h"},
        {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
        {"action": "GPUReset", "timeout": "20s", "escalateAfter": "5m"},
        {"action": "Replace", "timeout": "60s"},
    ],
)


async def test_a_milder_reason_over_the_fault_does_not_give_the_node_back(
    cluster: Cluster,
) -> None:
    """Finding 3: XID 48 (reset, then replace), then XID 63 (no action in the policy) on the
    same condition: before the fix, probation began and the node was uncordoned."""
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=[CONTACT_SUPPORT, DOUBLE_BIT]))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-48")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    await eventually(lambda: cluster.phase(node) == "Waiting", what="waiting after the cordon")
    name = cluster.remediation(node)["metadata"]["name"]  # type: ignore[index]

    cluster.fleet.inject(node, "xid-63")  # the newest finding overwrites the reason
    await eventually(
        lambda: any(
            c["type"] == XID and c["reason"] == "NvidiaXID63Error"
            for c in (cluster.node(node) or {})["status"]["conditions"]
        ),
        what="the agent's new reason",
    )
    # recovery.healthyFor is 1s: a probation would have given the node back within this.
    await stays(
        lambda: (
            cluster.phase(node) == "Waiting"
            and is_cordoned_by_us(cluster.node(node))
            and [r["metadata"]["name"] for r in cluster.remediations(node)] == [name]
        ),
        4.0,
        "the incident holds the node; no probation, no second incident",
    )
    assert "FaultCleared" not in cluster.event_reasons(node, "Node")


async def test_a_more_severe_reason_moves_the_same_incident_onto_its_ladder(
    cluster: Cluster,
) -> None:
    """Finding 6: XID 62 then XID 54 on the same condition: before the fix the incident closed
    as Recovered, uncordoned the node and re-cordoned it in a new incident."""
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=[CONTACT_SUPPORT, RESET]))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: cluster.phase(node) == "Waiting", what="waiting after the cordon")
    name = cluster.remediation(node)["metadata"]["name"]  # type: ignore[index]

    cluster.fleet.inject(node, "xid-54")
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("fault")
            == "gpu-contact-support"
        ),
        what="the incident follows the more severe fault",
    )
    await eventually(
        lambda: any(
            s["action"] == "Replace"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the replace ladder reaches Replace",
    )
    remediations = cluster.remediations(node)
    assert [r["metadata"]["name"] for r in remediations] == [name]
    steps = [s["action"] for s in remediations[0]["status"]["steps"]]
    assert steps == ["Cordon", "Drain", "Replace"]
    assert {"FaultWorsened"} <= cluster.event_reasons(node, "Node")
    assert "Recovered" not in cluster.event_reasons(node, "Node")


@pytest.mark.fleet(config=CONFIG.with_(heartbeat_period=300.0))
async def test_a_drain_then_replace_ladder_does_not_wait_for_the_next_heartbeat(
    cluster: Cluster,
) -> None:
    """Acceptance (finding 1): the agent reports the fault once and heartbeats every 5 min;
    Replace starts within seconds of the drain's end, not at the next report."""
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=[CONTACT_SUPPORT]))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-54")
    await eventually(
        lambda: any(
            s["action"] == "Drain" and s.get("outcome") == "Succeeded"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the drain ends",
    )
    drained = time.monotonic()
    await eventually(
        lambda: any(
            s["action"] == "Replace"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=10,
        what="Replace starts",
    )
    assert time.monotonic() - drained < 10
    status = (cluster.remediation(node) or {}).get("status", {})
    assert status.get("reason") != "EvidenceInsufficient"


def network_fault(cluster: Cluster, node: str) -> None:
    """The EKS agent's NetworkingReady=False (a fatal network finding), written as it does."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "NetworkingReady",
        "status": "False",
        "reason": "InterfaceNotUp",
        "message": "interface eth1 is not up",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    cluster.api.store.patch(
        "nodes",
        node,
        {"status": {"conditions": [condition]}},
        patch_type="strategic",
        subresource="status",
    )


async def test_policies_split_by_fault_domain_compose(cluster: Cluster) -> None:
    """Finding 7: a heavier GPU policy and a network policy select the same nodes. Before
    D61 the network policy was inert on every shared node (only an `Overlapping` condition
    said why) and the node with the network fault stayed schedulable."""
    node = cluster.node_names()[0]
    gpu = policy("gpu", weight=10, faults=[RESET])
    network = policy(
        "network",
        faults=[
            {
                "name": "node-networking",
                "match": [{"type": "NetworkingReady", "status": "False"}],
                "tolerate": "0s",
                # A ladder that acts (a cordon-only one would yield to the GPU fault, D76).
                "ladder": [
                    {"action": "Cordon", "escalateAfter": "1h"},
                    {"action": "Drain", "timeout": "60s"},
                ],
                "onExhausted": "Hold",
            }
        ],
    )
    cluster.apply(gpu)
    cluster.apply(network)
    await cluster.start_operator()

    network_fault(cluster, node)
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon")
    remediations = [r for r in cluster.remediations(node) if "phase" in r.get("status", {})]
    assert [r["spec"]["policyName"] for r in remediations] == ["network"]

    # While the network incident runs, the GPU policy's fault on that node waits.
    await eventually(lambda: cluster.phase(node) == "Waiting", what="waiting after the cordon")
    cluster.fleet.inject(node, "xid-62")
    await stays(
        lambda: {r["spec"]["policyName"] for r in cluster.remediations(node)} == {"network"},
        2.0,
        "a second incident opened on a node with one running",
    )
    await eventually(
        lambda: (cluster.condition("gpu", "Overlapping") or {}).get("status") == "True",
        what="the GPU policy says its fault waits behind the network incident",
    )
    assert "network" in (cluster.condition("gpu", "Overlapping") or {}).get("message", "")
    # ... and the running incident's status names it.
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("waiting")
            == ["gpu/gpu-xid-reset"]
        ),
        what="the network incident names the GPU fault waiting behind it",
    )


NETWORK_HOLD = {
    "name": "node-networking",
    "match": [{"type": "NetworkingReady", "status": "False"}],
    "tolerate": "0s",
    "ladder": [{"action": "Cordon"}],
    "onExhausted": "Hold",
}


def quarantine_of(node: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(quarantined-by, our taint's value) on the node."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    values = [t.get("value") for t in taints if t.get("key") == QUARANTINE]
    return annotations.get(QUARANTINED_BY), values[0] if values else None


def node_versions(watcher: Watcher) -> list[dict[str, Any]]:
    """Every version of the node the watch saw, in order."""
    seen = []
    while not watcher.queue.empty():
        item = watcher.queue.get_nowait()
        if item is None:
            break
        seen.append(item[1])
    return seen


async def test_a_gpu_fault_takes_the_node_from_a_cordon_only_network_incident(
    cluster: Cluster,
) -> None:
    """Finding 7's last clause (D76): the network policy (heavier) only cordons and holds;
    an XID whose ladder acts appeared on the node it held. Before D76 the XID waited behind
    the hold for as long as the network fault lasted. Now the network incident ends
    `SupersededByPolicy` without an uncordon, and the GPU policy's incident takes the node
    and the quarantine over; the node is never schedulable in between."""
    node = cluster.node_names()[0]
    cluster.apply(policy("network", weight=10, faults=[NETWORK_HOLD]))
    cluster.apply(policy("gpu", faults=[RESET]))
    await cluster.start_operator()

    network_fault(cluster, node)
    await eventually(
        lambda: quarantine_of(cluster.node(node)) == ("network", "node-networking"),
        what="the network policy's cordon",
    )
    await eventually(lambda: cluster.phase(node) == "Waiting", what="held after the cordon")
    watcher = cluster.api.store.raw.watch("nodes", field_selector=f"metadata.name={node}")
    try:
        cluster.fleet.inject(node, "xid-62")
        await eventually(
            lambda: quarantine_of(cluster.node(node)) == ("gpu", "gpu-xid-reset"),
            what="the GPU policy's incident takes the quarantine over",
        )
        await eventually(
            lambda: any(
                r["spec"]["policyName"] == "gpu" and r.get("status", {}).get("phase") == "Waiting"
                for r in cluster.remediations(node)
            ),
            what="the GPU incident's cordon recorded",
        )
    finally:
        cluster.api.store.raw.unwatch("nodes", watcher)
    versions = node_versions(watcher)
    assert any(quarantine_of(v) == ("gpu", "gpu-xid-reset") for v in versions)
    schedulable = [v for v in versions if not v["spec"].get("unschedulable")]
    assert schedulable == [], "the node was schedulable during the hand-over"

    by_policy = {r["spec"]["policyName"]: r["status"] for r in cluster.remediations(node)}
    assert by_policy["network"]["phase"] == "Cancelled"
    assert by_policy["network"]["reason"] == "SupersededByPolicy"
    assert "gpu-xid-reset" in by_policy["network"]["message"]
    assert by_policy["gpu"]["cordonedByUs"] is True, "the cordon it took over is its to undo"
    assert "SupersededByPolicy" in cluster.event_reasons(node, "Node")
    annotations = (cluster.node(node) or {})["metadata"]["annotations"]
    assert annotations["remediation.gpuops.io/uncordon-on-release"] == "true"


async def test_the_quarantine_taint_names_the_fault_the_incident_follows(
    cluster: Cluster,
) -> None:
    """D77: after a switch of fault (D58, FaultWorsened) the taint named the first fault."""
    node = cluster.node_names()[0]
    holding = fault(
        "gpu-contact-support",
        "NvidiaXID54Error",
        [
            {"action": "Cordon", "escalateAfter": "1h"},
            {"action": "Drain", "timeout": "60s"},
            {"action": "Replace", "timeout": "60s"},
        ],
    )
    cluster.apply(policy(faults=[holding, RESET]))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: cluster.phase(node) == "Waiting", what="waiting after the cordon")
    assert quarantine_of(cluster.node(node)) == ("gpu", "gpu-xid-reset")

    cluster.fleet.inject(node, "xid-54")
    await eventually(
        lambda: quarantine_of(cluster.node(node)) == ("gpu", "gpu-contact-support"),
        what="the taint names the more severe fault",
    )
    status = (cluster.remediation(node) or {})["status"]
    assert status["fault"] == "gpu-contact-support"
    assert "FaultWorsened" in cluster.event_reasons(node, "Node")
    assert is_cordoned_by_us(cluster.node(node))


async def test_a_severe_fault_on_a_node_the_catch_all_holds_is_acted_on(
    cluster: Cluster,
) -> None:
    """Finding 6, second sentence, within one policy (D58): the catch-all (cordon and hold)
    holds the node for an XID it does not know; XID 54 follows on the same condition. The
    same Remediation moves onto the replace ladder and acts; the taint names it (D77)."""
    node = cluster.node_names()[0]
    catch_all = {
        **fault("gpu-unknown-reason", "NvidiaXID[0-9]+Error", [{"action": "Cordon"}]),
        "onExhausted": "Hold",
    }
    cluster.apply(policy(faults=[CONTACT_SUPPORT, catch_all]))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-119")
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("reason") == "LadderExhausted"
        ),
        what="the catch-all holds the node",
    )
    assert quarantine_of(cluster.node(node)) == ("gpu", "gpu-unknown-reason")
    name = (cluster.remediation(node) or {})["metadata"]["name"]

    cluster.fleet.inject(node, "xid-54")
    await eventually(
        lambda: quarantine_of(cluster.node(node)) == ("gpu", "gpu-contact-support"),
        what="the taint names the fault the incident follows",
    )
    await eventually(
        lambda: any(
            s["action"] == "Drain"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the replace ladder acts",
    )
    assert [r["metadata"]["name"] for r in cluster.remediations(node)] == [name]
    assert (cluster.remediation(node) or {})["status"]["fault"] == "gpu-contact-support"
    assert "FaultWorsened" in cluster.event_reasons(node, "Node")


@pytest.mark.fleet(config=CONFIG.with_(agent="eks", heartbeat_period=300.0))
async def test_an_agent_restart_after_a_failed_repair_does_not_give_the_node_back(
    cluster: Cluster,
) -> None:
    """Finding 4: the reset could not run (the GPU is off the bus) and the agent restarted
    (the EKS agent writes True at start and forgets the XID). Before D59 the node was
    recovered and given back; now the validation decides, fails, and the ladder climbs."""
    node = cluster.node_names()[0]
    cluster.apply(
        policy(
            faults=[
                fault(
                    "gpu-unreachable",
                    "NvidiaXID79Error",
                    [
                        {"action": "Cordon", "escalateAfter": "0s"},
                        {"action": "GPUReset", "timeout": "20s", "retries": 0},
                        {"action": "Replace", "timeout": "60s"},
                    ],
                )
            ],
            validation={"after": ["GPUReset"]},
        )
    )
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-79")
    await eventually(
        lambda: any(
            s["action"] == "GPUReset" and s.get("outcome") == "PermanentFailure"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the reset failed (the GPU is off the bus)",
    )
    cluster.fleet.restart_agent(node)
    await eventually(
        lambda: any(
            s["action"] == "Validate" and s.get("outcome") == "PermanentFailure"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the validation decides, and fails",
    )
    await eventually(
        lambda: any(
            s["action"] == "Replace"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the ladder climbs to Replace",
    )
    assert "Recovered" not in cluster.event_reasons(node, "Node")
    assert "FaultCleared" not in cluster.event_reasons(node, "Node")


@pytest.mark.fleet(config=CONFIG.with_(agent="npd", npd_lookback=0.0, heartbeat_period=300.0))
async def test_npd_forgetting_a_fault_on_restart_does_not_give_the_node_back(
    cluster: Cluster,
) -> None:
    """Finding 4 under node-problem-detector: NPD restarts and its kmsg lookback no longer
    reaches the XID, so GPUProblem returns to its default (False, healthy). After a reset that
    could not run, the validation decides: it fails, and the ladder climbs."""
    node = cluster.node_names()[0]
    unreachable = {
        "name": "gpu-unreachable",
        "match": [{"type": "GPUProblem", "status": "True", "reason": "NvidiaXID79Error"}],
        "tolerate": "0s",
        "ladder": [
            {"action": "Cordon", "escalateAfter": "0s"},
            {"action": "GPUReset", "timeout": "20s", "retries": 0},
            {"action": "Replace", "timeout": "60s"},
        ],
    }
    cluster.apply(policy(faults=[unreachable], validation={"after": ["GPUReset"]}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-79")
    await eventually(
        lambda: any(
            s["action"] == "GPUReset" and s.get("outcome") == "PermanentFailure"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the reset failed (the GPU is off the bus)",
    )
    cluster.fleet.restart_agent(node)
    await eventually(
        lambda: any(
            c["type"] == "GPUProblem" and c["status"] == "False"
            for c in (cluster.node(node) or {})["status"]["conditions"]
        ),
        what="NPD's default condition after its restart",
    )
    await eventually(
        lambda: any(
            s["action"] == "Replace"
            for s in (cluster.remediation(node) or {}).get("status", {}).get("steps", [])
        ),
        within=30,
        what="the validation fails and the ladder climbs to Replace",
    )
    assert "Recovered" not in cluster.event_reasons(node, "Node")


# the kind agent: it reports healthy after the reset (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=CONFIG.with_(device_plugin_marks=True, reset_clears=1.0, agent="kind"))
async def test_a_node_short_of_gpus_after_a_reset_stays_cordoned_until_they_are_advertised(
    cluster: Cluster,
) -> None:
    """Finding 5 (D68): the reset fixes the GPU and the agent reports healthy, but the device
    plugin keeps the GPU it saw fail marked unhealthy (NVIDIA/k8s-device-plugin,
    internal/rm/health.go): 7 of 8 `nvidia.com/gpu` advertised. Before the fix the incident
    ended Recovered and uncordoned the node; now it holds it until the plugin restarts."""
    node = cluster.node_names()[0]
    reset_now = fault(
        "gpu-xid-reset",
        "NvidiaXID62Error",
        [
            {"action": "Cordon", "escalateAfter": "0s"},
            {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
            {"action": "GPUReset", "timeout": "20s", "escalateAfter": "5m"},
            {"action": "Replace", "timeout": "60s"},
        ],
    )
    cluster.apply(policy(faults=[reset_now]))
    await cluster.start_operator()

    def gpus(part: str) -> str | None:
        return ((cluster.node(node) or {}).get("status", {}).get(part) or {}).get("nvidia.com/gpu")

    assert gpus("allocatable") == gpus("capacity") == "8"
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: gpus("allocatable") == "7", what="the device plugin's mark")
    await eventually(
        lambda: (
            (cluster.remediation(node) or {}).get("status", {}).get("reason") == "GPUsNotAdvertised"
        ),
        within=30,
        what="held for the GPUs after the reset",
    )
    status = (cluster.remediation(node) or {})["status"]
    assert status["phase"] == "Blocked"
    assert "7 of its 8 nvidia.com/gpu" in status["message"]
    assert [s["action"] for s in status["steps"]][-1] == "GPUReset"
    shown = (cluster.node(node) or {})["status"]["conditions"]
    assert [c["status"] for c in shown if c["type"] == XID] == ["True"], "the agent: healthy"
    # recovery.healthyFor is 1s: a recovery would have given the node back within this.
    await stays(
        lambda: (
            is_cordoned_by_us(cluster.node(node))
            and (cluster.remediation(node) or {}).get("status", {}).get("reason")
            == "GPUsNotAdvertised"
        ),
        3.0,
        "the node stays cordoned while it advertises 7 of 8 GPUs",
    )
    assert "Recovered" not in cluster.event_reasons(node, "Node")
    assert "GPUsNotAdvertised" in cluster.event_reasons(node, "Node")

    # The sandbox's way to restart the node's device plugin pod.
    cluster.api.store.patch(
        "nodes",
        node,
        {"metadata": {"annotations": {"sandbox.gpuops.io/restart-device-plugin": "now"}}},
    )
    await eventually(lambda: gpus("allocatable") == "8", what="every GPU advertised again")
    await eventually(
        lambda: (cluster.remediation(node) or {}).get("status", {}).get("reason") == "Recovered",
        what="recovered once every GPU is advertised",
    )
    assert not is_cordoned_by_us(cluster.node(node))
    assert not (cluster.node(node) or {})["spec"].get("unschedulable")


@pytest.mark.fleet(config=CONFIG.with_(reboot_clears=1.0))
async def test_a_node_agent_reset_that_stops_no_gpu_client_fails_and_the_ladder_reboots(
    cluster: Cluster,
) -> None:
    """D75: the NodeAgent protocol has no step that stops the device plugin or DCGM, and
    nvidia-smi refuses `--gpu-reset` while they hold the GPUs; under the default (EKS agent)
    profile the agent answers Failed. The ladder reboots; the rebooted node's agent starts
    healthy and the incident recovers."""
    node = cluster.node_names()[0]
    cluster.apply(
        policy(
            faults=[
                fault(
                    "gpu-xid-reset",
                    "NvidiaXID62Error",
                    [
                        {"action": "Cordon", "escalateAfter": "0s"},
                        {"action": "GPUReset", "timeout": "20s", "retries": 0},
                        {"action": "Reboot", "timeout": "30s"},
                    ],
                )
                | {"onExhausted": "Hold"}
            ],
            actions={"gpuReset": {"executor": "NodeAgent"}},
        )
    )
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: cluster.phase(node) == "Succeeded", within=60, what="recovered")
    steps = (cluster.remediation(node) or {})["status"]["steps"]
    reset = next(s for s in steps if s["action"] == "GPUReset")
    assert reset["outcome"] != "Succeeded"
    assert "the node agent reported failure" in reset["message"], reset["message"]
    assert [s["action"] for s in steps] == ["Cordon", "GPUReset", "Reboot"]
    annotations = (cluster.node(node) or {})["metadata"]["annotations"]
    assert annotations["remediation.gpuops.io/agent-ack"].endswith(":Failed")
