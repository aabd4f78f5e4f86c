"""Property tests: random fleets, faults, clocks, executors and administrators, and the
invariants users rely on, checked after every plan.

A hypothesis state machine drives `FakeCluster` (effects applied as the engine would). It
checks: a node never skips a step the policy requires; never more nodes in disruptive steps
than the budget allows; nothing starts while the breaker is open, the policy is paused or the
node is excluded; DryRun yields only announcements; a node we did not cordon is never
uncordoned; next_wake is never in the past.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from remediation_operator.domain.effects import Announce, Release
from remediation_operator.domain.fleet import EXCLUDE_LABEL, Progress, StepObservation
from remediation_operator.domain.policy import (
    DISRUPTIVE,
    LADDER_ORDER,
    Action,
    Budget,
    CircuitBreaker,
    ConditionMatch,
    Fault,
    History,
    Mode,
    OnExhausted,
    OnTimeout,
    Rate,
    Recovery,
    Step,
)
from remediation_operator.domain.remediation import RemediationState

from .fake_cluster import HEARTBEAT, MIN, FakeCluster, node, policy, xid_fault

NODES = ("a0", "a1", "a2", "a3", "b0", "b1")
BUDGET = 2
"""Nodes allowed in disruptive steps at once (when the drawn policy has a budget)."""

SILENT = Fault(
    name="agent-silent",
    match=(ConditionMatch(HEARTBEAT, stale_after=5 * MIN),),
    ladder=(Step(Action.Cordon), Step(Action.Drain)),
    on_exhausted=OnExhausted.Hold,
)


def _disrupting(states: dict[str, RemediationState]) -> set[str]:
    return {n for n, s in states.items() if any(r.action in DISRUPTIVE for r in s.steps)}


class Fleet(RuleBasedStateMachine):
    cluster: FakeCluster

    @initialize(
        dry_run=st.booleans(),
        budget=st.booleans(),
        rate=st.booleans(),
        breaker=st.booleans(),
        approval=st.booleans(),
        history=st.booleans(),
        tolerate=st.sampled_from([0, 60]),
        force=st.booleans(),
    )
    def setup(
        self,
        dry_run: bool,
        budget: bool,
        rate: bool,
        breaker: bool,
        approval: bool,
        history: bool,
        tolerate: int,
        force: bool,
    ) -> None:
        xid = replace(
            xid_fault(
                tolerate=timedelta(seconds=tolerate),
                on_timeout=OnTimeout.Force if force else OnTimeout.Escalate,
            ),
            ladder=(
                Step(Action.Cordon, escalate_after=MIN),
                Step(
                    Action.Drain,
                    timeout=10 * MIN,
                    on_timeout=OnTimeout.Force if force else OnTimeout.Escalate,
                ),
                Step(Action.GPUReset, timeout=5 * MIN, escalate_after=MIN, retries=1),
                Step(Action.Reboot, timeout=10 * MIN, escalate_after=MIN, retries=1),
                Step(Action.Replace, timeout=10 * MIN),
            ),
        )
        drawn = policy(
            faults=(xid, SILENT),
            mode=Mode.DryRun if dry_run else Mode.Enforce,
            budgets=(Budget(str(BUDGET)),) if budget else (),
            rate=Rate(3, timedelta(hours=1)) if rate else None,
            circuit_breaker=(
                CircuitBreaker("40%", min_nodes=3, cooldown=10 * MIN, group_by="zone")
                if breaker
                else None
            ),
            require_approval=frozenset({Action.Replace}) if approval else frozenset(),
            history=History(max_episodes=2) if history else None,
            recovery=Recovery(healthy_for=2 * MIN),
        )
        nodes = {n: node(n, labels={"zone": n[0]}) for n in NODES}
        self.cluster = FakeCluster(drawn, nodes)

    # ------------------------------------------------------------------ the world

    @rule(name=st.sampled_from(NODES), present=st.sampled_from([True, True, True, False]))
    def fault(self, name: str, present: bool) -> None:
        if name in self.cluster.nodes:
            self.cluster.set_fault(name, present)
        self.plan()

    @rule(names=st.lists(st.sampled_from(NODES), min_size=2, max_size=4, unique=True))
    def wave(self, names: list[str]) -> None:
        """Several nodes turn faulty at once (a bad driver, a noisy checker)."""
        for name in names:
            if name in self.cluster.nodes:
                self.cluster.set_fault(name, True)
        self.plan()

    @rule(name=st.sampled_from(NODES))
    def rejoin(self, name: str) -> None:
        """A replaced node's successor joins, healthy, under the same name."""
        if name not in self.cluster.nodes:
            self.cluster.nodes[name] = node(name, labels={"zone": name[0]}, now=self.cluster.now)
        self.plan()

    @rule(name=st.sampled_from(NODES))
    def silence(self, name: str) -> None:
        if name in self.cluster.nodes:
            self.cluster.silence(name)
        self.plan()

    @rule(seconds=st.sampled_from([5, 10, 30, 60, 120, 300, 600, 1800]))
    def advance(self, seconds: int) -> None:
        self.cluster.advance(timedelta(seconds=seconds))
        self.plan()

    @rule(name=st.sampled_from(NODES), result=st.sampled_from(["ok", "ok", "fail", "fail!"]))
    def executor(self, name: str, result: str) -> None:
        if name in self.cluster.nodes:
            self.cluster.finish_step(name, ok=result == "ok", permanent=result == "fail!")
        self.plan()

    @rule(seconds=st.sampled_from([60, 120, 300]))
    def all_executors_succeed(self, seconds: int) -> None:
        """A common, calm stretch: every running step completes, time passes."""
        for name in list(self.cluster.active):
            self.cluster.finish_step(name)
        self.plan()
        self.cluster.advance(timedelta(seconds=seconds))
        self.plan()

    @rule(name=st.sampled_from(NODES))
    def pdb(self, name: str) -> None:
        state = self.cluster.active.get(name)
        if state is not None and state.step is Action.Drain:
            self.cluster.observations[name] = StepObservation(
                Action.Drain, state.attempt, Progress.InProgress, blocked_by_pdb=True
            )
        self.plan()

    @rule(name=st.sampled_from(NODES), cordoned=st.sampled_from([True, True, False]))
    def admin(self, name: str, cordoned: bool) -> None:
        self.cluster.edit(name, unschedulable=cordoned)
        self.plan()

    @rule(name=st.sampled_from(NODES))
    def approve(self, name: str) -> None:
        self.cluster.approvals[name] = frozenset({Action.Replace})
        self.plan()

    @rule(paused=st.sampled_from([False, False, False, True]))
    def pause(self, paused: bool) -> None:
        self.cluster.policy = replace(self.cluster.policy, paused=paused)
        self.plan()

    @rule(name=st.sampled_from(NODES), excluded=st.sampled_from([False, False, False, True]))
    def exclude(self, name: str, excluded: bool) -> None:
        if name not in self.cluster.nodes:
            return
        labels = {k: v for k, v in self.cluster.nodes[name].labels.items() if k != EXCLUDE_LABEL}
        if excluded:
            labels[EXCLUDE_LABEL] = "true"
        self.cluster.edit(name, labels=labels)
        self.plan()

    # ------------------------------------------------------------------ the plan

    @rule()
    def plan(self) -> None:
        cluster = self.cluster
        before = dict(cluster.active)
        schedulable = {n for n, v in cluster.nodes.items() if not v.unschedulable}
        paused = cluster.policy.is_paused
        excluded = {n for n, v in cluster.nodes.items() if v.excluded}
        result = cluster.decide()
        cluster.record(result)
        now = cluster.now
        if not any(s.terminal for s in result.remediations) and not any(
            isinstance(e, Announce) and e.node == "" for e in result.effects
        ):
            # Planning again before anything happened changes nothing and repeats nothing.
            again = cluster.decide()
            assert again.remediations == (), again.remediations
            assert again.effects == (), again.effects
        for effect in result.effects:
            cluster.apply(effect)

        assert result.next_wake is None or result.next_wake >= now
        if cluster.policy.mode is Mode.DryRun:
            assert all(isinstance(e, Announce) for e in result.effects), result.effects
        for effect in result.effects:
            if isinstance(effect, Release) and effect.uncordon:
                assert before[effect.node].cordoned_by_us, "uncordoned a node we did not cordon"

        for state in result.remediations:
            assert state.message.endswith("."), state.message
            assert state.terminal or state.next_check_at is not None, state
            assert not state.terminal or state.finished_at == now, state
            old = before.get(state.node)
            old_steps = old.steps if old is not None and old.name == state.name else ()
            started = [r for r in state.steps[len(old_steps) :] if r.attempt == 1]
            new_incident = old is None or old.name != state.name
            if started or new_incident:
                assert not paused, "started something while paused"
                assert state.node not in excluded, "started something on an excluded node"
                group = (
                    cluster.nodes[state.node].labels["zone"]
                    if state.node in cluster.nodes
                    else None
                )
                config = cluster.policy.circuit_breaker
                if config is not None and group is not None and group == "a":
                    assert not result.breakers[group].open, "started while the breaker is open"
            for record in started:
                if record.action is Action.Cordon and not state.dry_run:
                    assert state.cordoned_by_us == (
                        state.node in schedulable or (old is not None and old.cordoned_by_us)
                    )

        if cluster.policy.budgets:
            assert len(_disrupting(cluster.active)) <= BUDGET

    @invariant()
    def ladder_is_climbed_in_order(self) -> None:
        """Each step is the same one again (retry, resumed) or the very next rung; a repeat
        offender may jump from its cordon to the first rung at or above `history.then`."""
        if not hasattr(self, "cluster"):
            return
        cluster = self.cluster
        faults = {f.name: f for f in cluster.policy.faults}
        history = cluster.policy.history
        order = list(LADDER_ORDER)
        for state in [*cluster.active.values(), *cluster.finished]:
            actions = [s.action for s in faults[state.fault].ladder]
            allowed_first = {0}
            jump: int | None = None
            if state.repeat_offender and history is not None:
                at_least = [
                    i for i, a in enumerate(actions) if order.index(a) >= order.index(history.then)
                ]
                jump = at_least[0] if at_least else len(actions) - 1
                if actions[0] is not Action.Cordon:
                    allowed_first = {jump}
            previous: int | None = None
            for record in state.steps:
                at = actions.index(record.action)
                if previous is None:
                    assert at in allowed_first, f"{state.name} began at {record.action}"
                elif at != previous:
                    allowed = {previous + 1}
                    if jump is not None and actions[previous] is Action.Cordon:
                        allowed = {jump}
                    assert at in allowed, (
                        f"{state.name} went from {actions[previous]} to {record.action}"
                    )
                previous = at


Fleet.TestCase.settings = settings(
    max_examples=int(os.environ.get("DOMAIN_EXAMPLES", "60")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFleet = Fleet.TestCase
