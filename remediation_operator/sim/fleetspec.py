"""The simulated fleet: how many hosts, where they sit, what runs on them, and what goes wrong.

A what-if study changes the fleet more often than the fault data (a bigger cluster, more zones,
a flaky health checker), so the fleet is its own small YAML file (`--fleet F.yaml`). Every field
has a default taken from the Llama 3 run (2,048 hosts of 8 GPUs) so `simulate` works without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from remediation_operator.sim import spec
from remediation_operator.sim.agents import AgentProfile
from remediation_operator.sim.faultmix import Symptom
from remediation_operator.sim.spec import Range, SpecError

DATA = Path(__file__).parent / "data"
"""Shipped fleet files: `fleet-llama3.yaml` (the defaults, written out), `fleet-storms.yaml`."""

ZONE_LABEL = "topology.kubernetes.io/zone"
POOL_LABEL = "karpenter.sh/nodepool"
GPU_LABEL = "nvidia.com/gpu.present"


@dataclass(frozen=True)
class JobSpec:
    """Gang-scheduled training jobs: each needs `nodes_per_job` nodes at once, all healthy.

    A job is interrupted when any of its nodes faults or is drained; it restarts from its last
    checkpoint on K schedulable nodes after `restart_overhead`, losing the work since then.
    """

    nodes_per_job: int = 16
    utilization: float = 0.9
    """Fraction of the fleet's nodes that jobs try to occupy (the number of job slots)."""
    length: timedelta = timedelta(hours=24)
    """Compute time each job needs to finish; a finished job is followed by a new one."""
    checkpoint_every: timedelta = timedelta(hours=1)
    restart_overhead: timedelta = timedelta(minutes=10)
    exclude_after_crashes: int | None = None
    """The training framework's own fault attribution: after a node made this many attempts
    of a job crash, the job's launcher leaves it out until its fault is repaired (the health
    checks and failed-rank attribution large training runs use; Llama 3, arXiv 2407.21783,
    section 3.3.4). None: a job lands on a faulty node again and again."""


@dataclass(frozen=True)
class StormSpec:
    """False-positive storms: a broken health checker flips a fraction of one zone at once."""

    mean_interval: timedelta = timedelta(days=14)
    """Storms arrive as a Poisson process with this mean gap."""
    fraction: float = 0.3
    """Share of the struck zone's nodes whose condition flips."""
    lasts: Range = field(
        default_factory=lambda: Range(timedelta(minutes=10), timedelta(minutes=30))
    )
    symptom: Symptom = field(
        default_factory=lambda: Symptom("AcceleratedHardwareReady", "False", "DCGMError")
    )
    first_at: timedelta | None = None
    """Force the first storm at this offset from the start (scenarios); later ones are random."""


