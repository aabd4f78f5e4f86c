"""Every delay and probability the emulated fleet uses, in one value, with named profiles.

Tests need a fleet that reboots in a fraction of a second; the demo needs one slow enough to
watch; a benchmark of realistic timings needs the figures from `shared/reference/gpu-faults.md`.
One frozen dataclass keeps all of them in one place, so no controller hides a magic number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

EMULATED_LABEL = "sandbox.gpuops.io/emulated"
"""On every Node and NodeClaim the fleet creates (see `FleetConfig.adopt_all_nodes`)."""


AGENT_PROFILES = ("kind", "eks", "npd")
"""The node agent's reporting profiles (`FleetConfig.agent`)."""

REAL_HEARTBEAT = 300.0
"""Both real agents re-send unchanged conditions every 5 minutes: the EKS node monitoring
agent's `heartbeatInterval` (aws/eks-node-monitoring-agent pkg/manager/node_exporter.go) and
node-problem-detector's `--k8s-exporter-heartbeat-period` default (cmd/options/options.go).
`FleetConfig.heartbeat_period` is that period in the speed profile's time."""

REPORT_INTERVALS = {"kind": 0.0, "eks": 15.0, "npd": 1.0}
"""Real seconds from a change of the agent's findings to the write that shows it, at most: the
EKS agent writes its dirty conditions on a 15 s ticker (`reportInterval`, node_exporter.go),
NPD's condition manager looks for changes every second (`updatePeriod`,
pkg/exporters/k8sexporter/condition/manager.go); the kind agent writes at once."""


_FLAGS = ("adopt_all_nodes", "job_controller", "node_program", "device_plugin_marks")
"""The fields that are true or false."""


class ConfigError(ValueError):
    """A fleet setting that cannot work; the message names the field."""


