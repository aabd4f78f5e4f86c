"""The engine with the real planner and the in-memory cluster: the stories users rely on."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from remediation_operator.domain import planner
from remediation_operator.domain.effects import EVERY_POD, DrainPlan
from remediation_operator.domain.fleet import EXCLUDE_LABEL, Snapshot
from remediation_operator.domain.planner import Plan
from remediation_operator.domain.policy import (
    LADDER_ORDER,
    Action,
    Budget,
    CircuitBreaker,
    ConditionMatch,
    Fault,
    Mode,
    OnExhausted,
    Policy,
    Recovery,
    ReplaceProvider,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    Outcome,
    Phase,
    RemediationState,
    StepRecord,
)
from remediation_operator.engine.ports import Conflict, DrainStatus, RemediationRecord
from remediation_operator.engine.reconciler import APPROVE_ANNOTATION
from remediation_operator.sim.memory_cluster import DO_NOT_DISRUPT, QUARANTINE
from tests.engine.conftest import Driver, Harness

XID = "AcceleratedHardwareReady"

RESET_GPU = Fault(
    name="gpu-xid-reset",
    match=(ConditionMatch(XID, "False", r"NvidiaXID(46|62|64|95)Error"),),
    tolerate=timedelta(minutes=2),
    ladder=(
        Step(Action.Cordon, escalate_after=timedelta(minutes=5)),
        Step(Action.Drain, timeout=timedelta(minutes=30)),
        Step(Action.GPUReset, timeout=timedelta(minutes=10), escalate_after=timedelta(minutes=5)),
        Step(Action.Reboot, timeout=timedelta(minutes=30), escalate_after=timedelta(minutes=10)),
        Step(Action.Replace, timeout=timedelta(minutes=60)),
    ),
)

CORDON_ONLY = Fault(
    name="gpu-xid-reset",
    match=RESET_GPU.match,
    tolerate=timedelta(minutes=2),
    ladder=(Step(Action.Cordon, escalate_after=timedelta(hours=1)),),
    on_exhausted=OnExhausted.Hold,
)


def policy(fault: Fault = RESET_GPU, **changes: object) -> Policy:
    fields: dict[str, object] = {
        "name": "gpu",
        "faults": (fault,),
        "recovery": Recovery(healthy_for=timedelta(minutes=10)),
    }
    fields.update(changes)
    return Policy(**fields)  # type: ignore[arg-type]


def fault(harness: Harness, node: str, xid: int = 62) -> None:
    harness.cluster.set_condition(node, XID, "False", f"NvidiaXID{xid}Error", "GPU fell over")


def reached(drive: Driver, node: str, action: Action) -> bool:
    """The node's newest Remediation has started `action` (it may have finished it too)."""
    return any(s.action is action for s in drive.remediation(node).steps)


def heal(harness: Harness, node: str) -> None:
    harness.cluster.set_condition(node, XID, "True", "NvidiaAcceleratedHardwareReady")