@dataclass(frozen=True)
class FleetSpec:
    nodes: int = 2048
    gpus_per_node: int = 8
    zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-c", "zone-d")
    pools: tuple[str, ...] = ("gpu-training",)
    """Karpenter NodePools (`karpenter.sh/nodepool`); each zone's nodes alternate between them."""
    fault_rate_scale: float = 1.0
    """Multiplies every cause's arrival rate (2.0 = a fleet twice as flaky as Llama 3's)."""
    jobs: JobSpec | None = field(default_factory=JobSpec)
    storms: StormSpec | None = None
    agent: AgentProfile = AgentProfile.eks
    """How the node agents report (sim/agents.py): `eks` (the default) and `npd` behave as the
    real ones do (sticky conditions, the newest reason wins, the device plugin's mark); `kind`
    follows the hardware, as the simulator did before issue 23 (for comparison only)."""
    agent_redetect: Range = field(
        default_factory=lambda: Range(timedelta(minutes=1), timedelta(minutes=5))
    )
    """After the agent restarted without a reboot, how long until it finds a fault that is
    still present again (its next check, or the driver logging the XID again when the GPU is
    next used): ASSUMPTION, neither agent documents a period for it."""

    def zone_of(self, index: int) -> str:
        return self.zones[index % len(self.zones)]

    def pool_of(self, index: int) -> str:
        return self.pools[(index // len(self.zones)) % len(self.pools)]


def load(path: Path | None) -> FleetSpec:
    """Read a fleet file; with no path, the default fleet."""
    if path is None:
        return FleetSpec()
    data = spec.read_yaml(path)
    try:
        return parse(data)
    except SpecError as exc:
        raise SpecError(exc.path, exc.field_message, str(path)) from exc


def parse(data: Any) -> FleetSpec:
    if data is None:
        return FleetSpec()
    raw = spec.mapping(data, "")
    spec.only(
        raw,
        "",
        {
            "nodes",
            "gpusPerNode",
            "zones",
            "pools",
            "faultRateScale",
            "jobs",
            "storms",
            "agent",
            "agentRedetect",
        },
    )
    base = FleetSpec()
    zones = base.zones
    if "zones" in raw:
        zones_raw = raw["zones"]
        if isinstance(zones_raw, int) and not isinstance(zones_raw, bool):
            zones = tuple(
                f"zone-{chr(ord('a') + i)}" for i in range(spec.integer(zones_raw, "zones", 1))
            )
        else:
            zones = _names(zones_raw, "zones")
    nodes = spec.integer(raw.get("nodes", base.nodes), "nodes", minimum=1)
    jobs: JobSpec | None = base.jobs
    if "jobs" in raw:
        jobs = None if raw["jobs"] is None else _jobs(raw["jobs"], nodes)
    storms = None if raw.get("storms") is None else _storms(raw["storms"])
    return FleetSpec(
        nodes=nodes,
        gpus_per_node=spec.integer(raw.get("gpusPerNode", base.gpus_per_node), "gpusPerNode", 1),
        zones=zones,
        pools=_names(raw["pools"], "pools") if "pools" in raw else base.pools,
        fault_rate_scale=spec.number(
            raw.get("faultRateScale", base.fault_rate_scale), "faultRateScale"
        ),
        jobs=jobs,
        storms=storms,
        agent=_agent(raw.get("agent", base.agent.value)),
        agent_redetect=(
            spec.duration_range(raw["agentRedetect"], "agentRedetect")
            if "agentRedetect" in raw
            else base.agent_redetect
        ),
    )


def _agent(value: Any) -> AgentProfile:
    names = ", ".join(p.value for p in AgentProfile)
    if not isinstance(value, str) or value not in {p.value for p in AgentProfile}:
        raise SpecError("agent", f"must be one of {names}, got {value!r}")
    return AgentProfile(value)


def _names(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(path, f"must be a non-empty list of names, got {value!r}")
    names = tuple(spec.text(v, f"{path}[{i}]") for i, v in enumerate(value))
    if len(set(names)) != len(names):
        raise SpecError(path, "lists a name twice")
    return names


def _jobs(value: Any, nodes: int) -> JobSpec:
    raw = spec.mapping(value, "jobs")
    spec.only(
        raw,
        "jobs",
        {
            "nodesPerJob",
            "utilization",
            "length",
            "checkpointEvery",
            "restartOverhead",
            "excludeAfterCrashes",
        },
    )
    base = JobSpec()
    k = spec.integer(raw.get("nodesPerJob", base.nodes_per_job), "jobs.nodesPerJob", 1)
    if k > nodes:
        raise SpecError("jobs.nodesPerJob", f"{k} is more than the fleet's {nodes} nodes")
    length = spec.duration(raw["length"], "jobs.length") if "length" in raw else base.length
    if length <= timedelta(0):
        raise SpecError("jobs.length", "must be longer than 0s")
    checkpoint = (
        spec.duration(raw["checkpointEvery"], "jobs.checkpointEvery")
        if "checkpointEvery" in raw
        else base.checkpoint_every
    )
    if checkpoint <= timedelta(0):
        raise SpecError("jobs.checkpointEvery", "must be longer than 0s")
    return JobSpec(
        nodes_per_job=k,
        utilization=spec.probability(raw.get("utilization", base.utilization), "jobs.utilization"),
        length=length,
        checkpoint_every=checkpoint,
        restart_overhead=(
            spec.duration(raw["restartOverhead"], "jobs.restartOverhead")
            if "restartOverhead" in raw
            else base.restart_overhead
        ),
        exclude_after_crashes=(
            spec.integer(raw["excludeAfterCrashes"], "jobs.excludeAfterCrashes", 1)
            if raw.get("excludeAfterCrashes") is not None
            else base.exclude_after_crashes
        ),
    )


def _storms(value: Any) -> StormSpec:
    raw = spec.mapping(value, "storms")
    spec.only(raw, "storms", {"meanInterval", "fraction", "lasts", "condition", "firstAt"})
    base = StormSpec()
    interval = (
        spec.duration(raw["meanInterval"], "storms.meanInterval")
        if "meanInterval" in raw
        else base.mean_interval
    )
    if interval <= timedelta(0):
        raise SpecError("storms.meanInterval", "must be longer than 0s")
    symptom = base.symptom
    if "condition" in raw:
        cond = spec.mapping(raw["condition"], "storms.condition")
        spec.only(cond, "storms.condition", {"type", "status", "reason"})
        symptom = Symptom(
            type=spec.text(
                spec.required(cond, "type", "storms.condition"), "storms.condition.type"
            ),
            status=spec.text(
                spec.required(cond, "status", "storms.condition"), "storms.condition.status"
            ),
            reason=spec.text(
                spec.required(cond, "reason", "storms.condition"), "storms.condition.reason"
            ),
        )
    return StormSpec(
        mean_interval=interval,
        fraction=spec.probability(raw.get("fraction", base.fraction), "storms.fraction"),
        lasts=spec.duration_range(raw["lasts"], "storms.lasts") if "lasts" in raw else base.lasts,
        symptom=symptom,
        first_at=spec.duration(raw["firstAt"], "storms.firstAt") if "firstAt" in raw else None,
    )
