"""Overlapping policies: every node has one owner, and only the owner opens an incident there.

Issue 12, defect 3: two policies selecting one node ran two incidents on it at once. The rule
(`engine.ownership`): an open Remediation keeps its node with its policy; otherwise the highest
`weight` owns it, then the older policy, then the name. Real: the ownership rule, the planner,
the reconciler and the in-memory cluster; the two policies are reconciled in turn as the
runtime's two workers would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from remediation_operator.domain import planner
from remediation_operator.domain.fleet import NodeView, Snapshot
from remediation_operator.domain.planner import Plan
from remediation_operator.domain.policy import Action, ConditionMatch, Fault, Policy, Step
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.engine import ownership, reconciler
from tests.engine.conftest import T0, Harness

XID = "AcceleratedHardwareReady"
RESET = Fault(
    name="gpu-xid",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(62|79)Error"),),
    ladder=(Step(Action.Cordon, escalate_after=timedelta(0)), Step(Action.Drain)),
)
POOL = LabelSelector(match_labels={"pool": "a"})
EVERYTHING = LabelSelector()


def named(
    name: str, *, weight: int = 0, minutes: int = 0, selector: LabelSelector = POOL
) -> Policy:
    return Policy(
        name=name,
        faults=(RESET,),
        node_selector=selector,
        weight=weight,
        created_at=T0 - timedelta(days=1) + timedelta(minutes=minutes),
    )


# The rule itself --------------------------------------------------------------------------------

NODES = {n: NodeView(n, labels={"pool": "a"}) for n in ("gpu-0", "gpu-1")}


def test_the_heavier_policy_owns_an_overlap() -> None:
    light, heavy = named("light", weight=1), named("heavy", weight=10)
    both = [light, heavy]
    assert ownership.foreign(light, both, NODES, {}) == {"gpu-0": "heavy", "gpu-1": "heavy"}
    assert ownership.foreign(heavy, both, NODES, {}) == {}


def test_equal_weights_go_to_the_older_policy_then_to_the_name() -> None:
    old, young = named("zeta", minutes=0), named("alpha", minutes=5)
    assert ownership.foreign(old, [old, young], NODES, {}) == {}
    assert set(ownership.foreign(young, [old, young], NODES, {}).values()) == {"zeta"}
    twin_a, twin_b = named("alpha"), named("beta")
    assert ownership.foreign(twin_a, [twin_a, twin_b], NODES, {}) == {}
    assert set(ownership.foreign(twin_b, [twin_a, twin_b], NODES, {}).values()) == {"alpha"}


def test_an_open_incident_keeps_its_node_whatever_the_weights() -> None:
    light, heavy = named("light", weight=1), named("heavy", weight=10)
    held = {"gpu-0": frozenset({"light"})}
    assert ownership.foreign(heavy, [light, heavy], NODES, held) == {"gpu-0": "light"}
    assert ownership.foreign(light, [light, heavy], NODES, held) == {"gpu-1": "heavy"}


def test_a_deleted_policy_claims_nothing_new_but_keeps_what_it_is_closing() -> None:
    gone = replace(named("gone", weight=10), deleted=True)
    live = named("live")
    assert ownership.foreign(live, [gone, live], NODES, {}) == {}
    held = {"gpu-1": frozenset({"gone"})}
    assert ownership.foreign(live, [gone, live], NODES, held) == {"gpu-1": "gone"}


def test_disjoint_selectors_contest_nothing() -> None:
    a = named("a", selector=LabelSelector(match_labels={"pool": "a"}))
    b = named("b", weight=5, selector=LabelSelector(match_labels={"pool": "b"}))
    assert ownership.contested(a, [a, b], NODES, {}) == {}
    assert ownership.foreign(a, [a, b], NODES, {}) == {}


# Through the engine ------------------------------------------------------------------------------


class Seen:
    """The real planner, keeping the snapshots it was given."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def __call__(self, snapshot: Snapshot, policy: Policy, now: datetime) -> Plan:
        self.snapshots.append(snapshot)
        return planner.plan(snapshot, policy, now)


