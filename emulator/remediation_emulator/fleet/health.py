"""The health of one emulated node and the Node conditions it shows, as pure values.

The node agent keeps one `NodeHealth` per node and replaces it on every change (fault injected,
reset, reboot started or finished, transient fault expired). Rendering conditions from it is
pure and takes `now`, so the rules that matter to the operator are testable without a server:
lastTransitionTime changes only when a condition's status changes, lastHeartbeatTime is the time
of the write, and the agent's conditions are not written while the node is rebooting or the
agent is silent.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_emulator.fleet.catalog import FaultClass

READY = "Ready"
ACCELERATED = "AcceleratedHardwareReady"
"""The EKS node monitoring agent's condition type for GPUs."""
GPU_HEALTHY = "GPUHealthy"
"""A node-problem-detector style custom condition; True means healthy (docs/emulator.md)."""
AGENT_CONDITIONS = (ACCELERATED, GPU_HEALTHY)
GPU_PROBLEM = "GPUProblem"
"""node-problem-detector's kernel-log condition (the chart's gpu-kernel-monitor.json): True
while a problem is present, the type names the problem."""
_NPD_DEFAULT = (
    "False",
    "NoGPUXidError",
    "no NVIDIA XID that needs node action in the kernel log since boot",
)
"""The chart's NPD default condition (charts/remediation-operator/npd/gpu-kernel-monitor.json)."""
NPD_CONDITION_XIDS = frozenset(
    {46, 48, 54, 61, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 144, 145, 146}
    | {147, 148, 149, 150, 151, 154, 155, 156, 158, 160}
)
"""The XIDs the chart's NPD kernel monitor turns into `GPUProblem` (its `permanent` rules,
charts/remediation-operator/npd/gpu-kernel-monitor.json; the others, 63 among them, are
`temporary`: an Event, no condition). A test keeps this equal to the chart's file."""
GPU_RESOURCE = "nvidia.com/gpu"
_XID_REASON = re.compile(r"NvidiaXID([0-9]+)Error")
_XID_OF_REASON = {"NvidiaDoubleBitError": 48}
"""Catalog reasons that name no XID but come with one: the `xid-48` class (faults.yaml: "XID
48: a double-bit ECC error") reports the EKS agent's double-bit reason, and the driver raises
XID 48 as a critical XID event as well."""
DEVICE_PLUGIN_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Application errors the NVIDIA device plugin's health check skips (NVIDIA/k8s-device-plugin,
internal/rm/health.go, `getDisabledHealthCheckXids`); every other critical XID marks the
device Unhealthy, and nothing in that process marks it Healthy again."""

_HEALTHY: Mapping[str, tuple[str, str, str]] = {
    READY: ("True", "KubeletReady", "kubelet is posting ready status"),
    # The EKS agent's own words when the GPU is fine (aws/eks-node-monitoring-agent).
    ACCELERATED: (
        "True",
        "NvidiaAcceleratedHardwareIsReady",
        "Monitoring for the Nvidia AcceleratedHardware system is active",
    ),
    GPU_HEALTHY: ("True", "GPUIsHealthy", "All GPUs passed the last health check"),
}
_UNREACHABLE = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
"""What the node lifecycle controller writes on Ready when a node stops reporting."""


def timestamp(moment: datetime) -> str:
    """RFC 3339 with second precision, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Transition:
    status: str
    since: datetime
    reason: str = ""