async def test_reset_gpu_ladder_climbs_to_replacement_when_the_fault_persists(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    drive = Driver(harness, policy())
    pdb_lifts = clock.now + timedelta(minutes=12)
    cluster.add_pod("gpu-0", "trainer-0", protected_until=pdb_lifts)
    cluster.add_pod("gpu-0", "trainer-1")
    cluster.add_pod("gpu-0", "dcgm-exporter", daemonset=True)
    cluster.add_pod("gpu-0", "kube-proxy", mirror=True)
    fault(harness, "gpu-0")

    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Drain)
    node = cluster.node("gpu-0")
    assert node["spec"]["unschedulable"] is True
    assert {"key": QUARANTINE, "value": "gpu-xid-reset", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    assert node["metadata"]["annotations"][DO_NOT_DISRUPT] == "true"

    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.DrainBlockedByPDB)
    assert [p.name for p in cluster.pods("gpu-0")] == ["trainer-0", "dcgm-exporter", "kube-proxy"]

    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.GPUReset)
    assert clock.now >= pdb_lifts, "the drain waited for the PodDisruptionBudget"
    assert [p.name for p in cluster.pods("gpu-0")] == ["dcgm-exporter", "kube-proxy"]
    (reset,) = cluster.executions("gpu-0")
    assert (reset.action, reset.attempt) == (Action.GPUReset, 1)
    cluster.finish_execution("gpu-0", Action.GPUReset)
    boot_before = cluster.views()["gpu-0"].boot_id

    await drive.settle(["gpu-0"])  # the Job's completion is a watch event in the real operator
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Reboot)
    assert drive.remediation("gpu-0").boot_id_at_step_start == boot_before
    cluster.finish_execution("gpu-0", Action.Reboot)
    assert cluster.views()["gpu-0"].boot_id != boot_before

    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Replace)
    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.NodeClaimDeleted)
    assert cluster.replacement_requested("gpu-0") is not None
    cluster.delete_node("gpu-0")  # Karpenter drained and terminated it

    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    final = drive.remediation("gpu-0")
    assert (final.phase, final.reason) == (Phase.Succeeded, Reason.NodeReplaced)
    history = [
        (s.action, s.outcome) for s in final.steps if s.outcome is not Outcome.TransientFailure
    ]
    assert history[:4] == [
        (Action.Cordon, Outcome.Succeeded),
        (Action.Drain, Outcome.Succeeded),
        (Action.GPUReset, Outcome.Succeeded),
        (Action.Reboot, Outcome.Succeeded),
    ]
    assert [a for a, _ in history] == [*LADDER_ORDER], "each rung once, none skipped"
    assert all(s.finished_at is not None for s in final.steps)
    assert cluster.calls[("cordon", "gpu-0")] == 1, "cordoned once, never again"
    assert {e.reason for e in cluster.events_for("Remediation", final.name)} >= {
        Reason.FaultDetected,
        Reason.StepStarted,
        Reason.DrainBlockedByPDB,
        Reason.NodeReplaced,
    }


async def test_a_transient_fault_is_cordoned_then_recovers_and_is_uncordoned(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    drive = Driver(harness, policy())
    fault(harness, "gpu-1")
    await drive.run_until(lambda: cluster.views()["gpu-1"].unschedulable)
    heal(harness, "gpu-1")

    await drive.run_until(lambda: drive.remediation("gpu-1").terminal)

    final = drive.remediation("gpu-1")
    assert (final.phase, final.reason) == (Phase.Succeeded, Reason.Recovered)
    view = cluster.views()["gpu-1"]
    assert not view.unschedulable
    assert not view.quarantined
    assert [s.action for s in final.steps] == [Action.Cordon]


async def test_an_administrators_cordon_is_preserved_after_recovery(harness: Harness) -> None:
    cluster = harness.cluster
    drive = Driver(harness, policy())
    cluster.set_unschedulable("gpu-2", True)
    fault(harness, "gpu-2")
    await drive.run_until(lambda: cluster.views()["gpu-2"].quarantined)
    assert drive.remediation("gpu-2").cordoned_by_us is False
    heal(harness, "gpu-2")

    await drive.run_until(lambda: drive.remediation("gpu-2").terminal)

    view = cluster.views()["gpu-2"]
    assert view.unschedulable, "we never uncordon a node someone else cordoned"
    assert not view.quarantined


async def test_an_administrators_uncordon_cancels_and_we_stay_out(harness: Harness) -> None:
    cluster, clock = harness.cluster, harness.clock
    drive = Driver(harness, policy(CORDON_ONLY))
    fault(harness, "gpu-3")
    await drive.run_until(lambda: drive.remediation("gpu-3").phase is Phase.Waiting)
    cluster.set_unschedulable("gpu-3", False)

    await drive.settle(["gpu-3"])

    first = min((r.state for r in cluster.remediations("gpu")), key=lambda s: s.started_at)
    assert (first.phase, first.reason) == (Phase.Cancelled, Reason.AdminUncordoned)
    assert not cluster.views()["gpu-3"].quarantined
    clock.advance(timedelta(hours=2))
    await drive.settle()
    assert not cluster.views()["gpu-3"].unschedulable, "not re-cordoned in the same episode"
    assert cluster.calls[("cordon", "gpu-3")] == 1


async def test_dry_run_records_decisions_and_changes_no_node(harness: Harness) -> None:
    cluster = harness.cluster
    cluster.heartbeat = None  # node objects are compared whole: no agent rewrites them
    drive = Driver(harness, policy(mode=Mode.DryRun))
    cluster.add_pod("gpu-0", "trainer")
    fault(harness, "gpu-0")
    fault(harness, "gpu-1", xid=95)
    before = {name: repr(cluster.node(name)) for name in cluster.views()}

    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Replace))

    assert {name: repr(cluster.node(name)) for name in cluster.views()} == before
    assert [p.name for p in cluster.pods("gpu-0")] == ["trainer"]
    assert not cluster.calls
    assert cluster.executions() == []
    decided = drive.remediation("gpu-0")
    assert decided.dry_run
    assert [s.action for s in decided.steps] == [*LADDER_ORDER], "every decision is recorded"
    assert {s.reason for s in decided.steps} == {Reason.DryRun}
    said = [e for e in cluster.events_for("Node", "gpu-0") if e.reason is Reason.DryRun]
    assert len(said) == len(LADDER_ORDER), "one explained would-be action per rung"