async def reconcile_all(
    harness: Harness, policies: Sequence[Policy], seen: dict[str, Seen] | None = None
) -> None:
    """One round of every policy's worker, in turn, each told who owns what."""
    cluster = harness.cluster
    for policy in policies:
        await reconciler.reconcile(
            policy,
            cluster.views(),
            cluster.ports(harness.recorder),
            harness.clock.now,
            foreign=lambda p=policy: cluster.foreign(p, policies),  # type: ignore[misc]
            plan=None if seen is None else seen.setdefault(policy.name, Seen()),
        )


def open_incidents(harness: Harness) -> dict[str, list[str]]:
    by_node: dict[str, list[str]] = {}
    for record in harness.cluster.remediations():
        if not record.state.terminal:
            by_node.setdefault(record.state.node, []).append(record.state.policy)
    return by_node


async def test_two_overlapping_policies_never_run_two_incidents_on_one_node(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    light, heavy = named("light", weight=1, selector=EVERYTHING), named("heavy", weight=10)
    policies = [light, heavy]
    cluster.set_condition("gpu-0", XID, "False", "NvidiaXID62Error", "GPU fell over")
    seen: dict[str, Seen] = {}

    for _ in range(12):
        await reconcile_all(harness, policies, seen)
        incidents = open_incidents(harness)
        assert all(len(owners) == 1 for owners in incidents.values()), incidents
        clock.advance(timedelta(minutes=1))

    assert open_incidents(harness) == {"gpu-0": ["heavy"]}
    assert all(r.state.policy == "heavy" for r in cluster.remediations())
    loser = seen["light"].snapshots[-1]
    assert loser.foreign == {n: "heavy" for n in ("gpu-0", "gpu-1", "gpu-2", "gpu-3")}
    assert seen["heavy"].snapshots[-1].foreign == {}
    assert cluster.calls[("cordon", "gpu-0")] == 1


async def test_a_heavier_policy_created_mid_incident_waits_for_it_to_end(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    first = named("first", weight=1)
    cluster.set_condition("gpu-0", XID, "False", "NvidiaXID62Error", "GPU fell over")
    await reconcile_all(harness, [first])
    assert open_incidents(harness) == {"gpu-0": ["first"]}

    heavy = named("heavy", weight=10, minutes=60)
    seen: dict[str, Seen] = {}
    for _ in range(5):
        clock.advance(timedelta(minutes=1))
        await reconcile_all(harness, [first, heavy], seen)
        assert open_incidents(harness) == {"gpu-0": ["first"]}, "the open incident is sticky"
    assert seen["heavy"].snapshots[-1].foreign == {"gpu-0": "first"}

    # The fault clears; the first policy's incident ends; the node is the heavier one's now.
    cluster.set_condition("gpu-0", XID, "True", "NvidiaAcceleratedHardwareReady")
    for _ in range(30):
        clock.advance(timedelta(minutes=1))
        await reconcile_all(harness, [first, heavy], seen)
        if "gpu-0" not in open_incidents(harness):
            break
    assert "gpu-0" not in open_incidents(harness)
    await reconcile_all(harness, [first, heavy], seen)
    assert seen["heavy"].snapshots[-1].foreign == {}
    assert seen["first"].snapshots[-1].foreign == {
        n: "heavy" for n in ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
    }


# Policies split by fault domain compose (issue 21 finding 7, D61) -------------------------------

NETWORK = Fault(
    name="node-networking",
    match=(ConditionMatch("NetworkingReady", "False"),),
    ladder=(Step(Action.Cordon),),
)


def _faulty(condition: str, status: str, reason: str = "") -> dict[str, NodeView]:
    from remediation_operator.domain.fleet import Condition

    view = NodeView(
        "gpu-0", labels={"pool": "a"}, conditions=(Condition(condition, status, reason),)
    )
    return {"gpu-0": view, "gpu-1": NODES["gpu-1"]}


def test_a_policy_with_a_fault_opens_on_a_node_a_heavier_policy_has_no_fault_on() -> None:
    """Finding 7: a GPU policy (heavier) and a network policy select the same nodes; the
    network fault is the network policy's to act on, not left waiting behind a policy that
    has nothing to do there."""
    gpu = named("gpu", weight=10)
    network = replace(named("network", weight=0), faults=(NETWORK,))
    nodes = _faulty("NetworkingReady", "False", "InterfaceNotUp")

    assert "gpu-0" not in ownership.foreign(network, [gpu, network], nodes, {}, T0)
    assert ownership.foreign(gpu, [gpu, network], nodes, {}, T0) == {"gpu-0": "network"}
    # Where neither shows a fault, rank decides as before (weight, age, name).
    assert ownership.foreign(network, [gpu, network], nodes, {}, T0)["gpu-1"] == "gpu"
    # Without `now`, by rank alone (the rule before D61).
    assert ownership.foreign(network, [gpu, network], nodes, {}) == {
        "gpu-0": "gpu",
        "gpu-1": "gpu",
    }


def test_a_fault_of_another_policy_waits_while_an_incident_runs() -> None:
    """One active incident per node: the running incident keeps its node; the other policy's
    fault there waits (its status shows the node as overlapped, owned by the running one)."""
    gpu = named("gpu", weight=10)
    network = replace(named("network", weight=0), faults=(NETWORK,))
    nodes = _faulty("NetworkingReady", "False")
    held = {"gpu-0": ["gpu"]}
    assert ownership.foreign(network, [gpu, network], nodes, held, T0)["gpu-0"] == "gpu"


def test_simultaneous_faults_go_by_weight_then_age_then_name() -> None:
    """Among faults of the same class (here both act), weight, then age, then name."""
    from remediation_operator.domain.fleet import Condition

    both = (Condition(XID, "False", "NvidiaXID79Error"), Condition("NetworkingReady", "False"))
    nodes = {"gpu-0": NodeView("gpu-0", labels={"pool": "a"}, conditions=both)}
    acting = replace(NETWORK, ladder=(Step(Action.Cordon), Step(Action.Drain)))
    gpu = named("gpu", weight=0, minutes=5)
    network = replace(named("network", weight=0, minutes=1), faults=(acting,))
    assert ownership.foreign(gpu, [gpu, network], nodes, {}, T0) == {"gpu-0": "network"}
    heavy = replace(gpu, weight=1)
    assert ownership.foreign(network, [heavy, network], nodes, {}, T0) == {"gpu-0": "gpu"}


def test_a_fault_that_acts_comes_before_one_that_only_holds() -> None:
    """D76: a cordon-only fault would yield its node at once to a fault whose ladder acts,
    so when both appear together the acting one owns the node, whatever the weights."""
    from remediation_operator.domain.fleet import Condition

    both = (Condition(XID, "False", "NvidiaXID79Error"), Condition("NetworkingReady", "False"))
    nodes = {"gpu-0": NodeView("gpu-0", labels={"pool": "a"}, conditions=both)}
    gpu = named("gpu", weight=0)
    network = replace(named("network", weight=10), faults=(NETWORK,))
    assert ownership.foreign(network, [gpu, network], nodes, {}, T0) == {"gpu-0": "gpu"}
    # A policy that would change nothing (paused) does not act: weight decides again.
    paused = replace(gpu, paused=True)
    assert ownership.foreign(paused, [paused, network], nodes, {}, T0) == {"gpu-0": "network"}


def test_the_running_incident_names_the_faults_that_wait_behind_it() -> None:
    gpu = named("gpu", weight=10)
    network = replace(named("network", weight=0), faults=(NETWORK,))
    from remediation_operator.domain.fleet import Condition

    both = (Condition(XID, "False", "NvidiaXID79Error"), Condition("NetworkingReady", "False"))
    nodes = {"gpu-0": NodeView("gpu-0", labels={"pool": "a"}, conditions=both)}
    held = {"gpu-0": ["network"]}
    assert ownership.waiting(network, [gpu, network], nodes, held, T0) == {
        "gpu-0": ("gpu/gpu-xid",)
    }
    assert ownership.waiting(gpu, [gpu, network], nodes, held, T0) == {}
