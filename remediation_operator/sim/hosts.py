"""The hidden truth about each simulated host, and the Node the operator is allowed to see.

The simulator knows what the operator cannot: whether a GPU is really broken, whether a
condition is a false positive, whether a reset will help. `Host` holds that truth per slot of
the fleet (a slot keeps its place when its machine is replaced); `Publisher` writes what node
agents and the kubelet would publish onto the Node in the memory cluster, which is all the
operator reads. What the agents report is not the truth but `agents.AgentState`, their own
memory, which a real-agent profile keeps until the agent restarts (sim/agents.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from remediation_operator.domain.policy import Action, Policy
from remediation_operator.sim import agents
from remediation_operator.sim.agents import AgentProfile, AgentState
from remediation_operator.sim.faultmix import Cause, Symptom
from remediation_operator.sim.fleetspec import GPU_LABEL, POOL_LABEL, ZONE_LABEL, FleetSpec
from remediation_operator.sim.memory_cluster import MemoryCluster

READY = "Ready"
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass
class HostFault:
    """A fault present on a host: which cause, what the agent shows, and when it clears."""

    id: int
    cause: Cause
    symptom: Symptom | None
    started_at: float
    clears_at: float | None = None
    """A transient fault ends by itself then; None: only an action or a human fixes it."""
    luck: tuple[tuple[Action, float], ...] = ()
    """Per fixing action, the uniform draw its first attempt on this fault is judged by (fixed
    when below the cause's `fixedBy`). Drawn with the fault, so every policy of a comparison,
    and the oracle, meet the same luck; later attempts draw afresh."""

    job_crashes: int = 0
    """Job attempts this fault crashed (it was present when a job was placed on the host)."""

    def draw_for(self, action: Action) -> float | None:
        return next((u for a, u in self.luck if a is action), None)


@dataclass
class Host:
    """One slot of the fleet (mutable simulator state, owned by the simulator)."""

    slot: int
    name: str
    zone: str
    created_at: float
    incarnation: int = 0
    boot: int = 0
    fault: HostFault | None = None
    storm: int = 0
    """Id of the false-positive storm flipping this host's condition (0: none)."""
    rebooting: bool = False
    present: bool = True
    """False from the moment Replace hands the machine back until its successor joins."""
    unschedulable: bool = False
    quarantined: bool = False
    fault_since: float | None = None
    """Onset of the incident the host is in (kept until it is schedulable and healthy again)."""
    replacing: bool = False
    """Replace was carried out; the machine is being drained, terminated and replaced."""
    published: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Conditions last written to the Node (type -> status, reason, message)."""
    published_gpus: int | None = None
    """Allocatable `nvidia.com/gpu` last written (None: not written yet)."""
    agent: AgentState = field(default_factory=AgentState)
    """What this machine's agent and device plugin report (their memory, not the truth)."""
    agent_since: float = 0.0
    """When the agent last (re)started: a fault found before it is forgotten (real profiles)."""
    counted_available: bool = False
    counted_faulty: bool = False
    """What the availability ledger counted this host as (to update counts on change)."""
    tried: set[Action] = field(default_factory=set)
    """Fixing actions already completed on the current fault (their luck is spent)."""
    loss_cause: str | None = None
    """Fault class the slot's current unavailability is charged to (None: available)."""
    loss_key: tuple[str, str] | None = None
    """(fault class, stage) the ledger counts this slot under now (None: not lost)."""

    @property
    def ready(self) -> bool:
        return (
            self.present
            and not self.rebooting
            and not (self.fault is not None and self.fault.cause.not_ready)
        )

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable

    @property
    def available(self) -> bool:
        """Schedulable and without a fault: work placed here will run."""
        return self.schedulable and self.fault is None

    @property
    def symptomatic(self) -> bool:
        """An agent shows a condition (real or false positive) the policy may match, or the
        device plugin advertises fewer GPUs than the node has."""
        return self.present and (
            self.storm != 0
            or (self.fault is not None and self.fault.symptom is not None)
            or bool(self.agent.reported)
            or self.agent.marked_gpus > 0
        )

    @property
    def boot_id(self) -> str:
        return f"{self.name}-boot-{self.boot}"


def node_name(slot: int, incarnation: int) -> str:
    base = f"gpu-{slot:05d}"
    return base if incarnation == 0 else f"{base}-r{incarnation}"


class Publisher:
    """Publishes each host's conditions on its Node in the memory cluster, as agents would.

    A condition a policy watches with `staleAfter` is on every node from the start, in its
    healthy state, so a policy never sees a missing condition where a real agent would report
    "all good"; other condition types appear with the first finding that shows them and return
    to their healthy state when the agent no longer reports it: under a real-agent profile
    (`agents.AgentProfile`) only after the agent restarted, under `kind` when the fault clears.
    Agents never die: a condition a `staleAfter` rule watches (and the kubelet's `Ready`) keeps
    beating until after the end of the simulation (`beating_until`), so `staleAfter` never fires
    on a live agent. Under a real profile the other conditions are seen when written; their
    periodic re-send (`agents.HEARTBEAT`) is the simulator's `AgentBeat`, which it schedules
    where the operator waits for a fresh report (after a repair). The kind profile's beat on
    until the end, as before. Under a real profile the Node also carries `nvidia.com/gpu`
    capacity and the device plugin's allocatable (capacity less the GPUs it marked).
    Only changed conditions are written (each write makes the cluster rebuild that node's view).
    """

    def __init__(
        self,
        spec: FleetSpec,
        symptoms: Iterable[Symptom],
        policies: Iterable[Policy],
        start: datetime,
        horizon: datetime,
    ) -> None:
        self._spec = spec
        self._start = start
        self._beat = horizon
        self.profile = spec.agent
        healthy: dict[str, str] = {}
        for symptom in symptoms:
            if self.profile is AgentProfile.npd and symptom.type == agents.ACCELERATED:
                healthy.setdefault(agents.GPU_PROBLEM, agents.NPD_HEALTHY[0])
                continue
            healthy.setdefault(symptom.type, _opposite(symptom.status))
        watched: set[str] = set()
        for policy in policies:
            for fault in policy.faults:
                for match in fault.match:
                    healthy.setdefault(match.type, _opposite(match.status or "False"))
                    if match.stale_after is not None:
                        watched.add(match.type)
        healthy[READY] = "True"
        self._healthy = {
            t: (s, "KubeletReady" if t == READY else "Healthy", "") for t, s in healthy.items()
        }
        if agents.GPU_PROBLEM in self._healthy and self.profile is AgentProfile.npd:
            self._healthy[agents.GPU_PROBLEM] = (*agents.NPD_HEALTHY, "")
        self._always = {t: self._healthy[t] for t in sorted(watched)}
        """Types a `staleAfter` rule watches: published on every node from the start (a missing
        one would be a fault). Other types appear when a fault shows them first."""

    def on_new_node(self) -> dict[str, tuple[str, str, str]]:
        """What `MemoryCluster.add_node` already shows (Ready=True), unless a `staleAfter` rule
        watches Ready: then it is written again with the agents' fresh heartbeat."""
        return {} if READY in self._always else {READY: self._healthy[READY]}

    def labels(self, host: Host) -> dict[str, str]:
        return {
            GPU_LABEL: "true",
            ZONE_LABEL: host.zone,
            POOL_LABEL: self._spec.pool_of(host.slot),
            HOSTNAME_LABEL: host.name,
        }

    def created(self, host: Host) -> datetime:
        return self._start + timedelta(seconds=host.created_at)

    def shown(self, host: Host, storm_symptom: Symptom | None) -> dict[str, tuple[str, str, str]]:
        """The conditions (type -> status, reason, message) the host's agents publish now."""
        shown = dict(self._always)
        shown[READY] = self._healthy[READY] if host.ready else ("Unknown", "NodeStatusUnknown", "")
        if host.storm and storm_symptom is not None:
            # A broken checker's false positives (not sticky: see docs/simulator.md).
            shown[storm_symptom.type] = _kind(storm_symptom)
        if self.profile.sticky:
            for type_, finding in host.agent.reported.items():
                shown[type_] = (finding.status, finding.reason, finding.message)
            symptom = host.fault.symptom if host.fault is not None else None
            if symptom is not None and not agents.agent_condition(symptom):
                shown[symptom.type] = _kind(symptom)  # the control plane's verdict
        elif host.fault is not None and host.fault.symptom is not None:
            shown[host.fault.symptom.type] = _kind(host.fault.symptom)
        return shown

    @property
    def beating(self) -> frozenset[str]:
        """Agent conditions written with `beating_until` (a `staleAfter` rule watches them)."""
        return frozenset(t for t in self._always if t != READY)

    def beat(self, host: Host, cluster: MemoryCluster) -> None:
        """The host's agents re-send every condition unchanged: seen now, and those a
        `staleAfter` rule watches beat on again until the end (after `hold_heartbeat`)."""
        cluster.beat(host.name)
        for type_ in sorted(self.beating):
            status, reason, message = host.published.get(type_, self._healthy[type_])
            cluster.set_condition(
                host.name, type_, status, reason, message, beating_until=self._beat
            )

    def allocatable(self, host: Host) -> int:
        """`nvidia.com/gpu` the device plugin advertises: capacity less the GPUs it marked."""
        return max(0, self._spec.gpus_per_node - host.agent.marked_gpus)

    def publish(self, host: Host, storm_symptom: Symptom | None, cluster: MemoryCluster) -> bool:
        """Write the host's changed conditions to its Node; True when something changed."""
        shown = self.shown(host, storm_symptom)
        for type_ in host.published.keys() - shown.keys():
            shown[type_] = self._healthy.get(type_, ("True", "Healthy", ""))  # healthy again
        changed = False
        for type_, value in shown.items():
            if host.published.get(type_) != value:
                status, reason, message = value
                beats = not self.profile.sticky or type_ == READY or type_ in self._always
                cluster.set_condition(
                    host.name,
                    type_,
                    status,
                    reason,
                    message,
                    beating_until=self._beat if beats else None,
                )
                changed = True
        host.published = shown
        if self.profile.sticky:
            gpus = self.allocatable(host)
            if host.published_gpus != gpus:
                cluster.set_gpus(host.name, self._spec.gpus_per_node, gpus)
                host.published_gpus = gpus
                changed = True
        return changed


def _kind(symptom: Symptom) -> tuple[str, str, str]:
    """A condition as the kind agent (and the control plane) show it: the symptom as it is."""
    return (symptom.status, symptom.reason, f"Simulated {symptom.reason}.")


def _opposite(status: str) -> str:
    return "True" if status != "True" else "False"