async def test_a_budget_holds_the_second_node_until_the_first_finishes(harness: Harness) -> None:
    cluster = harness.cluster
    drive = Driver(harness, policy(budgets=(Budget(nodes="1"),)))
    cluster.add_pod("gpu-1", "trainer")
    fault(harness, "gpu-0")
    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Drain))
    fault(harness, "gpu-1")

    await drive.run_until(lambda: drive.remediation("gpu-1").phase is Phase.Blocked)
    blocked = drive.remediation("gpu-1")
    assert blocked.reason is Reason.BudgetExhausted
    assert blocked.step is Action.Cordon, "cordon is not disruptive: it is not held back"
    assert [p.name for p in cluster.pods("gpu-1")] == ["trainer"]

    heal(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    await drive.run_until(lambda: reached(drive, "gpu-1", Action.Drain))
    assert cluster.pods("gpu-1") == ()


async def test_a_node_deleted_mid_remediation_cancels_it(harness: Harness) -> None:
    cluster = harness.cluster
    drive = Driver(harness, policy())
    cluster.add_pod("gpu-0", "trainer", protected_until=harness.clock.now + timedelta(hours=1))
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Drain)
    cluster.delete_node("gpu-0")

    await drive.settle(["gpu-0"])

    final = drive.remediation("gpu-0")
    assert (final.phase, final.reason) == (Phase.Cancelled, Reason.NodeDeleted)
    assert not [a for r in drive.results for a in r.applied if a.result == "failed"]


@pytest.mark.parametrize("at", ["cordon", "evict", "run_executor"])
async def test_killed_mid_step_resumes_without_repeating_or_skipping(
    harness: Harness, at: str
) -> None:
    """The operator dies as it carries out a step; a fresh engine finishes the story.

    Drain and executors are recorded before they run, so the crash leaves their step recorded
    as Running; the cordon runs before its record (D14), so the crash leaves the incident
    still Pending and the fresh engine starts the Cordon step over, cordoning once."""
    cluster = harness.cluster
    drive = Driver(harness, policy())
    cluster.add_pod("gpu-0", "trainer")
    fault(harness, "gpu-0")
    cluster.inject(at, SystemExit("killed"))

    with pytest.raises(SystemExit):
        await drive.run_until(lambda: False)
    recorded = drive.remediation("gpu-0")
    assert recorded.phase is (Phase.Pending if at == "cordon" else Phase.Running)

    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Reboot)

    final = drive.remediation("gpu-0")
    assert [s.action for s in final.steps] == [
        Action.Cordon,
        Action.Drain,
        Action.GPUReset,
        Action.Reboot,
    ]
    assert cluster.calls[("cordon", "gpu-0")] == 1
    started = [(e.action, e.attempt) for e in cluster.executions("gpu-0")]
    assert started == [(Action.GPUReset, 1), (Action.Reboot, 1)], "each executor started once"
    assert cluster.pods("gpu-0") == ()