@dataclass(frozen=True)
class NodeHealth:
    boot_id: str
    fault: FaultClass | None = None
    fault_since: datetime | None = None
    rebooting_until: datetime | None = None
    resetting_until: datetime | None = None
    request: str | None = None
    """The agent request (`<Action>:<remediation>:<attempt>`) being carried out, if any."""
    last_request: str | None = None
    """The last agent request taken on, so a stale cache never makes it run twice."""
    pending_ack: str | None = None
    """An acknowledgement to write once the node can (after a reboot, when Ready again)."""
    transitions: Mapping[str, Transition] = field(default_factory=dict)
    latent: FaultClass | None = None
    """A fault a repair hid from the conditions but not fixed (`validation_fails`): only a
    validation Job finds it."""
    sticky: bool = False
    """The EKS node monitoring agent's profile (`FleetConfig.agent: eks`): the conditions show
    `shown`, what the agent last reported, not the hardware's state; only the agent's restart
    (`restart_agent`, or the node's reboot) sets them healthy again (docs/emulator.md)."""
    npd: bool = False
    """node-problem-detector's profile (`FleetConfig.agent: npd`, sticky too): `GPUProblem`
    instead of the EKS agent's conditions; a newer finding replaces reason and message and
    moves lastTransitionTime; a restart replays only findings within the lookback."""
    shown: tuple[str, str] | None = None
    """Sticky profile: the (reason, message) the agent reported, None: healthy. A newer finding
    replaces the reason and appends its message ("; ", no duplicates)."""
    device_plugin: bool = False
    """Play the device plugin's health check (`FleetConfig.device_plugin_marks`): the Node's
    allocatable `nvidia.com/gpu` is `gpus - unhealthy_gpus`."""
    gpus: int | None = None
    """The node's `nvidia.com/gpu` capacity as found (None: not a GPU node we can read)."""
    unhealthy_gpus: int = 0
    """GPUs the device plugin marked unhealthy since it started (a critical XID marks the
    failing GPU; only the plugin's restart forgets the marks)."""
    plugin_stopped: bool = False
    """The device plugin's pod is gone (the GPU Operator's stop label during a reset): the
    kubelet marks every device of the resource unhealthy, allocatable 0."""

    @property
    def rebooting(self) -> bool:
        return self.rebooting_until is not None

    @property
    def silent(self) -> bool:
        """The agent is not publishing: it has gone silent, or the node is rebooting."""
        return self.rebooting or (self.fault is not None and self.fault.silent)


def desired(health: NodeHealth) -> dict[str, tuple[str, str, str]]:
    """(status, reason, message) by condition type, for the conditions written now."""
    wanted = {READY: _UNREACHABLE if health.rebooting else _HEALTHY[READY]}
    if health.silent:
        return wanted
    if health.npd:
        shown = health.shown
        wanted[GPU_PROBLEM] = _NPD_DEFAULT if shown is None else ("True", *shown)
        return wanted
    if health.sticky:
        for type_ in AGENT_CONDITIONS:
            shown = health.shown
            wanted[type_] = _HEALTHY[type_] if shown is None else ("False", *shown)
        return wanted
    for type_ in AGENT_CONDITIONS:
        if health.fault is None:
            wanted[type_] = _HEALTHY[type_]
        else:
            wanted[type_] = ("False", health.fault.reason, health.fault.message)
    return wanted


def xid_of(fault: FaultClass) -> int | None:
    """The XID the driver raises for this fault class, or None (an NVLink counter or a DCGM
    finding raises no XID)."""
    xid = _XID_OF_REASON.get(fault.reason)
    if xid is None:
        found = _XID_REASON.fullmatch(fault.reason)
        xid = int(found.group(1)) if found is not None else None
    return xid


def marks_gpu(fault: FaultClass) -> bool:
    """The device plugin sees this fault as a critical XID on one GPU and marks it unhealthy
    (a class that is no XID, such as an NVLink or a DCGM finding, raises no XID event)."""
    xid = xid_of(fault)
    return xid is not None and xid not in DEVICE_PLUGIN_IGNORED_XIDS


def allocatable(health: NodeHealth) -> str | None:
    """What the kubelet shows as allocatable `nvidia.com/gpu` from the plugin's healthy
    devices, or None when the device plugin is not played (the Node keeps what it has)."""
    if not health.device_plugin or health.gpus is None:
        return None
    if health.plugin_stopped:
        return "0"
    return str(max(0, health.gpus - health.unhealthy_gpus))


