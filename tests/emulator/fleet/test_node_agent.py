"""The node agent over HTTP: fault conditions, heartbeats, injection, the NodeAgent protocol."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import health, resources
from remediation_emulator.fleet.client import KubeClient
from remediation_emulator.fleet.fleet import Fleet
from remediation_emulator.fleet.injector import Injector
from tests.emulator.fleet.conftest import eventually

INJECT = "sandbox.gpuops.io/inject-fault"
REQUEST = "remediation.gpuops.io/agent-request"
ACK = "remediation.gpuops.io/agent-ack"


def condition(api: ApiServer, node: str, type_: str) -> dict[str, Any]:
    found = api.store.get("nodes", node)["status"]["conditions"]
    return next(c for c in found if c["type"] == type_)


def node_annotations(api: ApiServer, node: str) -> dict[str, str]:
    result: dict[str, str] = api.store.get("nodes", node)["metadata"].get("annotations") or {}
    return result


async def annotate(client: KubeClient, node: str, **values: str | None) -> None:
    """What `kubectl annotate node NODE key=value` sends: a JSON merge patch."""
    keys = {"inject": INJECT, "request": REQUEST}
    patch = {"metadata": {"annotations": {keys[k]: v for k, v in values.items()}}}
    await client.patch(resources.NODES, node, patch)


async def test_an_annotation_injects_a_fault_and_is_removed_once_applied(
    api: ApiServer, kind_gpus: Fleet, admin: KubeClient
) -> None:
    # the kind agent: a repair or a clear shows healthy at once (the real ones are sticky)
    await annotate(admin, "gpu-0001", inject="xid-48")
    shown = await eventually(
        lambda: (
            (c := condition(api, "gpu-0001", "AcceleratedHardwareReady"))["status"] == "False" and c
        ),
        what="AcceleratedHardwareReady=False",
    )
    assert shown["reason"] == "NvidiaDoubleBitError"
    assert condition(api, "gpu-0001", "GPUHealthy")["status"] == "False"
    assert condition(api, "gpu-0000", "AcceleratedHardwareReady")["status"] == "True"
    await eventually(
        lambda: INJECT not in node_annotations(api, "gpu-0001"), what="annotation removal"
    )
    # `none` clears it again.
    await annotate(admin, "gpu-0001", inject="none")
    await eventually(
        lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "True",
        what="fault cleared",
    )


async def test_an_unknown_fault_class_is_reported_on_the_node_and_changes_nothing(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    await annotate(admin, "gpu-0000", inject="xid-999")
    error = await eventually(
        lambda: node_annotations(api, "gpu-0000").get("sandbox.gpuops.io/inject-fault-error"),
        what="injection error annotation",
    )
    assert "unknown fault class 'xid-999'" in error
    assert "xid-79" in error
    assert INJECT not in node_annotations(api, "gpu-0000")
    assert condition(api, "gpu-0000", "AcceleratedHardwareReady")["status"] == "True"


async def test_heartbeats_refresh_but_transition_time_is_kept(api: ApiServer, gpus: Fleet) -> None:
    gpus.inject("gpu-0002", "nvlink")
    first = await eventually(
        lambda: (
            (c := condition(api, "gpu-0002", "AcceleratedHardwareReady"))["status"] == "False" and c
        ),
        what="fault shown",
    )
    later = await eventually(
        lambda: (
            (c := condition(api, "gpu-0002", "AcceleratedHardwareReady"))["lastHeartbeatTime"]
            > first["lastHeartbeatTime"]
            and c
        ),
        within=4.0,
        what="a newer heartbeat",
    )
    assert later["lastTransitionTime"] == first["lastTransitionTime"]
    assert later["status"] == "False"
    assert later["reason"] == "NvidiaNVLinkError"
    heartbeats = api.request_log.matching(verb="patch", resource="nodes", subresource="status")
    assert all(e.code == 200 for e in heartbeats)


async def test_a_silent_agent_stops_heartbeating_its_conditions(
    api: ApiServer, gpus: Fleet
) -> None:
    gpus.inject("gpu-0000", "agent-silent")
    before = condition(api, "gpu-0000", "AcceleratedHardwareReady")["lastHeartbeatTime"]
    ready_before = condition(api, "gpu-0000", "Ready")["lastHeartbeatTime"]
    await eventually(
        lambda: condition(api, "gpu-0000", "Ready")["lastHeartbeatTime"] > ready_before,
        within=4.0,
        what="the kubelet's Ready heartbeat",
    )
    assert condition(api, "gpu-0000", "AcceleratedHardwareReady")["lastHeartbeatTime"] == before


async def test_a_transient_fault_clears_by_itself(api: ApiServer, kind_gpus: Fleet) -> None:
    # the kind agent: a transient fault's condition clears with it (the real ones are sticky)
    kind_gpus.inject("gpu-0001", "transient")
    await eventually(
        lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["reason"] == "DCGMError",
        what="transient fault shown",
    )
    await eventually(
        lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "True",
        within=4.0,
        what="transient fault gone",
    )


async def test_agent_request_gpu_reset_is_acknowledged_and_clears_the_fault(
    api: ApiServer, kind_gpus: Fleet, admin: KubeClient
) -> None:
    # the kind agent: it carries out a GPUReset request and shows healthy at once
    kind_gpus.inject("gpu-0001", "xid-62")
    await eventually(
        lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "False",
        what="fault shown",
    )
    await annotate(admin, "gpu-0001", request="GPUReset:gpu-0001-rem:1")
    ack = await eventually(lambda: node_annotations(api, "gpu-0001").get(ACK), what="agent ack")
    assert ack == "GPUReset:gpu-0001-rem:1:Succeeded"
    assert condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "True"


async def test_agent_request_gpu_reset_fails_when_the_gpu_is_off_the_bus(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    gpus.inject("gpu-0002", "xid-79")
    await annotate(admin, "gpu-0002", request="GPUReset:r:2")
    ack = await eventually(lambda: node_annotations(api, "gpu-0002").get(ACK), what="agent ack")
    assert ack == "GPUReset:r:2:Failed"
    assert condition(api, "gpu-0002", "AcceleratedHardwareReady")["reason"] == "NvidiaXID79Error"


async def test_agent_request_reboot_acks_after_the_node_is_back_with_a_new_boot_id(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    seen: list[str] = []

    def watch_ready(key: str, old: object, new: dict[str, Any] | None) -> None:
        if key == "gpu-0000" and new is not None:
            ready = next(c for c in new["status"]["conditions"] if c["type"] == "Ready")
            seen.append(ready["status"])

    gpus.nodes.subscribe(watch_ready)
    boot = api.store.get("nodes", "gpu-0000")["status"]["nodeInfo"]["bootID"]
    gpus.inject("gpu-0000", "xid-79")
    await annotate(admin, "gpu-0000", request="Reboot:rem-x:1")
    ack = await eventually(lambda: node_annotations(api, "gpu-0000").get(ACK), what="agent ack")
    assert ack == "Reboot:rem-x:1:Succeeded"
    node = api.store.get("nodes", "gpu-0000")
    assert node["status"]["nodeInfo"]["bootID"] != boot
    assert condition(api, "gpu-0000", "Ready")["status"] == "True"
    assert "Unknown" in seen  # it went NotReady on the way
    assert condition(api, "gpu-0000", "AcceleratedHardwareReady")["status"] == "True"


async def test_a_malformed_agent_request_is_answered_failed(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    await annotate(admin, "gpu-0002", request="Defragment:rem:1")
    ack = await eventually(lambda: node_annotations(api, "gpu-0002").get(ACK), what="agent ack")
    assert ack == "Defragment:rem:1:Failed"


async def test_random_injection_faults_healthy_nodes_only(api: ApiServer, gpus: Fleet) -> None:
    gpus.inject("gpu-0000", "xid-48")
    injector = Injector(gpus.agent, gpus.nodes, gpus.faults, 3600.0 * 50, random.Random(2))
    done = injector.step()  # a mean of 100 arrivals for 2 healthy nodes: both get one
    assert sorted(node for node, _ in done) == ["gpu-0001", "gpu-0002"]
    assert all(fault in gpus.faults for _, fault in done)
    visible = {node: fault for node, fault in done if not gpus.faults[fault].silent}
    for node, fault in visible.items():
        await eventually(
            lambda n=node, f=fault: (
                condition(api, n, "AcceleratedHardwareReady")["reason"] == gpus.faults[f].reason
            ),
            what=f"{fault} on {node}",
        )
    assert injector.step() == []  # nobody healthy is left


async def test_the_eks_profile_keeps_the_condition_after_a_reset_until_the_agent_restarts(
    api: ApiServer, admin: KubeClient
) -> None:
    """FleetConfig.agent: eks (issue 21): the condition stays as the agent reported it after a
    reset that fixed the GPU; the newest reason wins and the messages are appended; only the
    agent's restart writes it True again."""
    from remediation_emulator.fleet import fleet as fleet_module
    from tests.emulator.fleet.conftest import SHAPE, TEST_CONFIG, connection

    config = TEST_CONFIG.with_(agent="eks", reset_clears=1.0)
    async with fleet_module.running(connection(api), shape=SHAPE, config=config, seed=1) as gpus:
        await eventually(lambda: api.store.find("nodes", "gpu-0001"), what="the node")
        gpus.inject("gpu-0001", "xid-62")
        gpus.inject("gpu-0001", "xid-63")
        shown = await eventually(
            lambda: (
                (c := condition(api, "gpu-0001", "AcceleratedHardwareReady"))["reason"]
                == "NvidiaXID63Error"
                and c
            ),
            what="the newest finding's reason",
        )
        assert shown["status"] == "False"
        assert shown["message"] == (
            "detected XID-62 on the instance, review kernel logs for additional information.;"
            " detected XID-63 on the instance, review kernel logs for additional information."
        )
        # The NodeAgent protocol stops no GPU client: nvidia-smi refuses the reset.
        await annotate(admin, "gpu-0001", request="GPUReset:gpu-0001-rem:1")
        ack = await eventually(lambda: node_annotations(api, "gpu-0001").get(ACK), what="ack")
        assert ack == "GPUReset:gpu-0001-rem:1:Failed"
        # A reset that stopped them (a Job's) fixed the GPU: the condition stays as reported.
        assert gpus.agent.gpu_reset("gpu-0001")
        assert gpus.agent.validate("gpu-0001")
        after = gpus.agent.health("gpu-0001")
        assert after is not None
        assert health.desired(after)["AcceleratedHardwareReady"][0] == "False"
        assert condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "False"
        gpus.restart_agent("gpu-0001")
        await eventually(
            lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "True",
            what="the restarted agent's condition",
        )