async def test_the_breaker_opens_when_a_third_of_a_pool_faults_and_nothing_starts(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    for i in range(4, 10):
        cluster.add_node(
            f"gpu-{i}", labels={"pool": "a"}, created_at=harness.clock.now - timedelta(days=1)
        )
    breaker = CircuitBreaker(max_unhealthy="30%", min_nodes=5, group_by="pool")
    drive = Driver(harness, policy(circuit_breaker=breaker))
    for i in range(4):
        fault(harness, f"gpu-{i}")

    def breaker_open() -> bool:
        summary = cluster.policy_state("gpu").summary
        return summary is not None and "a" in summary.circuit_open

    await drive.run_until(breaker_open)
    harness.clock.advance(timedelta(minutes=30))
    await drive.settle()

    assert cluster.policy_state("gpu").breakers["a"].open
    assert not any(v.unschedulable or v.quarantined for v in cluster.views().values())
    assert not cluster.calls
    (opened,) = cluster.events_for("RemediationPolicy", "gpu")
    assert opened.reason is Reason.CircuitOpen


async def test_an_excluded_node_is_left_alone(harness: Harness) -> None:
    cluster = harness.cluster
    drive = Driver(harness, policy())
    cluster.set_label("gpu-0", EXCLUDE_LABEL, "true")
    fault(harness, "gpu-0")

    harness.clock.advance(timedelta(hours=1))
    await drive.settle()

    assert cluster.remediations("gpu") == []
    assert not cluster.views()["gpu-0"].unschedulable
    assert drive.results[-1].reasons["gpu-0"] is Reason.NodeExcluded


async def test_a_replaced_node_records_its_replace_step_as_succeeded(harness: Harness) -> None:
    cluster = harness.cluster
    now = harness.clock.now
    replacing = RemediationState(
        name="gpu-0-20261130t1000",
        node="gpu-0",
        policy="gpu",
        fault=RESET_GPU.name,
        phase=Phase.Running,
        reason=Reason.NodeClaimDeleted,
        message="NodeClaim deleted.",
        started_at=now - timedelta(hours=1),
        step_index=4,
        step=Action.Replace,
        attempt=1,
        step_started_at=now - timedelta(minutes=5),
        next_check_at=now + timedelta(minutes=1),
        cordoned_by_us=True,
        steps=(StepRecord(Action.Replace, 1, now - timedelta(minutes=5), Reason.StepStarted, ""),),
    )
    await cluster.create_remediation(replacing)
    fault(harness, "gpu-0")
    await cluster.replace("gpu-0", ReplaceProvider.Karpenter)
    cluster.delete_node("gpu-0")

    await Driver(harness, policy()).settle(["gpu-0"])

    (final,) = [r.state for r in cluster.remediations("gpu")]
    assert (final.phase, final.reason) == (Phase.Succeeded, Reason.NodeReplaced)
    assert final.steps[-1].outcome is Outcome.Succeeded


async def test_a_gated_replace_waits_for_the_approval_annotation(harness: Harness) -> None:
    cluster = harness.cluster
    to_replace = Fault(
        name="gpu-fell-off-bus",
        match=(ConditionMatch(XID, "False", r"NvidiaXID79Error"),),
        ladder=(Step(Action.Cordon), Step(Action.Replace)),
    )
    drive = Driver(harness, policy(to_replace, require_approval=frozenset({Action.Replace})))
    fault(harness, "gpu-0", xid=79)

    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.AwaitingApproval)
    harness.clock.advance(timedelta(hours=1))
    await drive.settle()
    assert cluster.replacement_requested("gpu-0") is None, "no replacement without approval"

    cluster.annotate_remediation(drive.remediation("gpu-0").name, APPROVE_ANNOTATION, "Replace")
    await drive.settle(["gpu-0"])  # a Remediation watch event in the real operator

    assert drive.remediation("gpu-0").step is Action.Replace
    assert cluster.replacement_requested("gpu-0") is ReplaceProvider.Karpenter