def _marked(health: NodeHealth, fault: FaultClass | None) -> NodeHealth:
    """A fault the plugin sees marks its GPU (one per fault: the catalog names no GPU)."""
    if not health.device_plugin or fault is None or not marks_gpu(fault):
        return health
    return replace(health, unhealthy_gpus=max(health.unhealthy_gpus, 1))


def restart_device_plugin(health: NodeHealth) -> NodeHealth:
    """The device plugin's pod restarted: it enumerates the GPUs anew, all healthy (its marks
    lived in the process only); a GPU still failing is marked at its next XID."""
    return replace(health, unhealthy_gpus=0, plugin_stopped=False)


def device_plugin_running(health: NodeHealth, running: bool) -> NodeHealth:
    """The plugin's pod left the node or came back. Gone: the kubelet marks every device of
    the resource unhealthy at once (kubernetes/kubernetes pkg/kubelet/cm/devicemanager/
    manager.go, `PluginDisconnected` -> `markResourceUnhealthy`), allocatable 0; back: a new
    process, every GPU healthy (`restart_device_plugin`)."""
    if not running:
        return replace(health, plugin_stopped=True, unhealthy_gpus=0)
    if health.plugin_stopped:
        return restart_device_plugin(health)
    return health


def settle(health: NodeHealth, now: datetime) -> NodeHealth:
    """Record a transition for every written condition whose status changed."""
    transitions = dict(health.transitions)
    changed = False
    for type_, (status, reason, _) in desired(health).items():
        before = transitions.get(type_)
        # NPD moves the transition when the reason changes too (log_monitor.go generateStatus).
        moved = (
            health.npd and type_ == GPU_PROBLEM and before is not None and before.reason != reason
        )
        if before is None or before.status != status or moved:
            transitions[type_] = Transition(status, now, reason)
            changed = True
    return replace(health, transitions=transitions) if changed else health


def conditions(health: NodeHealth, now: datetime) -> list[dict[str, Any]]:
    """The Node conditions to write now (heartbeat = now; transition kept while status holds)."""
    health = settle(health, now)
    rendered = []
    for type_, (status, reason, message) in desired(health).items():
        rendered.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": timestamp(now),
                "lastTransitionTime": timestamp(health.transitions[type_].since),
            }
        )
    return rendered


def differs(health: NodeHealth, node: Mapping[str, Any]) -> bool:
    """Does the Node show something other than what the agent wants (ignoring heartbeats)?"""
    status = node.get("status", {})
    if status.get("nodeInfo", {}).get("bootID") != health.boot_id:
        return True
    seen = {c.get("type"): c for c in status.get("conditions", [])}
    for type_, wanted in desired(health).items():
        current = seen.get(type_)
        if current is None:
            return True
        if (current.get("status"), current.get("reason"), current.get("message")) != wanted:
            return True
        since = health.transitions.get(type_)
        if since is not None and current.get("lastTransitionTime") != timestamp(since.since):
            return True
    advertised = allocatable(health)
    if advertised is None:
        return False
    return bool((status.get("allocatable") or {}).get(GPU_RESOURCE) != advertised)