# Report periods per profile (issue 21; D74) ------------------------------------------------


async def _change_to_write(api: ApiServer, config: Any, reason_of: str) -> tuple[float, float]:
    """Inject xid-62, wait for it on the Node, inject `reason_of`'s class at once after that
    write; (seconds from the injection to the first write, from the first write to the next)."""
    from remediation_emulator.fleet import fleet as fleet_module
    from tests.emulator.fleet.conftest import SHAPE, connection

    loop = asyncio.get_running_loop()
    async with fleet_module.running(connection(api), shape=SHAPE, config=config, seed=3) as gpus:
        await eventually(lambda: api.store.find("nodes", "gpu-0001"), what="the node")
        await eventually(
            lambda: any(
                c["type"] == "AcceleratedHardwareReady"
                for c in api.store.get("nodes", "gpu-0001")["status"].get("conditions", [])
            ),
            what="the agent's first report",
        )
        injected = loop.time()
        gpus.inject("gpu-0001", "xid-62")
        await eventually(
            lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "False",
            what="the finding on the Node",
        )
        first = loop.time()
        gpus.inject("gpu-0001", reason_of)
        await eventually(
            lambda: (
                condition(api, "gpu-0001", "AcceleratedHardwareReady")["reason"]
                != "NvidiaXID62Error"
            ),
            what="the second finding on the Node",
        )
        return first - injected, loop.time() - first