async def one_drains_one_waits(harness: Harness) -> tuple[Driver, Policy]:
    """Budget of one node: gpu-1 drains (a protected pod keeps it draining), gpu-0 waits."""
    cluster = harness.cluster
    budgeted = policy(budgets=(Budget(nodes="1"),))
    drive = Driver(harness, budgeted)
    cluster.add_pod("gpu-1", "trainer-1", protected_until=harness.clock.now + timedelta(hours=1))
    cluster.add_pod("gpu-0", "trainer-0")
    fault(harness, "gpu-1")
    await drive.run_until(lambda: reached(drive, "gpu-1", Action.Drain))
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.BudgetExhausted)
    return drive, budgeted


async def test_a_closing_that_frees_the_budget_is_recorded_before_the_start_it_allows(
    harness: Harness,
) -> None:
    """Found by tests/reliability/test_api_faults.py (seed 1, about one run in seven): one
    reconcile closed gpu-0001's incident (its node was gone after Replace) and, with the
    budget that freed, started gpu-0000's Drain, and wrote gpu-0000 first: for 300 ms the
    store held two nodes disrupted under a budget of one. However the plan lists them (here
    the start first, as that run's plan did), the closing is written first."""
    cluster = harness.cluster
    drive, budgeted = await one_drains_one_waits(harness)

    order: list[tuple[str, str]] = []
    update, evict = cluster.update_remediation, cluster.evict

    async def recorded_update(state: RemediationState, resource_version: str) -> RemediationRecord:
        order.append((state.node, "closed" if state.terminal else str(state.step)))
        return await update(state, resource_version)

    async def recorded_evict(node: str, force: bool, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        order.append((node, "evict"))
        return await evict(node, force, plan)

    def starts_listed_first(snapshot: Snapshot, policy: Policy, now: datetime) -> Plan:
        made = planner.plan(snapshot, policy, now)
        ranked = sorted(made.remediations, key=lambda state: state.terminal)
        return dataclasses.replace(made, remediations=tuple(ranked))

    cluster.update_remediation = recorded_update  # type: ignore[method-assign]
    cluster.evict = recorded_evict  # type: ignore[method-assign]
    cluster.delete_node("gpu-1")
    await harness.reconcile(budgeted, None, plan=starts_listed_first)

    assert drive.remediation("gpu-1").reason is Reason.NodeDeleted
    assert reached(drive, "gpu-0", Action.Drain), "the freed budget is used at once"
    closed = order.index(("gpu-1", "closed"))
    assert closed < order.index(("gpu-0", str(Action.Drain))), order
    assert closed < order.index(("gpu-0", "evict")), order


async def test_a_start_waits_when_the_closing_that_frees_its_budget_is_not_recorded(
    harness: Harness,
) -> None:
    """The closing's write fails: the start it allowed is not carried out on a budget the
    store does not show as free; the next reconcile plans both again from the records."""
    cluster = harness.cluster
    drive, budgeted = await one_drains_one_waits(harness)

    update = cluster.update_remediation

    async def closing_lost(state: RemediationState, resource_version: str) -> RemediationRecord:
        if state.terminal:
            raise Conflict(f"remediation {state.name}: lost")
        return await update(state, resource_version)

    cluster.update_remediation = closing_lost  # type: ignore[method-assign]
    cluster.delete_node("gpu-1")
    await harness.reconcile(budgeted, ["gpu-1"])
    assert not drive.remediation("gpu-1").terminal
    assert [p.name for p in cluster.pods("gpu-0")] == ["trainer-0"], "not drained"
    assert not reached(drive, "gpu-0", Action.Drain)

    cluster.update_remediation = update  # type: ignore[method-assign]
    await drive.settle(["gpu-1"])
    assert drive.remediation("gpu-1").reason is Reason.NodeDeleted
    await drive.run_until(lambda: reached(drive, "gpu-0", Action.Drain))
