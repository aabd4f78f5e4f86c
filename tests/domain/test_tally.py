"""A plan made with the caller's FleetTally is exactly the plan made from scratch.

The tally carries per-node matches and per-group health between plans and re-matches only the
nodes it is told changed, plus those whose answer changes with time alone (a heartbeat going
stale, a startup grace ending). Any slip there would change a decision silently, so the
invariants state machine is replayed with every plan computed both ways, focused on all nodes
and on one, and the two compared whole. Unit tests cover what makes the tally count again.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from remediation_operator.domain import planner
from remediation_operator.domain.fleet import NodeView, Snapshot
from remediation_operator.domain.policy import CircuitBreaker

from .fake_cluster import MIN, T0, FakeCluster, node, policy
from .test_invariants import NODES, Fleet


class _TalliedCluster(FakeCluster):
    """FakeCluster whose every decision is checked against a tally kept like the engine's."""

    tally: planner.FleetTally
    seen: dict[str, NodeView]
    forgetful: bool
    """Tell the tally nothing about changes sometimes (it must then count everything)."""

    def decide(self) -> planner.Plan:
        changed = {n for n in self.seen.keys() | self.nodes.keys()}
        changed = {n for n in changed if self.seen.get(n) is not self.nodes.get(n)}
        self.tally.changed(None if self.forgetful and len(changed) % 3 == 0 else changed)
        self.seen = dict(self.nodes)
        for focus in (self.focus, frozenset(sorted(self.nodes)[:1])):
            snapshot = self.snapshot(focus)
            assert planner.plan(snapshot, self.policy, self.now, self.tally) == planner.plan(
                snapshot, self.policy, self.now
            )
        return planner.plan(self.snapshot(self.focus), self.policy, self.now, self.tally)


class TalliedFleet(Fleet):
    """The invariants machine, with a tally, startup graces and zone moves added."""

    @initialize(
        dry_run=st.booleans(),
        budget=st.booleans(),
        rate=st.booleans(),
        breaker=st.booleans(),
        approval=st.booleans(),
        history=st.booleans(),
        tolerate=st.sampled_from([0, 60]),
        force=st.booleans(),
        grace=st.sampled_from([0, 120, 900]),
        forgetful=st.booleans(),
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
        grace: int = 0,
        forgetful: bool = False,
    ) -> None:
        Fleet.setup(self, dry_run, budget, rate, breaker, approval, history, tolerate, force)
        cluster = self.cluster
        cluster.__class__ = _TalliedCluster
        assert isinstance(cluster, _TalliedCluster)
        cluster.policy = replace(cluster.policy, startup_grace=timedelta(seconds=grace))
        cluster.tally = planner.FleetTally()
        cluster.seen = {}
        cluster.forgetful = forgetful

    @rule(name=st.sampled_from(NODES), faulty=st.booleans())
    def newborn(self, name: str, faulty: bool) -> None:
        """A node (re)joins now, possibly faulty at once: within its startup grace."""
        cluster = self.cluster
        cluster.nodes[name] = node(
            name, faulty=faulty, now=cluster.now, labels={"zone": name[0]}, created_at=cluster.now
        )
        self.plan()

    @rule(name=st.sampled_from(["b0", "b1"]), zone=st.sampled_from(["b", "c"]))
    def move(self, name: str, zone: str) -> None:
        """A node's breaker group changes (its zone label is edited). Zone a, which the
        inherited breaker invariant watches, keeps its members: the small-group exception
        would otherwise let one node start while a shrunken group's breaker still shows open."""
        if name in self.cluster.nodes:
            labels = {**self.cluster.nodes[name].labels, "zone": zone}
            self.cluster.edit(name, labels=labels)
        self.plan()

    @rule(breaker=st.booleans())
    def regroup(self, breaker: bool) -> None:
        """The policy is edited (breaker by zone on or off): the tally must count again."""
        config = CircuitBreaker("40%", min_nodes=3, cooldown=10 * MIN, group_by="zone")
        self.cluster.policy = replace(
            self.cluster.policy, circuit_breaker=config if breaker else None
        )
        self.plan()


TalliedFleet.TestCase.settings = settings(
    max_examples=int(os.environ.get("DOMAIN_EXAMPLES", "60")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTalliedFleet = TalliedFleet.TestCase


def _fleet(count: int) -> dict[str, NodeView]:
    return {f"n{i}": node(f"n{i}", labels={"zone": f"z{i % 4}"}) for i in range(count)}


def test_only_changed_and_focused_nodes_are_matched_again() -> None:
    nodes = _fleet(2000)
    chosen = policy()
    tally = planner.FleetTally()
    planner.plan(Snapshot(nodes=nodes), chosen, T0, tally)
    nodes["n7"] = node("n7", faulty=True, labels={"zone": "z3"})
    tally.changed({"n7"})
    snapshot = Snapshot(nodes=dict(nodes), focus=frozenset({"n7"}))

    result = planner.plan(snapshot, chosen, T0 + timedelta(seconds=1), tally)

    assert tally.recounts == 1
    assert result == planner.plan(snapshot, chosen, T0 + timedelta(seconds=1))
    assert set(tally.matches) == {"n7"}


def test_a_heartbeat_going_stale_is_seen_without_being_told() -> None:
    nodes = _fleet(50)
    chosen = policy()
    tally = planner.FleetTally()
    planner.plan(Snapshot(nodes=nodes), chosen, T0, tally)
    later = T0 + 6 * MIN  # the fixture's heartbeats are 5 minutes from going stale

    tally.changed(())
    result = planner.plan(Snapshot(nodes=nodes), chosen, later, tally)

    assert result == planner.plan(Snapshot(nodes=nodes), chosen, later)
    assert result.summary.unhealthy == 50
    assert tally.recounts == 1


def test_what_it_cannot_vouch_for_makes_it_count_again() -> None:
    nodes = _fleet(20)
    chosen = policy()
    tally = planner.FleetTally()
    planner.plan(Snapshot(nodes=nodes), chosen, T0, tally)
    assert tally.recounts == 1

    tally.changed(None)  # the caller lost track
    planner.plan(Snapshot(nodes=nodes), chosen, T0, tally)
    assert tally.recounts == 2

    planner.plan(Snapshot(nodes=nodes), chosen, T0 - MIN, tally)  # time went back
    assert tally.recounts == 3

    edited = replace(chosen, startup_grace=10 * MIN)
    planner.plan(Snapshot(nodes=nodes), edited, T0, tally)
    assert tally.recounts == 4

    fewer = dict(list(nodes.items())[:10])  # nodes left without being reported
    tally.changed(())
    result = planner.plan(Snapshot(nodes=fewer), edited, T0, tally)
    assert tally.recounts == 5
    assert result == planner.plan(Snapshot(nodes=fewer), edited, T0)