def adopt(
    node: Mapping[str, Any],
    catalog: Mapping[str, FaultClass],
    now: datetime,
    sticky: bool = False,
    npd: bool = False,
    device_plugin: bool = False,
) -> NodeHealth:
    """Take over a node as found (after a restart, or a node made by someone else): keep its
    bootID and transition times, and recognise a fault it already shows (and, playing the
    device plugin, the GPUs it already advertises short)."""
    status = node.get("status", {})
    boot_id = str(status.get("nodeInfo", {}).get("bootID", ""))
    transitions: dict[str, Transition] = {}
    fault: FaultClass | None = None
    fault_since: datetime | None = None
    by_reason = {f.reason: f for f in catalog.values() if f.reason}
    for condition in status.get("conditions", []):
        type_ = condition.get("type")
        since_text = condition.get("lastTransitionTime")
        if type_ not in _HEALTHY or not since_text:
            continue
        try:
            since = parse_timestamp(since_text)
        except ValueError:
            since = now
        transitions[type_] = Transition(str(condition.get("status")), since)
        if type_ == ACCELERATED and condition.get("status") == "False":
            fault = by_reason.get(str(condition.get("reason")))
            fault_since = since
    health = NodeHealth(
        boot_id,
        fault,
        fault_since if fault else None,
        transitions=transitions,
        sticky=sticky or npd,
        npd=npd,
        shown=reported(None, fault) if sticky and not npd and fault is not None else None,
        device_plugin=device_plugin,
        gpus=_count((status.get("capacity") or {}).get(GPU_RESOURCE)),
    )
    advertised = _count((status.get("allocatable") or {}).get(GPU_RESOURCE))
    if device_plugin and health.gpus is not None and advertised is not None:
        health = replace(health, unhealthy_gpus=max(0, health.gpus - advertised))
    return settle(health, now)


def _count(value: object) -> int | None:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def reported(shown: tuple[str, str] | None, fault: FaultClass) -> tuple[str, str] | None:
    """What the EKS agent's `Fatal` makes of a new finding over what it reported: the newest
    reason; the messages joined with "; " unless the old one already holds the new one
    (aws/eks-node-monitoring-agent pkg/manager/node_exporter.go). A silent class reports
    nothing."""
    if fault.silent or not fault.reason:
        return shown
    if shown is None:
        return (fault.reason, fault.message)
    old = shown[1]
    message = old if fault.message in old else f"{old}; {fault.message}" if old else fault.message
    return (fault.reason, message)


def kernel_line(xid: int, fault: FaultClass) -> str:
    """The driver's kernel log line for the XID, as NPD's kmsg watcher passes it on (the
    message of an NPD condition is the matched line: log_monitor.go `generateMessage`; format
    of NVIDIA/open-gpu-kernel-modules `kernel_rc_notification.c`; the GPU's bus id is the
    fake node's first GPU, gpunode/state.py)."""
    return f"NVRM: Xid (PCI:0000:10:00): {xid}, pid='<unknown>', name=<unknown>, {fault.summary}"


def npd_reported(shown: tuple[str, str] | None, fault: FaultClass) -> tuple[str, str] | None:
    """What NPD's kernel monitor makes of a finding: an XID one of the chart's permanent rules
    knows sets reason `NvidiaXID<n>Error` and the kernel line as message, replacing both when
    the reason changes and keeping the first line while it does not (kubernetes/
    node-problem-detector pkg/systemlogmonitor/log_monitor.go, `generateStatus`); an XID of a
    temporary rule (63, ...) and a class that is no kernel XID (NVLink, DCGM) change nothing."""
    xid = xid_of(fault)
    if fault.silent or xid is None or xid not in NPD_CONDITION_XIDS:
        return shown
    reason = f"NvidiaXID{xid}Error"
    if shown is not None and shown[0] == reason:
        return shown
    return (reason, kernel_line(xid, fault))


def inject(health: NodeHealth, fault: FaultClass, now: datetime) -> NodeHealth:
    if health.npd:
        shown = npd_reported(health.shown, fault)
    else:
        shown = reported(health.shown, fault) if health.sticky else None
    fresh = replace(health, fault=fault, fault_since=now, latent=None, shown=shown)
    return settle(_marked(fresh, fault), now)


def clear(health: NodeHealth, now: datetime) -> NodeHealth:
    """The hardware is healthy again; a sticky agent keeps showing what it reported."""
    return settle(replace(health, fault=None, fault_since=None, latent=None), now)


