"""The discrete-event fleet simulator: faults, repairs and jobs over weeks, in seconds.

It drives the operator's own engine (`engine.reconciler.reconcile`, hence the same planner)
against the in-memory cluster with a manual clock, so what it reports is what the operator
would do with the policy, not what a second model of it would do. The simulator adds only the
world the operator cannot see: which faults are real, which actions fix them, how long each
takes, and the gang-scheduled jobs that pay for every fault and every drain.

Every decision the engine takes is reached through events: a fault appears (focus: that node),
an action finishes (that node), a storm starts or ends (those nodes), or the planner's own
deadline comes (`next_wake`). Each reconcile plans the touched nodes plus every node with an
active Remediation or a visible symptom; the rest of the fleet only counts for budgets and the
breaker. Everything is deterministic for a seed: separate random streams for the fault process,
the storms, the action outcomes and the jobs keep the fault history identical across policies
(common random numbers), so a comparison shows the policy's effect and not luck.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from remediation_operator.domain.effects import (
    Cordon,
    Evict,
    Release,
    Replace,
    RunExecutor,
)
from remediation_operator.domain.policy import Action, Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.engine import reconciler
from remediation_operator.engine.reconciler import Reconciled
from remediation_operator.sim import agents, losses
from remediation_operator.sim import report as reports
from remediation_operator.sim.agents import AgentState
from remediation_operator.sim.events import Agenda, Kind
from remediation_operator.sim.faultmix import FIXING_ACTIONS, Cause, FaultMix, Symptom
from remediation_operator.sim.fleetspec import FleetSpec
from remediation_operator.sim.hosts import Host, HostFault, Publisher, node_name
from remediation_operator.sim.jobs import Jobs
from remediation_operator.sim.ledger import Ledger, Sample
from remediation_operator.sim.memory_cluster import MemoryCluster, MemoryRecorder, NodeDaemon
from remediation_operator.sim.timeline import Timeline

START = datetime(2026, 1, 5, tzinfo=UTC)
"""A Monday, 00:00 UTC: scheduled budgets see an ordinary week."""

HOST_AGE = timedelta(days=30)
"""Age of the fleet's machines at the start (well past any startup grace)."""

SAMPLE_EVERY = timedelta(minutes=10)

SAME_INSTANT_LIMIT = 5
"""Reconciles in a row at one instant before a planner wake-up is pushed 1 s later."""

HUMAN_CHECK = 0
"""ManualRepair token for "a human looks at a node left cordoned for them" (no fault id)."""

Observer = Callable[["Simulation", Reconciled], None]
"""Called after every reconcile (tests check invariants here)."""


@dataclass(frozen=True)
class Result:
    report: reports.Report
    samples: tuple[Sample, ...]


class Work(StrEnum):
    """Something the simulated world finishes later, after the engine started it."""

    GPUReset = "GPUReset"
    Reboot = "Reboot"
    Validate = "Validate"
    """The validation Job after an in-place repair (a policy's `validation`)."""
    Diagnose = "Diagnose"
    """The diagnostics Job before Reboot or Replace (a policy's `diagnostics`)."""
    MachineGone = "MachineGone"
    """Karpenter drained and terminated the machine handed back by Replace."""
    SuccessorJoins = "SuccessorJoins"
    """The replacement machine registered as a new Node."""


@dataclass(frozen=True)
class _Pending:
    slot: int
    incarnation: int
    work: Work