@dataclass(frozen=True)
class FleetConfig:
    """Timings in seconds, probabilities in [0, 1]."""

    heartbeat_period: float = 1.0
    """How often the node agent re-sends its unchanged conditions on every node (both real
    agents: 300 s, `REAL_HEARTBEAT`); the agent's report interval scales with it
    (`report_interval`). Costs nodes / heartbeat_period status patches per second against the
    API server."""
    heartbeat_tick: float = 0.1
    """Granularity of the one heartbeat scheduler task; nodes due in a tick are patched together."""
    reset_duration: float = 0.2
    """How long a GPU reset takes, by Job or by the agent (NVIDIA: about 2 minutes)."""
    reboot_duration: float = 0.5
    """How long a rebooting node stays NotReady (8-GPU node: up to about 20 minutes)."""
    job_duration: float = 0.2
    """How long a pinned Job without a remediation action runs before it ends."""
    job_failure_probability: float = 0.0
    """Chance that a pinned Job fails for reasons of its own (image pull, OOM...)."""
    reset_clears: float | None = None
    """Overrides every fault class's chance that a GPU reset clears it (None: the catalog's)."""
    reboot_clears: float | None = None
    """Overrides every fault class's chance that a reboot clears it (None: the catalog's)."""
    transient_duration: float = 1.0
    """How long a self-clearing (transient) fault lasts."""
    max_pod_grace: float = 0.2
    """Upper bound on how long the kubelet honours a pod's termination grace period."""
    orphan_pod_gc_after: float = 0.5
    """Pods bound to a node that does not exist are deleted after this (pod GC: 40 s)."""
    replacement_delay: float = 0.3
    """Karpenter: delay between a NodeClaim's removal and its replacement being Ready."""
    eviction_retry: float = 0.2
    """Karpenter: wait before retrying an eviction a PodDisruptionBudget refused."""
    fault_rate_per_node_hour: float = 0.0
    """Random fault injection rate; 0 turns the injector off."""
    adopt_all_nodes: bool = True
    """Play kubelet, agent and Karpenter for every Node and NodeClaim (the emulator, where
    tests may create nodes by hand); False: only for those labelled
    `sandbox.gpuops.io/emulated=true` (a real cluster, whose own nodes must be left alone)."""
    job_controller: bool = False
    """A real Job controller runs Jobs (a real API server with kube-controller-manager): the
    Job runner then plays the kubelet for the Jobs' pods (Running, then Succeeded or Failed)
    and leaves Job status to the controller. False: it writes Job status itself (the emulator,
    which has no Job controller)."""
    node_program: bool = False
    """Executor Jobs whose container runs `remediation-operator node ...` run that program,
    against a fake GPU node per node (`node_program.py`), instead of being pretended."""
    agent: str = "eks"
    """How the node agent reports: `eks` (the default: the EKS node monitoring agent, sticky
    until the agent restarts, the newest finding's reason, messages appended, a 15 s report
    tick) or `npd` (node-problem-detector's kernel monitor: `GPUProblem` True, sticky until
    NPD restarts, which replays only `npd_lookback`) or `kind` (a kinder agent for demos: the
    condition follows the hardware, a repair that worked clears it at once; docs/emulator.md)."""
    npd_lookback: float = 300.0
    """node-problem-detector's kmsg `lookback` on restart (stock config: 5m)."""
    device_plugin_marks: bool | None = None
    """Play the NVIDIA device plugin's health check: a critical XID marks one GPU unhealthy
    for the life of the plugin process, so the Node's allocatable `nvidia.com/gpu` drops by
    one and stays so across a GPU reset, until the plugin restarts (its pod deleted, a
    reboot, or the Node annotation `sandbox.gpuops.io/restart-device-plugin`;
    docs/emulator.md). None (the default): on with the real agents' profiles (`eks`, `npd`),
    as on a real node, off with `kind`."""
    workers: int = 4
    """Concurrent reconciles per controller."""
    http_concurrency: int = 32
    """Concurrent HTTP requests the fleet keeps in flight against the API server."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "agent":
                if value not in AGENT_PROFILES:
                    raise ConfigError(
                        f"fleet config agent: one of {', '.join(AGENT_PROFILES)}, got {value!r}"
                    )
                continue
            if f.name in _FLAGS:
                if f.name == "device_plugin_marks" and value is None:
                    continue
                if not isinstance(value, bool):
                    raise ConfigError(f"fleet config {f.name}: expected true or false")
                continue
            if value is None:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ConfigError(f"fleet config {f.name}: expected a number, got {value!r}")
            if value < 0:
                raise ConfigError(f"fleet config {f.name}: must not be negative, got {value}")
        for name in ("job_failure_probability", "reset_clears", "reboot_clears"):
            value = getattr(self, name)
            if value is not None and value > 1:
                raise ConfigError(f"fleet config {name}: a probability is at most 1, got {value}")
        for name in ("heartbeat_period", "heartbeat_tick"):
            if getattr(self, name) == 0:
                raise ConfigError(f"fleet config {name}: must be greater than 0")
        for name in ("workers", "http_concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"fleet config {name}: must be at least 1")

    def report_interval(self) -> float:
        """Seconds between the agent's report ticks in this speed profile (0: it writes a
        change at once): the profile's real interval, scaled as `heartbeat_period` scales
        the real 5 minutes."""
        return REPORT_INTERVALS[self.agent] * self.heartbeat_period / REAL_HEARTBEAT

    def owns(self, obj: Mapping[str, Any]) -> bool:
        """Is this Node or NodeClaim one the fleet plays the machinery for?"""
        labels = obj.get("metadata", {}).get("labels") or {}
        return self.adopt_all_nodes or labels.get(EMULATED_LABEL) == "true"

    @property
    def marks_gpus(self) -> bool:
        """Whether the device plugin's unhealthy marks are played (`device_plugin_marks`, by
        default with the real agents' profiles)."""
        if self.device_plugin_marks is None:
            return self.agent != "kind"
        return self.device_plugin_marks

    def with_(self, **changes: float | int | bool | str | None) -> FleetConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


FAST = FleetConfig()
"""For tests: everything happens within a second."""

DEMO = FleetConfig(
    heartbeat_period=60.0,
    heartbeat_tick=1.0,
    reset_duration=5.0,
    reboot_duration=20.0,
    job_duration=5.0,
    transient_duration=60.0,
    max_pod_grace=3.0,
    orphan_pod_gc_after=10.0,
    replacement_delay=15.0,
    eviction_retry=5.0,
)
"""For `make demo`: slow enough to watch `kubectl get remediations` move, fast enough to wait."""

REALISTIC = FleetConfig(
    # Figures from shared/reference/gpu-faults.md: EKS agent heartbeat 5 min, GPU reset about
    # 2 min, 8-GPU node reboot up to about 20 min, Karpenter launch + registration in minutes.
    heartbeat_period=300.0,
    heartbeat_tick=1.0,
    reset_duration=120.0,
    reboot_duration=1200.0,
    job_duration=60.0,
    transient_duration=600.0,
    max_pod_grace=30.0,
    orphan_pod_gc_after=40.0,
    replacement_delay=300.0,
    eviction_retry=5.0,
)
"""Published durations; for long-running benchmarks, not for watching."""

PROFILES: dict[str, FleetConfig] = {"fast": FAST, "demo": DEMO, "realistic": REALISTIC}