async def test_the_eks_agent_shows_a_change_at_its_next_15s_report_tick(api: ApiServer) -> None:
    """aws/eks-node-monitoring-agent pkg/manager/node_exporter.go: `Fatal` only marks the
    conditions dirty; `reportManagedConditions` writes them on a 15 s ticker. Scaled like the
    5 min heartbeat: heartbeat_period 30 s makes the tick 1.5 s."""
    from tests.emulator.fleet.conftest import TEST_CONFIG

    config = TEST_CONFIG.with_(agent="eks", heartbeat_period=30.0)
    assert config.report_interval() == 1.5
    to_first, to_second = await _change_to_write(api, config, "xid-64")
    assert to_first <= 1.5 + 0.5
    assert 1.5 - 0.3 <= to_second <= 1.5 + 0.5  # the write after a tick waits for the next


async def test_the_kind_agent_writes_a_change_at_once(api: ApiServer) -> None:
    from tests.emulator.fleet.conftest import TEST_CONFIG

    config = TEST_CONFIG.with_(agent="kind", heartbeat_period=30.0)
    assert config.report_interval() == 0.0
    to_first, to_second = await _change_to_write(api, config, "xid-64")
    assert to_first < 0.5
    assert to_second < 0.5


def test_report_intervals_scale_with_the_speed_profile_only() -> None:
    """15 s (EKS agent), 1 s (NPD's condition manager `updatePeriod`), at once (kind), each
    scaled as the speed profile scales the agents' real 5 min heartbeat."""
    from remediation_emulator.fleet.config import DEMO, FAST, REALISTIC

    assert REALISTIC.with_(agent="eks").report_interval() == 15.0
    assert REALISTIC.with_(agent="npd").report_interval() == 1.0
    assert DEMO.with_(agent="eks").report_interval() == 3.0
    assert FAST.with_(agent="eks").report_interval() == 0.05
    assert REALISTIC.with_(agent="kind").report_interval() == 0.0


def advertised(api: ApiServer, node: str) -> str | None:
    found: str | None = (api.store.get("nodes", node)["status"].get("allocatable") or {}).get(
        "nvidia.com/gpu"
    )
    return found


async def test_the_real_agents_fleet_plays_the_device_plugins_marks_by_default(
    api: ApiServer, gpus: Fleet
) -> None:
    """Issue 21: the device plugin's unhealthy mark is part of the real world by default: a
    critical XID takes a GPU off allocatable (NVIDIA/k8s-device-plugin internal/rm/health.go)."""
    gpus.inject("gpu-0001", "xid-79")
    await eventually(lambda: advertised(api, "gpu-0001") == "7", what="one GPU off allocatable")
    assert advertised(api, "gpu-0000") == "8"


async def test_the_kind_agents_fleet_marks_no_gpu(api: ApiServer, kind_gpus: Fleet) -> None:
    kind_gpus.inject("gpu-0001", "xid-79")
    await eventually(
        lambda: condition(api, "gpu-0001", "AcceleratedHardwareReady")["status"] == "False",
        what="the fault shown",
    )
    assert advertised(api, "gpu-0001") == "8"
