"""The engine's own guarantees, with a scripted planner: what it reads, writes and tolerates."""

from __future__ import annotations

import copy
from datetime import timedelta

from remediation_operator.domain.effects import (
    Announce,
    Cordon,
    Evict,
    Release,
    Replace,
    Severity,
)
from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.planner import Plan, PolicySummary
from remediation_operator.domain.policy import Action, Mode, ReplaceProvider
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.engine import reconciler
from remediation_operator.engine.ports import Transient
from tests.engine.conftest import Harness, ScriptedPlanner, plan_of, simple_policy, state


async def test_a_conflicting_write_is_reread_and_only_that_node_is_planned_again(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    running = state("gpu-0", step=Action.Cordon, phase=Phase.Running)
    await cluster.create_remediation(running)
    waiting = state(
        "gpu-0", step=Action.Cordon, phase=Phase.Waiting, reason=Reason.WaitingToEscalate
    )
    said = Announce("gpu-0", running.name, Reason.WaitingToEscalate, "Cordoned; watching.")
    cluster.inject("update_remediation", lambda: cluster.touch_remediation(running.name))
    planner = ScriptedPlanner([plan_of(waiting, said), plan_of(waiting, said)])

    result = await harness.reconcile(policy, plan=planner)

    assert result.replanned == {"gpu-0"}
    assert [s.focus for s in planner.seen] == [None, frozenset({"gpu-0"})]
    (record,) = cluster.remediations("gpu")
    assert record.state.phase is Phase.Waiting
    (event,) = cluster.events_for("Node", "gpu-0")
    assert event.count == 1, "the decision lost in the conflict was not announced"


async def test_conflicts_that_keep_coming_end_the_call_with_an_immediate_wake(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    running = state("gpu-0", step=Action.Cordon, phase=Phase.Running)
    await cluster.create_remediation(running)
    waiting = state("gpu-0", step=Action.Cordon, phase=Phase.Waiting)
    cluster.inject("update_remediation", lambda: cluster.touch_remediation(running.name), times=10)
    planner = ScriptedPlanner(
        [plan_of(waiting, next_wake=harness.clock.now + timedelta(hours=1))] * 5
    )

    result = await harness.reconcile(policy, plan=planner)

    assert len(planner.seen) == reconciler.MAX_ROUNDS
    assert result.next_wake == harness.clock.now
    (record,) = cluster.remediations("gpu")
    assert record.state.phase is Phase.Running


async def test_a_transient_failure_is_retried_at_once_a_few_times(harness: Harness) -> None:
    cluster, policy = harness.cluster, simple_policy()
    cordon = state("gpu-0", step=Action.Cordon, phase=Phase.Running)
    cluster.inject("cordon", Transient("apiserver timeout"), times=reconciler.IMMEDIATE_RETRIES)

    result = await harness.reconcile(
        policy, plan=ScriptedPlanner([plan_of(cordon, Cordon("gpu-0"))])
    )

    assert [a.result for a in result.applied] == ["ok"]
    assert cluster.views()["gpu-0"].unschedulable
    assert result.next_wake is None


async def test_a_persistent_transient_failure_schedules_a_wake_at_the_ports_hint(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    hint = timedelta(seconds=7)
    cordon = state("gpu-0", step=Action.Cordon, phase=Phase.Running)
    cluster.inject("cordon", Transient("apiserver unavailable", hint), times=10)
    later = harness.clock.now + timedelta(minutes=5)

    result = await harness.reconcile(
        policy, plan=ScriptedPlanner([plan_of(cordon, Cordon("gpu-0"), next_wake=later)])
    )

    assert [a.result for a in result.applied] == ["failed"]
    assert result.next_wake == harness.clock.now + hint
    assert "apiserver unavailable" in result.errors[0]
    (record,) = cluster.remediations("gpu")
    assert record.state.step is Action.Cordon, "the step stays recorded; the next call resumes it"


async def test_effects_on_a_vanished_node_are_tolerated(harness: Harness) -> None:
    cluster, policy = harness.cluster, simple_policy()
    cluster.delete_node("gpu-3")
    plan = plan_of(
        state("gpu-3", step=Action.Replace, phase=Phase.Running),
        Replace("gpu-3", ReplaceProvider.Karpenter),
        Announce("gpu-3", None, Reason.StepStarted, "Replace started."),
    )

    result = await harness.reconcile(policy, plan=ScriptedPlanner([plan]))

    assert [a.result for a in result.applied] == ["node_gone"]
    assert result.errors == ()


async def test_dry_run_never_touches_a_node_even_if_a_plan_asked_to(harness: Harness) -> None:
    cluster = harness.cluster
    policy = simple_policy(mode=Mode.DryRun)
    cluster.add_pod("gpu-0", "trainer")
    before = {name: copy.deepcopy(cluster.node(name)) for name in cluster.views()}
    plan = plan_of(
        state("gpu-0", step=Action.Drain, phase=Phase.Running, dry_run=True),
        Cordon("gpu-0"),
        Evict("gpu-0"),
        Announce("gpu-0", None, Reason.DryRun, "Would drain gpu-0."),
    )

    result = await harness.reconcile(policy, plan=ScriptedPlanner([plan]))

    assert {a.result for a in result.applied} == {"skipped_dry_run"}
    assert {name: cluster.node(name) for name in cluster.views()} == before
    assert [p.name for p in cluster.pods("gpu-0")] == ["trainer"]
    assert not cluster.calls
    (record,) = cluster.remediations("gpu")
    assert record.state.dry_run, "the decision itself is recorded"


async def test_dry_run_still_undoes_what_an_enforce_incident_did(harness: Harness) -> None:
    """Undoing our own cordon never depends on the mode (issue 12, defect 11)."""
    cluster = harness.cluster
    await cluster.cordon("gpu-1", "gpu-xid-reset", "gpu")
    assert cluster.views()["gpu-1"].quarantined

    result = await harness.reconcile(
        simple_policy(mode=Mode.DryRun),
        plan=ScriptedPlanner([plan_of(Release("gpu-1", uncordon=True))]),
    )

    assert [a.result for a in result.applied] == ["ok"]
    view = cluster.views()["gpu-1"]
    assert not view.quarantined
    assert not view.unschedulable


async def test_announcements_become_counted_events_on_node_remediation_or_policy(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    blocked = Announce(
        "gpu-0",
        "gpu-0-20261130t1100",
        Reason.BudgetExhausted,
        "Budget allows 0 more drains.",
        Severity.Warning,
    )
    breaker = Announce(
        "", None, Reason.CircuitOpen, "40% of pool a shows a fault.", Severity.Warning
    )
    planner = ScriptedPlanner([plan_of(blocked, breaker), plan_of(blocked)])

    await harness.reconcile(policy, plan=planner)
    harness.clock.advance(timedelta(minutes=1))
    await harness.reconcile(policy, plan=planner)

    (on_node,) = cluster.events_for("Node", "gpu-0")
    (on_remediation,) = cluster.events_for("Remediation", "gpu-0-20261130t1100")
    (on_policy,) = cluster.events_for("RemediationPolicy", "gpu")
    assert (on_node.count, on_node.severity, on_node.reason) == (
        2,
        "Warning",
        Reason.BudgetExhausted,
    )
    assert on_node.last_seen - on_node.first_seen == timedelta(minutes=1)
    assert on_remediation.count == 2
    assert on_policy.reason is Reason.CircuitOpen
    assert harness.recorder.decisions[Reason.BudgetExhausted] == 2


async def test_the_snapshot_holds_selection_observations_approvals_and_not_ready_nodes(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    policy = simple_policy(node_selector=LabelSelector(match_labels={"pool": "a"}))
    cluster.add_node("cpu-0", labels={"pool": "cpu"}, ready=False)
    cluster.add_pod("gpu-0", "trainer-0", protected_until=clock.now + timedelta(minutes=10))
    cluster.add_pod("gpu-0", "trainer-1")
    cluster.add_pod("gpu-0", "dcgm-exporter", daemonset=True)
    drain = state("gpu-0", step=Action.Drain, phase=Phase.Running)
    replace = state(
        "gpu-1", step=Action.Replace, phase=Phase.Blocked, reason=Reason.AwaitingApproval
    )
    await cluster.create_remediation(drain)
    await cluster.create_remediation(replace)
    cluster.annotate_remediation(replace.name, reconciler.APPROVE_ANNOTATION, " replace , Bogus")
    cluster.set_condition("gpu-2", "Ready", "False", "KubeletNotReady")
    planner = ScriptedPlanner()

    first = await harness.reconcile(policy, plan=planner)
    await harness.reconcile(policy, plan=planner)

    seen = planner.seen[0]
    assert set(seen.nodes) == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    assert seen.approvals == {"gpu-1": frozenset({Action.Replace})}
    assert seen.not_ready_elsewhere == {"gpu-2"}
    assert seen.observations["gpu-0"].progress is Progress.InProgress
    assert not seen.observations["gpu-0"].blocked_by_pdb
    resumed = [a.effect for a in first.applied if a.resumed]
    assert resumed[-1] == Evict("gpu-0")
    assert all(a.node == "gpu-0" for a in first.applied), "a Blocked step is never resumed"
    again = planner.seen[1].observations["gpu-0"]
    assert again.blocked_by_pdb, "the resumed drain met the PodDisruptionBudget"
    assert [p.name for p in cluster.pods("gpu-0")] == ["trainer-0", "dcgm-exporter"]


async def test_a_step_that_cannot_be_observed_is_left_out_of_the_plan(harness: Harness) -> None:
    cluster, policy = harness.cluster, simple_policy()
    await cluster.create_remediation(state("gpu-0", step=Action.Drain, phase=Phase.Running))
    cluster.inject("drain_status", Transient("timeout", timedelta(seconds=3)), times=10)
    planner = ScriptedPlanner([plan_of(next_wake=harness.clock.now + timedelta(minutes=1))])

    result = await harness.reconcile(policy, plan=planner)

    assert planner.seen[0].focus == frozenset({"gpu-1", "gpu-2", "gpu-3"})
    assert result.next_wake == harness.clock.now + timedelta(seconds=3)


async def test_the_policy_status_is_written_only_when_it_changes(harness: Harness) -> None:
    cluster, policy = harness.cluster, simple_policy()
    summary = PolicySummary(observed=4, unhealthy=1, in_flight=0, headroom={Action.Drain: 1})

    def with_summary(s: PolicySummary) -> Plan:
        return Plan(effects=(), remediations=(), breakers={}, summary=s, next_wake=None)

    planner = ScriptedPlanner([with_summary(summary), with_summary(summary)])
    await harness.reconcile(policy, plan=planner)
    await harness.reconcile(policy, plan=planner)
    assert cluster.policy_writes["gpu"] == 1
    assert cluster.policy_state("gpu").summary == summary
    assert cluster.observed_generation["gpu"] == policy.generation


async def test_a_plain_mapping_of_nodes_gives_the_same_snapshot_as_the_live_index(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    policy = simple_policy(node_selector=LabelSelector(match_labels={"pool": "a"}))
    cluster.add_node("cpu-0", labels={"pool": "cpu"}, ready=False)
    cluster.set_condition("gpu-1", "Ready", "Unknown", "NodeStatusUnknown")
    indexed, plain = ScriptedPlanner(), ScriptedPlanner()

    await harness.reconcile(policy, plan=indexed)
    await reconciler.reconcile(
        policy, dict(cluster.views()), cluster.ports(), harness.clock.now, plan=plain
    )

    assert dict(indexed.seen[0].nodes) == dict(plain.seen[0].nodes)
    assert indexed.seen[0].not_ready_elsewhere == plain.seen[0].not_ready_elsewhere == {"gpu-1"}


async def test_unreadable_records_end_the_call_with_a_retry_and_no_action(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    cluster.inject("list_remediations", Transient("etcd slow", timedelta(seconds=9)), times=3)
    planner = ScriptedPlanner([plan_of(Cordon("gpu-0"))])

    result = await harness.reconcile(policy, plan=planner)

    assert planner.seen == []
    assert result.next_wake == harness.clock.now + timedelta(seconds=9)
    assert "etcd slow" in result.errors[0]
    assert not cluster.calls
