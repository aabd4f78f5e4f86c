"""Engine tests: the real engine and the real in-memory cluster, with a manual clock.

Real: `engine.reconciler`, `engine.nodes`, `engine.explain`, `sim.memory_cluster` and (in the
ladder tests) `domain.planner`. Faked: time (a `Clock` the test moves by hand; nothing
sleeps) and, in the mechanics tests only, the planner (a scripted function returning the plan
under test, so the engine's ordering and failure handling can be checked in isolation).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from remediation_operator.domain.effects import Effect
from remediation_operator.domain.fleet import Snapshot
from remediation_operator.domain.planner import Plan, PolicySummary
from remediation_operator.domain.policy import Action, ConditionMatch, Fault, Policy, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState, StepRecord
from remediation_operator.engine import reconciler
from remediation_operator.engine.ports import Ports
from remediation_operator.sim.memory_cluster import MemoryCluster, MemoryRecorder

T0 = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)


@dataclass
class Clock:
    """Manual time shared by the test and the in-memory cluster."""

    cluster: MemoryCluster
    now: datetime = T0

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        self.cluster.advance(self.now)
        return self.now

    def to(self, moment: datetime) -> datetime:
        self.now = max(self.now, moment)
        self.cluster.advance(self.now)
        return self.now


@dataclass
class Harness:
    """A cluster, its ports, a clock, and one-line reconciles."""

    cluster: MemoryCluster
    clock: Clock
    recorder: MemoryRecorder = field(default_factory=MemoryRecorder)
    ports: Ports | None = None
    """Ports to reconcile through instead of the cluster's own (e.g. wrapped to fail)."""

    async def reconcile(
        self,
        policy: Policy,
        focus: Collection[str] | None = None,
        plan: Callable[[Snapshot, Policy, datetime], Plan] | None = None,
    ) -> reconciler.Reconciled:
        return await reconciler.reconcile(
            policy,
            self.cluster.views(),
            self.ports or self.cluster.ports(self.recorder),
            self.clock.now,
            focus,
            plan=plan,
        )


@pytest.fixture
def harness() -> Harness:
    # Agents heart-beat every 5 minutes (EKS): a disruptive step needs evidence seen after the
    # previous one, which the next beat brings.
    cluster = MemoryCluster(T0 - timedelta(days=1), heartbeat=timedelta(minutes=5))
    clock = Clock(cluster, T0 - timedelta(days=1))
    for i in range(4):
        cluster.add_node(f"gpu-{i}", labels={"pool": "a"})
    clock.to(T0)
    return Harness(cluster, clock)


XID = Fault(
    name="gpu-xid-reset",
    match=(ConditionMatch("AcceleratedHardwareReady", "False", r"NvidiaXID(46|62|64|95)Error"),),
    ladder=(Step(Action.Cordon), Step(Action.Drain)),
)


def simple_policy(**changes: object) -> Policy:
    fields: dict[str, object] = {"name": "gpu", "faults": (XID,)}
    fields.update(changes)
    return Policy(**fields)  # type: ignore[arg-type]


def state(
    node: str,
    *,
    step: Action | None = None,
    phase: Phase = Phase.Pending,
    reason: Reason = Reason.FaultDetected,
    attempt: int = 1,
    started: datetime = T0,
    **changes: object,
) -> RemediationState:
    """A Remediation state as a planner would produce it (steps[] consistent with `step`)."""
    steps: tuple[StepRecord, ...] = ()
    if step is not None:
        steps = (StepRecord(step, attempt, started, Reason.StepStarted, f"{step} started."),)
    fields: dict[str, object] = {
        "name": f"{node}-20261130t1100",
        "node": node,
        "policy": "gpu",
        "fault": XID.name,
        "phase": phase,
        "reason": reason,
        "message": "Scripted.",
        "started_at": started,
        "step": step,
        "step_index": None if step is None else 0,
        "attempt": attempt if step is not None else 0,
        "step_started_at": started if step is not None else None,
        "steps": steps,
    }
    fields.update(changes)
    return RemediationState(**fields)  # type: ignore[arg-type]


def empty_summary() -> PolicySummary:
    return PolicySummary(observed=0, unhealthy=0, in_flight=0)


@dataclass
class ScriptedPlanner:
    """Returns the given plans in order (then empty plans) and keeps every snapshot it saw."""

    plans: list[Plan] = field(default_factory=list)
    seen: list[Snapshot] = field(default_factory=list)

    def __call__(self, snapshot: Snapshot, policy: Policy, now: datetime) -> Plan:
        self.seen.append(snapshot)
        if self.plans:
            return self.plans.pop(0)
        return Plan(
            effects=(), remediations=(), breakers={}, summary=empty_summary(), next_wake=None
        )


def plan_of(*items: RemediationState | Effect, next_wake: datetime | None = None) -> Plan:
    """A plan from states and effects, in the order given."""
    return Plan(
        effects=tuple(i for i in items if not isinstance(i, RemediationState)),
        remediations=tuple(i for i in items if isinstance(i, RemediationState)),
        breakers={},
        summary=empty_summary(),
        next_wake=next_wake,
    )


@dataclass
class Driver:
    """Drives reconciles the way the runtime does: on node changes (focused) and at wakes."""

    harness: Harness
    policy: Policy
    wake: datetime | None = None
    results: list[reconciler.Reconciled] = field(default_factory=list)

    async def settle(self, focus: Collection[str] | None = None) -> None:
        """Reconcile, then again for every node our own effects changed, until quiet."""
        cluster = self.harness.cluster
        cluster.take_changed()
        for _ in range(20):
            result = await self.harness.reconcile(self.policy, focus)
            self.results.append(result)
            if result.next_wake is not None:
                self.wake = result.next_wake
            changed = cluster.take_changed()
            if not changed:
                return
            focus = changed
        raise AssertionError("reconciles did not settle: every one changed a node again")

    async def run_until(
        self, done: Callable[[], bool], within: timedelta = timedelta(hours=6)
    ) -> None:
        """Jump from wake to wake (and to executor/replacement completions) until `done()`."""
        clock, cluster = self.harness.clock, self.harness.cluster
        deadline = clock.now + within
        await self.settle()
        while not done():
            times = [t for t in (self.wake, cluster.next_due()) if t is not None]
            if not times or min(times) > deadline:
                raise AssertionError(f"nothing left to wait for at {clock.now}; still not done")
            self.wake = None
            clock.to(max(min(times), clock.now))
            await self.settle()

    def remediation(self, node: str) -> RemediationState:
        """The newest Remediation of `node`."""
        states = [r.state for r in self.harness.cluster.remediations() if r.state.node == node]
        assert states, f"no Remediation for node {node}"
        return max(states, key=lambda s: s.started_at)
