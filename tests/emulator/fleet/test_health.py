"""Node conditions the agent shows: what the operator's fault matching and staleness read."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remediation_emulator.fleet import catalog, health
from remediation_emulator.fleet.health import NodeHealth

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
FAULTS = catalog.load()
NPD_MONITOR = Path(__file__).parents[3] / "charts/remediation-operator/npd/gpu-kernel-monitor.json"


def by_type(conditions: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    return {c["type"]: c for c in conditions}


def test_a_healthy_node_shows_the_eks_agents_ready_words() -> None:
    shown = by_type(health.conditions(NodeHealth("boot-1"), T0))
    assert shown["Ready"]["status"] == "True"
    accelerated = shown["AcceleratedHardwareReady"]
    assert accelerated["status"] == "True"
    assert accelerated["reason"] == "NvidiaAcceleratedHardwareIsReady"
    assert shown["GPUHealthy"]["status"] == "True"
    assert accelerated["lastHeartbeatTime"] == "2026-11-30T12:00:00Z"


def test_a_fault_sets_the_catalog_reason_and_message_on_both_gpu_conditions() -> None:
    faulty = health.inject(NodeHealth("boot-1"), FAULTS["xid-79"], T0)
    shown = by_type(health.conditions(faulty, T0))
    for type_ in ("AcceleratedHardwareReady", "GPUHealthy"):
        assert shown[type_]["status"] == "False"
        assert shown[type_]["reason"] == "NvidiaXID79Error"
        # The EKS agent's own words (monitors/nvidia/dcgm/dcgm_policies.go).
        assert shown[type_]["message"] == (
            "detected XID-79 on the instance, review kernel logs for additional information."
        )
    assert shown["Ready"]["status"] == "True"


def test_heartbeat_moves_but_transition_time_holds_while_the_status_holds() -> None:
    faulty = health.inject(health.settle(NodeHealth("b"), T0), FAULTS["xid-48"], T0)
    later = T0 + timedelta(minutes=7)
    shown = by_type(health.conditions(faulty, later))["AcceleratedHardwareReady"]
    assert shown["lastHeartbeatTime"] == "2026-11-30T12:07:00Z"
    assert shown["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    # A different fault (reason changes, status stays False) keeps the transition time too.
    other = health.inject(faulty, FAULTS["nvlink"], later)
    shown = by_type(health.conditions(other, later))["AcceleratedHardwareReady"]
    assert shown["reason"] == "NvidiaNVLinkError"
    assert shown["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    cleared = health.clear(other, later + timedelta(minutes=1))
    shown = by_type(health.conditions(cleared, later))["AcceleratedHardwareReady"]
    assert shown["status"] == "True"
    assert shown["lastTransitionTime"] == "2026-11-30T12:08:00Z"


def test_a_silent_agent_writes_only_the_kubelets_ready_condition() -> None:
    silent = health.inject(NodeHealth("b"), FAULTS["agent-silent"], T0)
    assert [c["type"] for c in health.conditions(silent, T0)] == ["Ready"]


def test_reboot_goes_unknown_then_comes_back_with_a_new_boot_id() -> None:
    rng = random.Random(1)
    faulty = health.inject(NodeHealth("old-boot"), FAULTS["xid-79"], T0)
    down = health.begin_reboot(faulty, T0, 30)
    shown = by_type(health.conditions(down, T0))
    assert shown["Ready"]["status"] == "Unknown"
    assert shown["Ready"]["reason"] == "NodeStatusUnknown"
    assert "AcceleratedHardwareReady" not in shown  # the agent is down with the node
    assert health.next_deadline(down, 60) == T0 + timedelta(seconds=30)
    up = health.finish_reboot(down, rng, T0 + timedelta(seconds=30), "new-boot", clears=1.0)
    assert up.boot_id == "new-boot"
    assert up.fault is None
    shown = by_type(health.conditions(up, T0 + timedelta(seconds=30)))
    assert shown["Ready"]["status"] == "True"
    assert shown["Ready"]["lastTransitionTime"] == "2026-11-30T12:00:30Z"


def test_a_reboot_that_does_not_clear_keeps_the_fault() -> None:
    faulty = health.inject(NodeHealth("a"), FAULTS["xid-54"], T0)
    up = health.finish_reboot(health.begin_reboot(faulty, T0, 1), random.Random(0), T0, "b")
    assert up.fault is FAULTS["xid-54"]  # CHECK_MECHANICALS: reboot_clears is 0


def test_gpu_reset_cannot_run_on_a_gpu_that_fell_off_the_bus() -> None:
    faulty = health.inject(NodeHealth("a"), FAULTS["xid-79"], T0)
    after, ran = health.gpu_reset(faulty, random.Random(0), T0, clears=1.0)
    assert not ran
    assert after.fault is FAULTS["xid-79"]


def test_gpu_reset_clears_a_reset_class_fault_with_its_probability() -> None:
    faulty = health.inject(NodeHealth("a"), FAULTS["xid-62"], T0)
    cleared, ran = health.gpu_reset(faulty, random.Random(0), T0, clears=1.0)
    assert ran
    assert cleared.fault is None
    kept, ran = health.gpu_reset(faulty, random.Random(0), T0, clears=0.0)
    assert ran
    assert kept.fault is FAULTS["xid-62"]
    rng = random.Random(7)
    cleared_count = sum(health.gpu_reset(faulty, rng, T0)[0].fault is None for _ in range(2000))
    assert 0.85 < cleared_count / 2000 < 0.95  # the catalog says 0.9


def test_a_transient_fault_is_over_after_its_duration() -> None:
    faulty = health.inject(NodeHealth("a"), FAULTS["transient"], T0)
    assert not health.transient_over(faulty, T0 + timedelta(seconds=59), 60)
    assert health.transient_over(faulty, T0 + timedelta(seconds=60), 60)
    assert health.next_deadline(faulty, 60) == T0 + timedelta(seconds=60)


def test_adopting_a_node_keeps_its_transition_times_and_recognises_its_fault() -> None:
    node = {
        "status": {
            "nodeInfo": {"bootID": "seen-boot"},
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z"},
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "False",
                    "reason": "NvidiaDoubleBitError",
                    "lastTransitionTime": "2026-11-30T11:00:00Z",
                },
            ],
        }
    }
    adopted = health.adopt(node, FAULTS, T0)
    assert adopted.boot_id == "seen-boot"
    assert adopted.fault is FAULTS["xid-48"]
    shown = by_type(health.conditions(adopted, T0))
    assert shown["Ready"]["lastTransitionTime"] == "2026-11-29T10:00:00Z"
    assert shown["AcceleratedHardwareReady"]["lastTransitionTime"] == "2026-11-30T11:00:00Z"
    assert shown["GPUHealthy"]["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    assert not health.differs(
        adopted,
        {
            "status": {
                "nodeInfo": {"bootID": "seen-boot"},
                "conditions": health.conditions(adopted, T0),
            }
        },
    )
    assert health.differs(adopted, node)  # GPUHealthy is missing on the node


# The EKS agent's profile (FleetConfig.agent: eks; issue 21) -------------------------------------


def eks(boot: str = "boot-1") -> NodeHealth:
    return health.settle(NodeHealth(boot, sticky=True), T0)


def accelerated(h: NodeHealth, now: datetime = T0) -> dict[str, object]:
    return by_type(health.conditions(h, now))["AcceleratedHardwareReady"]


def test_the_eks_agent_keeps_the_newest_reason_and_appends_messages() -> None:
    """aws/eks-node-monitoring-agent pkg/manager/node_exporter.go, `Fatal`: status False,
    reason replaced, message appended with "; " (no duplicates), lastTransitionTime kept."""
    later = T0 + timedelta(seconds=15)
    first = health.inject(eks(), FAULTS["xid-48"], T0)
    both = health.inject(first, FAULTS["xid-63"], later)
    shown = accelerated(both, later)
    assert shown["status"] == "False"
    assert shown["reason"] == "NvidiaXID63Error"
    assert shown["message"] == (
        "detected XID-48 on the instance, review kernel logs for additional information.;"
        " detected 1 Nvidia Double Bit error(s) on location Device;"
        " detected XID-63 on the instance, review kernel logs for additional information."
    )
    assert shown["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    again = health.inject(both, FAULTS["xid-63"], later)
    assert accelerated(again, later)["message"] == shown["message"]


def test_the_eks_agents_condition_outlives_a_repair_until_the_agent_restarts() -> None:
    faulty = health.inject(eks(), FAULTS["xid-62"], T0)
    reset, ran = health.gpu_reset(faulty, random.Random(1), T0, clears=1.0)
    assert ran
    assert reset.fault is None
    assert health.validates(reset)
    assert accelerated(reset)["status"] == "False"  # sticky: nothing sets it True again
    restarted = health.restart_agent(reset, T0)
    assert accelerated(restarted)["status"] == "True"


def test_a_restarted_eks_agent_forgets_a_fault_that_is_still_there() -> None:
    faulty = health.inject(eks(), FAULTS["xid-79"], T0)
    restarted = health.restart_agent(faulty, T0)
    assert restarted.fault is not None
    assert not health.validates(restarted)
    assert accelerated(restarted)["status"] == "True"


def test_after_a_reboot_the_eks_agent_reports_a_fault_the_reboot_did_not_clear() -> None:
    faulty = health.inject(eks(), FAULTS["xid-79"], T0)
    rebooting = health.begin_reboot(faulty, T0, 1.0)
    kept = health.finish_reboot(rebooting, random.Random(1), T0, "boot-2", clears=0.0)
    assert accelerated(kept)["status"] == "False"
    assert accelerated(kept)["reason"] == "NvidiaXID79Error"
    fixed = health.finish_reboot(rebooting, random.Random(1), T0, "boot-2", clears=1.0)
    assert accelerated(fixed)["status"] == "True"


# node-problem-detector's profile (FleetConfig.agent: npd; issue 21) ------------------------------


def npd() -> NodeHealth:
    return health.settle(NodeHealth("boot-1", sticky=True, npd=True), T0)


def gpu_problem(h: NodeHealth, now: datetime = T0) -> dict[str, object]:
    return by_type(health.conditions(h, now))["GPUProblem"]


def test_npd_shows_gpu_problem_true_with_the_newest_xid_and_moves_the_transition() -> None:
    """kubernetes/node-problem-detector log_monitor.go `generateStatus`: a permanent rule sets
    the condition True; a new reason replaces reason and message and moves the transition."""
    assert gpu_problem(npd())["status"] == "False"
    assert gpu_problem(npd())["reason"] == "NoGPUXidError"
    assert "AcceleratedHardwareReady" not in by_type(health.conditions(npd(), T0))
    later = T0 + timedelta(minutes=1)
    first = health.inject(npd(), FAULTS["xid-79"], T0)
    second = health.inject(first, FAULTS["xid-74"], later)
    shown = gpu_problem(second, later)
    assert (shown["status"], shown["reason"]) == ("True", "NvidiaXID74Error")
    assert shown["message"] == (
        "NVRM: Xid (PCI:0000:10:00): 74, pid='<unknown>', name=<unknown>,"
        " NVLink error reported by the peers of a GPU that failed"
    )
    assert shown["lastTransitionTime"] == "2026-11-30T12:01:00Z"
    nvlink = health.inject(second, FAULTS["nvlink"], later)  # no kernel XID: NPD sees nothing
    assert gpu_problem(nvlink, later)["reason"] == "NvidiaXID74Error"
    # XID 63 is a temporary rule of the chart's monitor: an Event, the condition unchanged.
    remap = health.inject(second, FAULTS["xid-63"], later)
    assert gpu_problem(remap, later) == shown


def test_npd_reports_xid_48_by_its_number_and_keeps_the_first_line_of_a_repeated_xid() -> None:
    """The chart's monitor names XID 48 `NvidiaXID48Error` (gpu-kernel-monitor.json), not the
    EKS agent's double-bit reason; a second line of the same rule changes nothing
    (log_monitor.go `generateStatus` replaces the message only when the reason changes)."""
    first = health.inject(npd(), FAULTS["xid-48"], T0)
    shown = gpu_problem(first)
    assert (shown["status"], shown["reason"]) == ("True", "NvidiaXID48Error")
    assert str(shown["message"]).startswith("NVRM: Xid (PCI:0000:10:00): 48, ")
    again = health.inject(first, FAULTS["xid-48"], T0 + timedelta(minutes=1))
    assert gpu_problem(again, T0) == shown


def test_the_npd_condition_xids_are_the_charts_permanent_rules() -> None:
    monitor = json.loads(NPD_MONITOR.read_text())
    permanent = {
        int(rule["reason"].removeprefix("NvidiaXID").removesuffix("Error"))
        for rule in monitor["rules"]
        if rule["type"] == "permanent" and rule["condition"] == "GPUProblem"
    }
    assert permanent == health.NPD_CONDITION_XIDS


def test_a_restarted_npd_replays_only_findings_within_its_lookback() -> None:
    faulty = health.inject(npd(), FAULTS["xid-79"], T0)
    soon = health.restart_agent(faulty, T0 + timedelta(minutes=4))
    assert gpu_problem(soon)["status"] == "True"
    late = health.restart_agent(faulty, T0 + timedelta(hours=1))
    assert gpu_problem(late)["status"] == "False"  # a GPU that failed an hour ago reads healthy
    assert late.fault is not None
    assert not health.validates(late)
    reset, _ = health.gpu_reset(faulty, random.Random(1), T0, clears=1.0)
    assert gpu_problem(reset)["status"] == "True"  # sticky until NPD restarts


# The NVIDIA device plugin's health check (FleetConfig.device_plugin_marks; D68).

GPU_NODE = {
    "status": {
        "capacity": {"nvidia.com/gpu": "8"},
        "allocatable": {"nvidia.com/gpu": "8"},
        "nodeInfo": {"bootID": "b"},
    }
}


def plugin_node() -> NodeHealth:
    return health.adopt(GPU_NODE, FAULTS, T0, device_plugin=True)


def test_a_critical_xid_takes_one_gpu_off_allocatable_and_a_reset_does_not_bring_it_back() -> None:
    node = plugin_node()
    assert health.allocatable(node) == "8"
    faulty = health.inject(node, FAULTS["xid-62"], T0)
    assert health.allocatable(faulty) == "7"
    assert health.differs(faulty, GPU_NODE), "the kubelet's count must be written"
    repaired, ran = health.gpu_reset(faulty, random.Random(0), T0, clears=1.0)
    assert ran
    assert repaired.fault is None
    assert health.allocatable(repaired) == "7", "marked for the life of the plugin process"
    assert health.allocatable(health.restart_device_plugin(repaired)) == "8"


def test_a_reboot_restarts_the_device_plugin() -> None:
    faulty = health.inject(plugin_node(), FAULTS["xid-79"], T0)
    assert health.allocatable(faulty) == "7"
    rebooting = health.begin_reboot(faulty, T0, 10.0)
    back = health.finish_reboot(rebooting, random.Random(0), T0, "b2", clears=1.0)
    assert health.allocatable(back) == "8"
    # A fault the reboot did not clear recurs at GPU init: the new plugin marks it again.
    again = health.finish_reboot(rebooting, random.Random(0), T0, "b2", clears=0.0)
    assert health.allocatable(again) == "7"


def test_application_xids_and_findings_that_are_no_xid_mark_no_gpu() -> None:
    node = plugin_node()
    for name, fault in FAULTS.items():
        marked = health.allocatable(health.inject(node, fault, T0)) == "7"
        xid = fault.reason.removeprefix("NvidiaXID").removesuffix("Error")
        if fault.reason == "NvidiaDoubleBitError":
            xid = "48"  # the EKS agent's words for XID 48
        expected = xid.isdigit() and int(xid) not in {13, 31, 43, 45, 68, 109}
        assert marked is expected, name


def test_without_the_device_plugin_played_the_node_keeps_its_count() -> None:
    node = health.adopt(GPU_NODE, FAULTS, T0)
    assert health.allocatable(health.inject(node, FAULTS["xid-62"], T0)) is None


def test_adopting_a_node_that_advertises_short_keeps_the_marks() -> None:
    short = {"status": {**GPU_NODE["status"], "allocatable": {"nvidia.com/gpu": "6"}}}
    assert health.allocatable(health.adopt(short, FAULTS, T0, device_plugin=True)) == "6"


def test_a_device_plugin_pod_taken_off_the_node_advertises_nothing_then_all_anew() -> None:
    """The GPU Operator's stop label during a reset takes the plugin's pod off: the kubelet
    marks the resource unhealthy (allocatable 0); the new pod starts with every GPU healthy."""
    repaired, _ = health.gpu_reset(
        health.inject(plugin_node(), FAULTS["xid-62"], T0), random.Random(0), T0, clears=1.0
    )
    assert health.allocatable(repaired) == "7"
    stopped = health.device_plugin_running(repaired, False)
    assert health.allocatable(stopped) == "0"
    assert health.allocatable(health.device_plugin_running(stopped, True)) == "8"
    assert health.device_plugin_running(repaired, True) == repaired, "a running plugin stays"