class Simulation:
    """One policy over one fleet for `days`, from one seed. Call `run()` once."""

    def __init__(
        self,
        policy: Policy,
        *,
        mix: FaultMix,
        fleet: FleetSpec,
        days: float,
        seed: int,
        timeline: Timeline | None = None,
        observer: Observer | None = None,
        sample_every: timedelta = SAMPLE_EVERY,
        start: datetime = START,
    ) -> None:
        if days <= 0:
            raise ValueError(f"days must be greater than 0, got {days!r}")
        self.policy = policy
        self.mix = mix
        self.fleet = fleet
        self.days = days
        self.seed = seed
        self.start = start
        self.end = days * 86400.0
        self.timeline = timeline
        self.observer = observer
        self.now = 0.0
        self.agenda = Agenda()
        self.cluster = MemoryCluster(start - HOST_AGE, keep_events=False)
        self.recorder = MemoryRecorder(keep=False)
        self.ports = self.cluster.ports(self.recorder)
        # Independent random streams: the fault history must not depend on the policy.
        self._rng_faults = random.Random(f"{seed}:faults")
        self._rng_storms = random.Random(f"{seed}:storms")
        self._rng_actions = random.Random(f"{seed}:actions")
        self._rng_jobs = random.Random(f"{seed}:jobs")
        self._rng_agents = random.Random(f"{seed}:agents")
        symptoms: list[Symptom] = [
            s.symptom for c in mix.causes for s in c.signals if s.symptom is not None
        ]
        if fleet.storms is not None:
            symptoms.append(fleet.storms.symptom)
        horizon = start + timedelta(days=days) + timedelta(days=365)
        self.publisher = Publisher(fleet, symptoms, [policy], start, horizon)
        self.hosts: list[Host] = []
        self.slot_of: dict[str, int] = {}
        self.ledger = Ledger(fleet.nodes)
        self.active: dict[str, RemediationState] = {}
        """Non-terminal Remediations by node name, as last written by the engine."""
        self._symptomatic: set[str] = set()
        self._pending: dict[int, _Pending] = {}
        self._action_ids = 0
        self._started: set[tuple[str, Action, int]] = set()
        self._fault_ids = 0
        self._storm_ids = 0
        self._storm_symptoms: dict[int, Symptom] = {}
        self._storm_hosts: dict[int, list[int]] = {}
        self._wake_at: float | None = None
        self._pods_due: datetime | None = None
        self._same_instant = 0
        self._last_reconcile_at = -1.0
        self._retention = self._retention_for(policy)
        self._finished: deque[tuple[float, str]] = deque()
        self._closed: set[str] = set()
        self._cause_weights = [c.count for c in mix.causes]
        self._rate = mix.total_rate_per_host_day * fleet.fault_rate_scale * fleet.nodes / 86400.0
        self.jobs = (
            Jobs(fleet.jobs, fleet.nodes, fleet.gpus_per_node, self.agenda, self._schedulable)
            if fleet.jobs is not None
            else None
        )
        self.samples: list[Sample] = []
        self._sample_every = sample_every.total_seconds()
        # Counters for the report.
        self.faults = 0
        self.faults_by_cause: Counter[str] = Counter({c.name: 0 for c in mix.causes})
        self.storms = 0
        self.opened = 0
        self.outcomes: Counter[str] = Counter()
        self.actions: Counter[Action] = Counter()
        self.replacements = 0
        self.manual_repairs = 0
        self.recover_seconds: list[float] = []
        self.remediation_interruptions = 0
        self.reconciles = 0
        self.breaker_openings = 0
        self._open_groups: frozenset[str] = frozenset()
        self._reasons: dict[str, Reason] = {}
        """The planner's latest reason per node it planned (why a node has no Remediation)."""
        self._known: set[str] = set()

    # Public ------------------------------------------------------------------------------------

    @property
    def moment(self) -> datetime:
        return self.start + timedelta(seconds=self.now)

    def host(self, node: str) -> Host | None:
        slot = self.slot_of.get(node)
        return None if slot is None else self.hosts[slot]

    async def run(self) -> Result:
        self._build_fleet()
        self._schedule_fault(0.0)
        storms = self.fleet.storms
        if storms is not None:
            first = (
                storms.first_at.total_seconds()
                if storms.first_at is not None
                else self._rng_storms.expovariate(1.0 / storms.mean_interval.total_seconds())
            )
            self.agenda.push(first, Kind.StormStarts)
        self.agenda.push(0.0, Kind.Sample)
        if self.jobs is not None:
            self._dispatch()
        await self._reconcile(())
        while True:
            at = self.agenda.peek_time()
            if at is None or at > self.end:
                break
            event = self.agenda.pop()
            self.ledger.advance(event.at)
            self.now = event.at
            await self._handle(event.kind, event.arg, event.token)
        self.now = self.end
        self.ledger.advance(self.end)
        return Result(self._report(), tuple(self.samples))

    # Setup -------------------------------------------------------------------------------------

    def _build_fleet(self) -> None:
        profile = self.fleet.agent
        if profile.daemon is not None:
            # The agent's and the device plugin's pods, which the operator may restart.
            for daemon, agent in ((profile.daemon, True), (agents.DEVICE_PLUGIN, False)):
                self.cluster.add_daemon(
                    NodeDaemon(
                        daemon.namespace,
                        daemon.name,
                        dict(daemon.labels),
                        ready_after=timedelta(seconds=agents.POD_START),
                        on_restart=self._pod_restarted(agent),
                    )
                )
        for slot in range(self.fleet.nodes):
            host = Host(
                slot=slot,
                name=node_name(slot, 0),
                zone=self.fleet.zone_of(slot),
                created_at=-HOST_AGE.total_seconds(),
            )
            self.hosts.append(host)
            self._join(host)
        self.cluster.advance(self.start)

    def _join(self, host: Host) -> None:
        self.slot_of[host.name] = host.slot
        self.cluster.add_node(
            host.name,
            labels=self.publisher.labels(host),
            created_at=self.publisher.created(host),
        )
        host.published = self.publisher.on_new_node()
        self.publisher.publish(host, None, self.cluster)
        self._refresh(host)

    @staticmethod
    def _retention_for(policy: Policy) -> float:
        """How long finished Remediations must stay for the planner's decisions to be unchanged.

        History counts finished incidents that started within its window, the rate limit counts
        step starts within its window; anything that finished before both windows is read by
        neither. Dropping older ones keeps each reconcile's cost flat over a 90-day run.
        """
        keep = timedelta(hours=1)
        if policy.history is not None:
            keep = max(keep, policy.history.window)
        if policy.rate is not None:
            keep = max(keep, policy.rate.per)
        return keep.total_seconds() + 3600.0

    # Events ------------------------------------------------------------------------------------

    async def _handle(self, kind: Kind, arg: int, token: int) -> None:
        if kind is Kind.FaultArrives:
            await self._fault_arrives()
        elif kind is Kind.FaultClears:
            await self._fault_ends(arg, token, manual=False)
        elif kind is Kind.ManualRepair:
            await self._fault_ends(arg, token, manual=True)
        elif kind is Kind.ActionDone:
            await self._action_done(token)
        elif kind is Kind.PolicyWake:
            if self._wake_at == self.now:
                self._wake_at = None
                await self._reconcile(())
        elif kind is Kind.StormStarts:
            await self._storm_starts()
        elif kind is Kind.StormEnds:
            await self._storm_ends(arg)
        elif kind is Kind.JobDone:
            assert self.jobs is not None
            self.jobs.done(arg, token, self.now)
            self._dispatch()
        elif kind is Kind.JobRestart:
            assert self.jobs is not None
            self.jobs.restart(arg, token, self.now)
            self._dispatch()
        elif kind is Kind.JobCrash:
            self._job_crash(arg, token)
        elif kind is Kind.Sample:
            self.samples.append(self.ledger.sample(self.now))
            self.agenda.push(self.now + self._sample_every, Kind.Sample)
        elif kind is Kind.AgentBeat:
            await self._agent_beat(arg, token)
        elif kind is Kind.AgentFinds:
            await self._agent_finds(arg, token)
        elif kind is Kind.PodsStart:
            self._pods_due = None
            await self._reconcile(())  # advancing the cluster starts them (`restart_pods`)

    def _schedule_fault(self, after: float) -> None:
        if self._rate > 0:
            self.agenda.push(after + self._rng_faults.expovariate(self._rate), Kind.FaultArrives)

    async def _fault_arrives(self) -> None:
        rng = self._rng_faults
        cause = rng.choices(self.mix.causes, weights=self._cause_weights)[0]
        slot = rng.randrange(self.fleet.nodes)
        symptom = cause.draw_symptom(rng)
        transient = cause.transient_share > 0 and rng.random() < cause.transient_share
        lasts = cause.transient_lasts.draw(rng).total_seconds()
        manual = self.mix.durations.manual_repair.draw(rng).total_seconds()
        luck = tuple((action, rng.random()) for action in FIXING_ACTIONS)
        self._schedule_fault(self.now)
        self.faults += 1
        self.faults_by_cause[cause.name] += 1
        host = self.hosts[slot]
        self._log("fault", host.name, f"{cause.name} ({symptom.reason if symptom else 'silent'})")
        self._interrupt(slot, by_remediation=False)
        # A second finding on a host that has a fault: the world keeps the first (a
        # simplification), but a real agent reports it too, and its reason wins.
        second = cause.persistent and host.present and host.fault is not None
        if (
            second
            and not host.rebooting
            and agents.report(self.fleet.agent, host.agent, symptom)
            and self._publish(host)
        ):
            self._refresh(host)
            self._dispatch()
            await self._reconcile((host.name,))
            return
        if not cause.persistent or not host.present or host.fault is not None or host.rebooting:
            self._dispatch()
            return
        await self._apply_fault(host, cause, symptom, transient, lasts, manual, luck)

    async def _apply_fault(
        self,
        host: Host,
        cause: Cause,
        symptom: Symptom | None,
        transient: bool,
        lasts: float,
        manual: float,
        luck: tuple[tuple[Action, float], ...] = (),
    ) -> None:
        self._fault_ids += 1
        fault = HostFault(
            id=self._fault_ids,
            cause=cause,
            symptom=symptom,
            started_at=self.now,
            clears_at=self.now + lasts if transient else None,
            luck=luck,
        )
        host.fault = fault
        host.tried.clear()
        agents.report(self.fleet.agent, host.agent, symptom)
        if host.fault_since is None:
            host.fault_since = self.now
        if fault.clears_at is not None:
            self.agenda.push(fault.clears_at, Kind.FaultClears, host.slot, fault.id)
        else:
            self.agenda.push(self.now + manual, Kind.ManualRepair, host.slot, fault.id)
        changed = self._publish(host)
        self._refresh(host)
        self._dispatch()
        if changed:
            await self._reconcile((host.name,))

    async def _fault_ends(self, slot: int, fault_id: int, manual: bool) -> None:
        """A transient fault clears, or a human repairs one (`fault_id` 0: a human looks at a
        node a Failed Remediation left cordoned for them, whatever its fault)."""
        host = self.hosts[slot]
        if fault_id == HUMAN_CHECK:
            if not host.present:
                return
        elif host.fault is None or host.fault.id != fault_id:
            return
        if host.fault is not None:
            host.fault = None
            if manual:
                self.manual_repairs += 1
                self._log("manual-repair", host.name, "a human repaired the host")
            else:
                self._log("fault-cleared", host.name, "the transient fault ended")
        if manual and host.present:
            # The human's repair (a part swapped, the machine power-cycled) restarts the
            # node's agent and device plugin; a transient fault that ended leaves what a real
            # agent reported on the Node.
            self._restart_agents(host, device_plugin=True)
        if manual and host.unschedulable and host.name not in self.active and host.present:
            # The human who repaired a node left cordoned for them returns it to service.
            self.cluster.advance(self.moment)
            await self.cluster.release(host.name, uncordon=True)
            self._log("uncordon", host.name, "by the human who repaired it")
            self._sync_schedulability(host)
        changed = self._publish(host)
        self._refresh(host)
        self._dispatch()
        if changed:
            await self._reconcile((host.name,))

    async def _storm_starts(self) -> None:
        storms = self.fleet.storms
        assert storms is not None
        rng = self._rng_storms
        self._storm_ids += 1
        storm = self._storm_ids
        zone = rng.choice(self.fleet.zones)
        members = [h.slot for h in self.hosts if h.zone == zone and h.present and h.storm == 0]
        count = min(len(members), math.ceil(storms.fraction * len(members)))
        struck = sorted(rng.sample(members, count))
        lasts = storms.lasts.draw(rng).total_seconds()
        self.agenda.push(
            self.now + rng.expovariate(1.0 / storms.mean_interval.total_seconds()),
            Kind.StormStarts,
        )
        self.storms += 1
        self._storm_symptoms[storm] = storms.symptom
        self._storm_hosts[storm] = struck
        self._log("storm-start", "", f"{count} nodes of {zone} show {storms.symptom.reason}")
        touched = []
        for slot in struck:
            host = self.hosts[slot]
            host.storm = storm
            if self._publish(host):
                touched.append(host.name)
            self._refresh(host)
        self.agenda.push(self.now + lasts, Kind.StormEnds, storm)
        await self._reconcile(touched)

    async def _storm_ends(self, storm: int) -> None:
        touched = []
        for slot in self._storm_hosts.pop(storm, []):
            host = self.hosts[slot]
            if host.storm != storm:
                continue
            host.storm = 0
            if host.present and self._publish(host):
                touched.append(host.name)
            self._refresh(host)
        self._log("storm-end", "", f"storm {storm} is over")
        await self._reconcile(touched)

    def _job_crash(self, job_id: int, attempt: int) -> None:
        jobs = self.jobs
        assert jobs is not None
        job = jobs.jobs[job_id]
        if not jobs.running(job_id, attempt):
            return
        for slot in job.nodes:
            host = self.hosts[slot]
            if host.fault is not None:
                self._log("job-crash", host.name, f"job {job_id} on a faulty node")
                host.fault.job_crashes += 1
                self._interrupt(slot, by_remediation=False)
                if self._excluded_by_jobs(host):
                    self._log("job-excluded", host.name, "the job's launcher leaves it out")
                    self._refresh(host)
                break
        self._dispatch()

    def _excluded_by_jobs(self, host: Host) -> bool:
        """The jobs' own launcher leaves this host out (`jobs.excludeAfterCrashes`) until its
        fault is repaired; the operator does not see it."""
        limit = self.fleet.jobs.exclude_after_crashes if self.fleet.jobs is not None else None
        return limit is not None and host.fault is not None and host.fault.job_crashes >= limit

    # Actions the engine started, finished by the simulated world --------------------------------

    def _later(self, host: Host, work: Work, duration: float) -> None:
        self._action_ids += 1
        self._pending[self._action_ids] = _Pending(host.slot, host.incarnation, work)
        self.agenda.push(self.now + duration, Kind.ActionDone, host.slot, self._action_ids)

    async def _action_done(self, action_id: int) -> None:
        pending = self._pending.pop(action_id, None)
        if pending is None:
            return
        host = self.hosts[pending.slot]
        if host.incarnation != pending.incarnation:
            return
        if pending.work is Work.MachineGone:
            await self._machine_gone(host)
            return
        if pending.work is Work.SuccessorJoins:
            self._successor_joins(host)
            return
        if pending.work is Work.Validate:
            await self._validation_done(host)
            return
        if pending.work is Work.Diagnose:
            self.cluster.advance(self.moment)
            self.cluster.finish_execution(host.name, Action.Diagnose, succeed=True)
            self._log("diagnostics-done", host.name, "collected")
            self._refresh(host)
            self._dispatch()
            await self._reconcile((host.name,))
            return
        action = Action.Reboot if pending.work is Work.Reboot else Action.GPUReset
        await self._executor_done(host, action)

    async def _validation_done(self, host: Host) -> None:
        """The validation Job ends: it fails, with the mix's catch rate, on a host whose fault
        the repair did not fix (shown or not: DCGM diagnostics test the hardware, not the
        agent's report), and passes on a healthy one (no false alarms: an assumption)."""
        self.cluster.advance(self.moment)
        caught = host.fault is not None and (
            self._rng_actions.random() < self.mix.validation.catches
        )
        self.cluster.finish_execution(host.name, Action.Validate, succeed=not caught)
        self._log("validation-done", host.name, "failed" if caught else "passed")
        self._refresh(host)
        self._dispatch()
        await self._reconcile((host.name,))

    async def _executor_done(self, host: Host, action: Action) -> None:
        """A GPU reset or reboot the engine started has finished on `host`."""
        self.cluster.advance(self.moment)
        self.cluster.finish_execution(host.name, action, succeed=True)
        if action is Action.Reboot:
            # The cluster rebooted the Node (new bootID, Ready=True); publish what is true now.
            host.rebooting = False
            host.boot += 1
            host.published.pop("Ready", None)
        fixed = self._judge(host, action)
        self._log("action-done", host.name, f"{action} {'fixed the fault' if fixed else 'done'}")
        if action is Action.Reboot:
            # Every pod restarted with the node, the agent's and the device plugin's too: the
            # agent writes healthy at start and finds a fault the reboot did not fix at its
            # next check (`agentRedetect`).
            self._restart_agents(host, device_plugin=True)
            if self.fleet.agent.sticky:
                self.publisher.beat(host, self.cluster)  # the agents start and write
        elif self.fleet.agent.sticky:
            # Nothing on the Node changed: the operator waits for the agent's next re-send.
            self._schedule_beat(host)
        self._publish(host)
        self._refresh(host)
        self._dispatch()
        await self._reconcile((host.name,))

    def _judge(self, host: Host, action: Action) -> bool:
        """Whether the completed `action` fixed the host's fault (and clear it if so).

        The first attempt of each action on a fault is judged by the draw made with the fault
        (`HostFault.luck`), so policies and the oracle face the same luck; a repeated attempt
        draws again from the action stream."""
        fault = host.fault
        if fault is None:
            return False
        draw = fault.draw_for(action) if action not in host.tried else None
        host.tried.add(action)
        if draw is None:
            draw = self._rng_actions.random()
        fixed = draw < fault.cause.fixed_by.get(action, 0.0)
        if fixed:
            host.fault = None
        return fixed

    async def _machine_gone(self, host: Host) -> None:
        """Karpenter drained and terminated the machine: the Node is deleted."""
        name = host.name
        self.cluster.advance(self.moment)
        self.cluster.delete_node(name)
        host.present = False
        host.fault = None
        host.storm = 0
        host.rebooting = False
        self._symptomatic.discard(name)
        self._log("node-deleted", name, "the machine was terminated")
        self._refresh(host)
        await self._reconcile((name,))

    def _successor_joins(self, host: Host) -> None:
        del self.slot_of[host.name]
        host.incarnation += 1
        host.name = node_name(host.slot, host.incarnation)
        host.created_at = self.now
        host.boot = 0
        host.present = True
        host.replacing = False
        host.agent = AgentState()
        host.agent_since = self.now
        host.published_gpus = None
        host.unschedulable = False
        host.quarantined = False
        self._log("node-joined", host.name, "a replacement machine registered")
        self.cluster.advance(self.moment)
        self._join(host)
        self._dispatch()

    # The engine --------------------------------------------------------------------------------

    async def _reconcile(self, touched: Iterable[str]) -> None:
        focus = set(touched)
        focus.update(self.active)
        focus.update(self._symptomatic)
        moment = self.moment
        self.cluster.advance(moment)
        result = await reconciler.reconcile(
            self.policy, self.cluster.views(), self.ports, moment, frozenset(focus)
        )
        self.reconciles += 1
        if self.now == self._last_reconcile_at:
            self._same_instant += 1
        else:
            self._same_instant = 0
            self._last_reconcile_at = self.now
        self._absorb(result, focus)
        due = self.cluster.next_due()
        if due is not None and due != self._pods_due:
            # Pods the engine deleted (`validation.restartPods`) start at this instant.
            self._pods_due = due
            self.agenda.push(max((due - self.start).total_seconds(), self.now), Kind.PodsStart)
        if self.observer is not None:
            self.observer(self, result)
        self._dispatch()

    def _absorb(self, result: Reconciled, focus: Iterable[str] = ()) -> None:
        # Sorted: the engine's order may follow set iteration, which differs between processes.
        for state in sorted(result.written, key=lambda s: (s.node, s.name)):
            if state.name not in self._known:
                self._known.add(state.name)
                self.opened += 1
            previous = self.active.get(state.node)
            if previous is None or previous.phase != state.phase or previous.reason != state.reason:
                self._log(
                    "remediation", state.node, f"{state.phase} {state.reason}: {state.message}"
                )
            if state.terminal:
                if previous is not None and previous.name == state.name:
                    del self.active[state.node]
                if state.name not in self._closed:
                    self._closed.add(state.name)
                    self.outcomes[state.phase.value] += 1
                    self._finished.append((self.now, state.name))
                    if state.phase is Phase.Failed:
                        self._call_a_human(state.node)
            else:
                self.active[state.node] = state
        touched = {state.node for state in result.written}
        # The planner planned every focused node; one it gave no reason for has none now (a
        # breaker that held it has closed, its fault no longer matches).
        for node in set(focus) | result.reasons.keys():
            reason = result.reasons.get(node)
            if self._reasons.get(node) != reason:
                if reason is None:
                    del self._reasons[node]
                else:
                    self._reasons[node] = reason
                touched.add(node)
        for node in sorted(touched):
            host = self.host(node)
            if host is not None:
                self._account(host)
        for transition in result.transitions:
            if transition.outcome is None:
                self.actions[transition.action] += 1
        for applied in sorted(result.applied, key=lambda a: a.node):
            if applied.result == "ok":
                self._carry_out(applied.effect)
        self.ledger.blocked = {str(reason): count for reason, count in result.blocked.items()}
        if result.summary is not None:
            self.ledger.set_in_flight(result.summary.in_flight)
            self._breakers(frozenset(result.summary.circuit_open))
        self._forget_old()
        wake = result.next_wake
        if wake is not None:
            at = max((wake - self.start).total_seconds(), self.now)
            if at == self.now and self._same_instant >= SAME_INSTANT_LIMIT:
                at = self.now + 1.0
            if self._wake_at is None or at != self._wake_at:
                self._wake_at = at
                self.agenda.push(at, Kind.PolicyWake)

    def _carry_out(self, effect: object) -> None:
        """What the world does when the engine applied an effect to the memory cluster."""
        if isinstance(effect, Cordon | Release):
            host = self.host(effect.node)
            if host is not None:
                self._log(type(effect).__name__.lower(), host.name, "")
                self._sync_schedulability(host)
        elif isinstance(effect, Evict):
            host = self.host(effect.node)
            if host is not None:
                self._log("drain", host.name, "forced" if effect.force else "")
                self._interrupt(host.slot, by_remediation=True)
        elif isinstance(effect, RunExecutor):
            key = (effect.remediation, effect.action, effect.attempt)
            host = self.host(effect.node)
            if host is None or key in self._started:
                return
            self._started.add(key)
            durations = self.mix.durations
            self._log(effect.action.value.lower(), host.name, f"attempt {effect.attempt}")
            if effect.action is Action.Reboot:
                host.rebooting = True
                self._interrupt(host.slot, by_remediation=True)
                self._publish(host)
                self._refresh(host)
                self._later(
                    host, Work.Reboot, durations.reboot.draw(self._rng_actions).total_seconds()
                )
            elif effect.action is Action.Diagnose:
                took = self.mix.diagnostics.draw(self._rng_actions).total_seconds()
                self._later(host, Work.Diagnose, took)
            elif effect.action is Action.Validate:
                took = self.mix.validation.duration.draw(self._rng_actions).total_seconds()
                self._later(host, Work.Validate, took)
            else:
                self._later(
                    host, Work.GPUReset, durations.gpu_reset.draw(self._rng_actions).total_seconds()
                )
        elif isinstance(effect, Replace):
            host = self.host(effect.node)
            if host is None or host.replacing:
                return
            host.replacing = True
            self.replacements += 1
            self._log("replace", host.name, str(effect.provider))
            self._interrupt(host.slot, by_remediation=True)
            durations = self.mix.durations
            gone = durations.drain.draw(self._rng_actions).total_seconds()
            back = max(gone, durations.replace.draw(self._rng_actions).total_seconds())
            self._later(host, Work.MachineGone, gone)
            self._later(host, Work.SuccessorJoins, back)

    # The node agents (sim/agents.py) ----------------------------------------------------------

    def _restart_agents(
        self, host: Host, *, agent: bool = True, device_plugin: bool, redetect: bool = True
    ) -> None:
        """The host's agent (and device plugin) restarted: it writes healthy at start and
        forgets what it reported (NPD replays its lookback); with `redetect`, a fault still
        present is found again after the fleet's `agentRedetect` (its next check)."""
        profile = self.fleet.agent
        if not profile.sticky:
            return
        fault = host.fault
        if agent:
            age = self.now - fault.started_at if fault is not None else None
            agents.restart_agent(
                profile, host.agent, fault.symptom if fault is not None else None, age
            )
            host.agent_since = self.now
        if device_plugin:
            agents.restart_device_plugin(host.agent)
        if redetect and fault is not None and fault.symptom is not None:
            took = self.fleet.agent_redetect.draw(self._rng_agents).total_seconds()
            self.agenda.push(self.now + took, Kind.AgentFinds, host.slot, fault.id)

    async def _agent_finds(self, slot: int, fault_id: int) -> None:
        host = self.hosts[slot]
        fault = host.fault
        if fault is None or fault.id != fault_id or not host.present or host.rebooting:
            return
        changed = agents.report(self.fleet.agent, host.agent, fault.symptom)
        self._log("agent-finds", host.name, "the fault is reported again")
        if changed and self._publish(host):
            self._refresh(host)
            await self._reconcile((host.name,))

    def _schedule_beat(self, host: Host) -> None:
        """Nothing the agents show changed: the operator sees the conditions again at their
        next heartbeat (each host beats on its own phase of `agents.HEARTBEAT`), and until
        then as last seen at the previous one."""
        period = agents.HEARTBEAT
        phase = (host.slot * 7919) % int(period)
        last = phase + period * math.floor((self.now - phase) / period)
        self.cluster.hold_heartbeat(
            host.name, self.publisher.beating, self.start + timedelta(seconds=last)
        )
        self.agenda.push(last + period, Kind.AgentBeat, host.slot, host.incarnation)

    async def _agent_beat(self, slot: int, incarnation: int) -> None:
        host = self.hosts[slot]
        if host.incarnation != incarnation or not host.present:
            return
        if host.rebooting:  # no agent runs: it beats again when the node is back
            return
        self.cluster.advance(self.moment)
        self.publisher.beat(host, self.cluster)
        await self._reconcile((host.name,))

    def _pod_restarted(self, agent: bool) -> Callable[[str, datetime], None]:
        def restarted(node: str, _at: datetime) -> None:
            self.restart_pods(node, agent=agent, device_plugin=not agent)

        return restarted

    def restart_pods(self, node: str, *, agent: bool, device_plugin: bool) -> None:
        """The agent's or the device plugin's pod the operator deleted on `node` (the policy's
        verification after a repair, D71) started again: a new process, which writes at start
        (the EKS agent: healthy; the plugin: every GPU healthy) and finds a fault still
        present at its next check."""
        host = self.host(node)
        if host is None or not host.present:
            return
        self._restart_agents(host, agent=agent, device_plugin=device_plugin)
        self._log("pod-restarted", host.name, "agent" if agent else "device plugin")
        self._publish(host)
        self._refresh(host)

    def _breakers(self, groups: frozenset[str]) -> None:
        """Count breaker openings and integrate the time breakers stay open."""
        for group in sorted(groups - self._open_groups):
            self.breaker_openings += 1
            self._log("breaker-open", "", f"circuit breaker open for group {group or '(all)'}")
        for group in sorted(self._open_groups - groups):
            self._log("breaker-closed", "", f"circuit breaker closed for group {group or '(all)'}")
        self._open_groups = groups
        self.ledger.breakers_open = len(groups)

    def _call_a_human(self, node: str) -> None:
        """A Failed Remediation leaves its node cordoned for a human, who comes within the
        fault mix's manualRepair time, repairs whatever is wrong and uncordons it."""
        host = self.host(node)
        if host is None:
            return
        delay = self.mix.durations.manual_repair.draw(self._rng_actions).total_seconds()
        self.agenda.push(self.now + delay, Kind.ManualRepair, host.slot, HUMAN_CHECK)

    def _forget_old(self) -> None:
        """Delete finished Remediations no decision can read any more (see `_retention_for`)."""
        horizon = self.now - self._retention
        while self._finished and self._finished[0][0] < horizon:
            _, name = self._finished.popleft()
            self.cluster.delete_remediation(name)

    # Bookkeeping -------------------------------------------------------------------------------

    def _publish(self, host: Host) -> bool:
        if not host.present:
            return False
        symptom = self._storm_symptoms.get(host.storm) if host.storm else None
        self.cluster.advance(self.moment)  # a write is seen when it happens
        changed = self.publisher.publish(host, symptom, self.cluster)
        if host.symptomatic:
            self._symptomatic.add(host.name)
        else:
            self._symptomatic.discard(host.name)
        return changed

    def _sync_schedulability(self, host: Host) -> None:
        view = self.cluster.views().get(host.name)
        if view is not None:
            host.unschedulable = view.unschedulable
            host.quarantined = view.quarantined
        self._refresh(host)

    def _schedulable(self, slot: int) -> bool:
        """For the jobs: schedulable, and not left out by the jobs' own launcher."""
        host = self.hosts[slot]
        return host.schedulable and not self._excluded_by_jobs(host)

    def _refresh(self, host: Host) -> None:
        """Update the ledger's counts and the job scheduler after a change to `host`."""
        ledger = self.ledger
        available = host.available
        faulty = host.schedulable and host.fault is not None
        if available != host.counted_available:
            ledger.available += 1 if available else -1
            host.counted_available = available
        if faulty != host.counted_faulty:
            ledger.schedulable_faulty += 1 if faulty else -1
            host.counted_faulty = faulty
        if self.jobs is not None:
            self.jobs.set_usable(host.slot, self._schedulable(host.slot))
        if available and host.fault_since is not None:
            self.recover_seconds.append(self.now - host.fault_since)
            host.fault_since = None
        self._account(host)

    def _account(self, host: Host) -> None:
        """Charge the slot's lost time to (fault class, stage) from now on (sim/losses.py)."""
        key: tuple[str, str] | None = None
        if host.available:
            host.loss_cause = None
        else:
            if host.loss_cause is None:
                if host.fault is not None:
                    host.loss_cause = host.fault.cause.name
                else:
                    host.loss_cause = losses.STORM if host.storm else losses.NO_FAULT
            key = (host.loss_cause, self._stage_of(host))
        if key != host.loss_key:
            self.ledger.move_lost(host.loss_key, key)
            host.loss_key = key

    def _stage_of(self, host: Host) -> losses.Stage:
        return losses.classify(
            present=host.present,
            replacing=host.replacing,
            rebooting=host.rebooting,
            unschedulable=host.unschedulable,
            faulty=host.fault is not None,
            signalled=host.symptomatic,
            remediation=self.active.get(host.name),
            planner_reason=self._reasons.get(host.name),
        )

    def _interrupt(self, slot: int, *, by_remediation: bool) -> None:
        if self.jobs is None:
            return
        job = self.jobs.interrupt_on(slot, self.now)
        if job is not None:
            if by_remediation:
                self.remediation_interruptions += 1
            self._log(
                "job-interrupted",
                self.hosts[slot].name,
                f"job {job.id} ({'remediation' if by_remediation else 'fault'})",
            )

    def _dispatch(self) -> None:
        jobs = self.jobs
        if jobs is None:
            return
        for job in jobs.dispatch(self.now):
            for slot in job.nodes:
                if self.hosts[slot].fault is not None:
                    delay = self.mix.durations.job_crash_on_faulty_node.draw(self._rng_jobs)
                    self.agenda.push(
                        self.now + delay.total_seconds(), Kind.JobCrash, job.id, job.attempt
                    )
                    break

    def _log(self, event: str, node: str, detail: str) -> None:
        if self.timeline is not None:
            self.timeline.record(
                self.now,
                self.policy.name,
                event,
                node,
                detail,
                self.ledger.available,
                self.ledger.in_flight,
            )

    # Report ------------------------------------------------------------------------------------

    def _report(self) -> reports.Report:
        fleet = self.fleet
        node_seconds = fleet.nodes * self.end
        outcomes: dict[str, int] = dict(sorted(self.outcomes.items()))
        if self.active:
            outcomes["(still active)"] = len(self.active)
        job_stats = self.jobs.stats(self.end) if self.jobs is not None else None
        recover_minutes = [s / 60.0 for s in self.recover_seconds]
        p50 = reports.percentile(recover_minutes, 50)
        p95 = reports.percentile(recover_minutes, 95)
        return reports.Report(
            policy=self.policy.name,
            seed=self.seed,
            days=self.days,
            nodes=fleet.nodes,
            gpus_per_node=fleet.gpus_per_node,
            availability=round(self.ledger.available_seconds / node_seconds, 6),
            schedulable_faulty=round(self.ledger.schedulable_faulty_seconds / node_seconds, 6),
            gpu_hours_unavailable=round(
                (node_seconds - self.ledger.available_seconds) * fleet.gpus_per_node / 3600.0, 1
            ),
            faults=self.faults,
            storms=self.storms,
            job_attempts=job_stats.attempts if job_stats else 0,
            jobs_completed=job_stats.completed if job_stats else 0,
            job_interruptions=job_stats.interrupted if job_stats else 0,
            interruptions_by_remediation=self.remediation_interruptions,
            job_success_rate=round(job_stats.success_rate, 6) if job_stats else 1.0,
            job_gpu_hours_lost=round(job_stats.lost_gpu_hours, 1) if job_stats else 0.0,
            job_wait_hours=round(job_stats.waiting_job_hours, 1) if job_stats else 0.0,
            remediations=self.opened,
            outcomes=outcomes,
            actions=reports.actions_from(self.actions),
            replacements=self.replacements,
            manual_repairs=self.manual_repairs,
            recover_p50_minutes=None if p50 is None else round(p50, 1),
            recover_p95_minutes=None if p95 is None else round(p95, 1),
            blocked_hours={
                reason: round(seconds / 3600.0, 2)
                for reason, seconds in sorted(self.ledger.blocked_seconds.items())
            },
            peak_in_flight=self.ledger.peak_in_flight,
            lost_node_hours=round((node_seconds - self.ledger.available_seconds) / 3600.0, 1),
            lost_by_stage=reports.hours_by(self.ledger.lost_seconds, index=1),
            lost_by_class=reports.hours_by(self.ledger.lost_seconds, index=0),
            breaker_openings=self.breaker_openings,
            breaker_open_hours=round(self.ledger.breaker_open_seconds / 3600.0, 2),
            effective_training=round(job_stats.effective_training, 6) if job_stats else 1.0,
            faults_by_cause=dict(self.faults_by_cause),
            mode=self.policy.mode.value,
        )
