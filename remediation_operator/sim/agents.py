"""What the simulated node agents and device plugin report, as the real ones do: no kinder.

The simulator knows the hardware's truth (`hosts.Host.fault`); the operator reads only what the
agents wrote. Real agents do not follow the hardware: the Amazon EKS node monitoring agent and
node-problem-detector keep a fault condition set until they restart, a later finding overwrites
the reason of an earlier one, and the NVIDIA device plugin keeps a GPU it saw fail off
allocatable until its own restart (docs/simulator.md, "Agents", cites each source). So a GPU
reset that fixed the GPU changes nothing the operator can see until something restarts the
agent: the policy's verification after a repair, a reboot, or a human. This module holds that
reported state per host and the pure rules that change it; `hosts.Publisher` writes it.

Profiles (the fleet file's `agent:`):
- `eks`: the EKS node monitoring agent (aws/eks-node-monitoring-agent,
  `pkg/manager/node_exporter.go`): a finding writes its condition unhealthy with the newest
  reason and the messages joined with "; "; `True` only at agent start; a restarted agent
  forgets what it reported and finds a fault still present again at its next check.
- `npd`: node-problem-detector's kernel-log monitor (kubernetes/node-problem-detector,
  `pkg/systemlogmonitor/log_monitor.go`): GPU XIDs on `GPUProblem=True` (no
  `AcceleratedHardwareReady`; a finding that is no kernel XID, such as a DCGM health code, is
  not seen); a newer XID replaces reason and message; a restart replays only kernel lines newer
  than the `lookback` (5 min), so an older fault is forgotten until the driver logs it again.
- `kind`: the simulator's agents before issue 23: the conditions follow the hardware, a repair
  that worked clears them at once, nothing is marked off allocatable. Kept for comparison.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from remediation_operator.sim.faultmix import Symptom

READY = "Ready"
ACCELERATED = "AcceleratedHardwareReady"
GPU_PROBLEM = "GPUProblem"
"""node-problem-detector's kernel-log GPU condition (the chart's gpu-kernel-monitor.json)."""
NPD_HEALTHY = ("False", "NoGPUXidError")
"""The chart's NPD default for `GPUProblem` (charts/remediation-operator/npd/)."""
NPD_LOOKBACK = 300.0
"""Seconds of kernel log NPD's kmsg watcher replays on start (stock config: `lookback: 5m`,
pkg/systemlogmonitor/logwatchers/kmsg/log_watcher_linux.go)."""
HEARTBEAT = 300.0
"""Seconds between re-sends of unchanged conditions: NPD's `--k8s-exporter-heartbeat-period`
default (5m, pkg/exporters/k8sexporter/condition/manager.go); the EKS agent's heartbeat, as the
emulator's realistic profile has it (docs/emulator.md). A change is written at once (the EKS
agent reports every 15 s on change, NPD's manager checks every second)."""

_XID = re.compile(r"NvidiaXID([0-9]+)Error")
_XID_OF_REASON = {"NvidiaDoubleBitError": 48}
"""A double-bit ECC error comes with XID 48 in the kernel log and to the device plugin."""
DEVICE_PLUGIN_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Application XIDs the NVIDIA device plugin's health check skips (NVIDIA/k8s-device-plugin,
internal/rm/health.go); every other critical XID marks the GPU unhealthy for the life of the
plugin's process."""


@dataclass(frozen=True)
class Daemon:
    """Where an agent's DaemonSet pods run and how they are labelled, as the real installs do
    (the policy's `validation.restartPods` selects them)."""

    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...]


EKS_AGENT = Daemon(
    "kube-system",
    "eks-node-monitoring-agent",
    (("app.kubernetes.io/name", "eks-node-monitoring-agent"),),
)
"""The EKS add-on `eks-node-monitoring-agent` (its chart's DaemonSet labels)."""
NPD_AGENT = Daemon(
    "remediation-system-node-problem-detector",
    "node-problem-detector",
    (("app.kubernetes.io/name", "remediation-operator-node-problem-detector"),),
)
"""Our chart's node-problem-detector (templates/npd-configmap.yaml, `npdSelectorLabels`),
installed as release remediation-operator in namespace remediation-system."""
DEVICE_PLUGIN = Daemon(
    "gpu-operator", "nvidia-device-plugin", (("app", "nvidia-device-plugin-daemonset"),)
)
"""The GPU Operator's device plugin DaemonSet (`app=nvidia-device-plugin-daemonset`)."""
POD_START = 30.0
"""Seconds from a daemon pod's deletion until its successor is Ready (ASSUMPTION: the image is
cached on the node; the container starts and passes its readiness check)."""


class AgentProfile(StrEnum):
    eks = "eks"
    npd = "npd"
    kind = "kind"

    @property
    def sticky(self) -> bool:
        return self is not AgentProfile.kind

    @property
    def daemon(self) -> Daemon | None:
        """The agent's own DaemonSet (None: the kind agent is no pod anyone restarts)."""
        return {AgentProfile.eks: EKS_AGENT, AgentProfile.npd: NPD_AGENT}.get(self)