def restart_agent(
    health: NodeHealth, now: datetime, lookback: timedelta = timedelta(minutes=5)
) -> NodeHealth:
    """The agent restarted (its pod was deleted, OOM-killed, upgraded): a sticky agent writes
    its conditions healthy at start and forgets what it reported, also a fault that is still
    there (XID events are not replayed). NPD's kmsg watcher replays the lines newer than its
    `lookback` (stock 5m; logwatchers/kmsg/log_watcher_linux.go): a finding that recent is
    reported again, an older one forgotten. A kind agent shows the hardware as it is anyway."""
    shown = None
    fault, since = health.fault, health.fault_since
    if health.npd and fault is not None and since is not None and now - since <= lookback:
        shown = npd_reported(None, fault)
    return settle(replace(health, shown=shown), now)


def _repaired(health: NodeHealth, now: datetime) -> NodeHealth:
    """A repair cleared the fault (a kind agent's condition with it; a sticky agent's stays);
    a `validation_fails` class stays latent."""
    fault = health.fault
    latent = fault if fault is not None and fault.validation_fails else None
    return settle(replace(health, fault=None, fault_since=None, latent=latent), now)


def validates(health: NodeHealth) -> bool:
    """Whether a validation Job (DCGM diagnostics) passes now: no fault, shown or latent."""
    return not health.rebooting and health.fault is None and health.latent is None


def _chance(default: float, override: float | None) -> float:
    return default if override is None else override


def gpu_reset(
    health: NodeHealth, rng: random.Random, now: datetime, clears: float | None = None
) -> tuple[NodeHealth, bool]:
    """Reset the GPUs: (new health, whether the reset itself ran). A reset that runs clears the
    fault with the class's probability (or `clears`); an unreachable GPU cannot be reset."""
    fault = health.fault
    if fault is None:
        return health, True
    if fault.reset_fails:
        return health, False
    if rng.random() < _chance(fault.reset_clears, clears):
        return _repaired(health, now), True
    return health, True


def begin_reboot(health: NodeHealth, now: datetime, duration: float) -> NodeHealth:
    until = now + timedelta(seconds=duration)
    return settle(replace(health, rebooting_until=until), now)


def finish_reboot(
    health: NodeHealth,
    rng: random.Random,
    now: datetime,
    boot_id: str,
    clears: float | None = None,
) -> NodeHealth:
    """The node is back: a new bootID, Ready again, the fault gone with the reboot chance. A
    sticky agent restarted with the node: healthy at start, and a fault the reboot did not
    clear reported again as the driver meets it (an assumption: XID 79 recurs at GPU init)."""
    back = replace(health, rebooting_until=None, boot_id=boot_id)
    back = restart_device_plugin(back)  # a reboot restarts every pod, the device plugin's too
    if back.sticky:
        back = replace(back, shown=None)
    if back.fault is not None and rng.random() < _chance(back.fault.reboot_clears, clears):
        return _repaired(back, now)
    if back.sticky and back.fault is not None:
        again = npd_reported(None, back.fault) if back.npd else reported(None, back.fault)
        back = replace(back, shown=again, fault_since=now)
    # A fault the reboot did not clear recurs at GPU init (as above): the new plugin marks it.
    return settle(_marked(back, back.fault), now)


def transient_over(health: NodeHealth, now: datetime, duration: float) -> bool:
    fault = health.fault
    return (
        fault is not None
        and fault.clears_by_itself
        and health.fault_since is not None
        and now >= health.fault_since + timedelta(seconds=duration)
    )


def next_deadline(health: NodeHealth, transient_duration: float) -> datetime | None:
    """The earliest moment the health changes by itself (reboot or reset done, fault expires)."""
    deadlines = [d for d in (health.rebooting_until, health.resetting_until) if d is not None]
    if health.fault is not None and health.fault.clears_by_itself and health.fault_since:
        deadlines.append(health.fault_since + timedelta(seconds=transient_duration))
    return min(deadlines, default=None)