def xid_of(reason: str) -> int | None:
    """The XID a reason carries (`NvidiaXID79Error` -> 79; a double-bit error -> 48)."""
    if reason in _XID_OF_REASON:
        return _XID_OF_REASON[reason]
    found = _XID.fullmatch(reason)
    return int(found.group(1)) if found is not None else None


def eks_message(reason: str) -> str:
    """The EKS agent's message for a finding (monitors/nvidia/dcgm/dcgm_policies.go for XIDs)."""
    xid = xid_of(reason)
    if reason == "NvidiaDoubleBitError":
        return "Nvidia Double Bit error detected on the instance (XID 48)."
    if xid is not None:
        return f"detected XID-{xid} on the instance, review kernel logs for additional information."
    return f"{reason} detected on the instance."


def marks_gpu(symptom: Symptom | None) -> bool:
    """Whether the device plugin sees this finding as a critical XID and marks a GPU."""
    if symptom is None:
        return False
    xid = xid_of(symptom.reason)
    return xid is not None and xid not in DEVICE_PLUGIN_IGNORED_XIDS


def agent_condition(symptom: Symptom) -> bool:
    """A node agent's condition (sticky under a real profile); `Ready` is the kubelet's and the
    node lifecycle controller's, which follow the host as it is."""
    return symptom.type != READY


@dataclass(frozen=True)
class Finding:
    """One condition as an agent reported it (unhealthy)."""

    status: str
    reason: str
    message: str


@dataclass
class AgentState:
    """What one host's agent and device plugin hold in memory (simulator state, per machine)."""

    reported: dict[str, Finding] = field(default_factory=dict)
    """Condition type -> the finding the agent shows (absent: the condition is healthy)."""
    marked_gpus: int = 0
    """GPUs the device plugin marked unhealthy since it started."""

    def clear(self) -> None:
        self.reported.clear()
        self.marked_gpus = 0


def seen_as(profile: AgentProfile, symptom: Symptom) -> tuple[str, Finding] | None:
    """The condition type and finding `profile` reports for `symptom` (None: not seen)."""
    if profile is AgentProfile.npd:
        if symptom.type == ACCELERATED:
            xid = xid_of(symptom.reason)
            if xid is None:
                return None  # NPD's kernel monitor sees no DCGM health code, no NVLink finding
            return GPU_PROBLEM, Finding(
                "True", f"NvidiaXID{xid}Error", f"NVRM: Xid (PCI:0000:00:00): {xid}, pid=0"
            )
        return symptom.type, Finding(symptom.status, symptom.reason, f"{symptom.reason}.")
    return symptom.type, Finding(symptom.status, symptom.reason, eks_message(symptom.reason))


def report(profile: AgentProfile, state: AgentState, symptom: Symptom | None) -> bool:
    """The agent found `symptom` now (a fault arrived, or one still present was found again).
    The newest reason wins; the EKS agent appends the message to the one it showed, NPD replaces
    it. The device plugin marks the failing GPU. True when what is shown changed."""
    if symptom is None or not agent_condition(symptom) or not profile.sticky:
        return False
    before = (dict(state.reported), state.marked_gpus)
    if marks_gpu(symptom):
        state.marked_gpus = max(state.marked_gpus, 1)  # one per fault: no GPU is named
    _show(profile, state, symptom)
    return (state.reported, state.marked_gpus) != before


def _show(profile: AgentProfile, state: AgentState, symptom: Symptom) -> None:
    seen = seen_as(profile, symptom)
    if seen is None:
        return
    type_, finding = seen
    old = state.reported.get(type_)
    if profile is AgentProfile.eks and old is not None and old.status == finding.status:
        message = (
            old.message if finding.message in old.message else f"{old.message}; {finding.message}"
        )
        finding = Finding(finding.status, finding.reason, message)
    state.reported[type_] = finding


def restart_agent(
    profile: AgentProfile, state: AgentState, symptom: Symptom | None, fault_age: float | None
) -> None:
    """The agent restarted (its pod deleted, the node rebooted, a human's repair): it writes
    healthy at start and forgets what it reported. NPD replays a finding of the fault still
    present if it is younger than its lookback (`fault_age`: seconds since its onset)."""
    state.reported.clear()
    if (
        profile is AgentProfile.npd
        and symptom is not None
        and fault_age is not None
        and fault_age <= NPD_LOOKBACK
        and agent_condition(symptom)
    ):
        _show(profile, state, symptom)


def restart_device_plugin(state: AgentState) -> None:
    """The device plugin restarted: it enumerates every GPU healthy (its marks lived in the
    process only); a GPU still failing is marked again at its next XID."""
    state.marked_gpus = 0
