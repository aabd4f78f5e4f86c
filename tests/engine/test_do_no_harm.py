"""Issue 12's planner-side defects, one story each, with the real planner and engine against
the in-memory cluster (agents heart-beat every 5 minutes, as EKS's do)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain.policy import (
    Action,
    CircuitBreaker,
    ConditionMatch,
    Fault,
    Mode,
    OnExhausted,
    OnPDBBlocked,
    OnTimeout,
    Policy,
    Recovery,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, RemediationState
from remediation_operator.engine.reconciler import APPROVE_ANNOTATION
from remediation_operator.sim.memory_cluster import DO_NOT_DISRUPT
from tests.engine.conftest import Driver, Harness

XID = "AcceleratedHardwareReady"
MATCH = (ConditionMatch(XID, "False", r"NvidiaXID(46|62|64|79|95)Error"),)
MIN = timedelta(minutes=1)


def fault(harness: Harness, node: str) -> None:
    harness.cluster.set_condition(node, XID, "False", "NvidiaXID79Error", "GPU fell off the bus")


def heal(harness: Harness, node: str) -> None:
    harness.cluster.set_condition(node, XID, "True", "NvidiaAcceleratedHardwareReady")


def policy(*ladder: Step, **changes: object) -> Policy:
    on_exhausted = changes.pop("on_exhausted", OnExhausted.Hold)
    tolerate = changes.pop("tolerate", timedelta(0))
    fields: dict[str, object] = {
        "name": "gpu",
        "faults": (
            Fault("xid", MATCH, tuple(ladder), tolerate=tolerate, on_exhausted=on_exhausted),  # type: ignore[arg-type]
        ),
        "recovery": Recovery(healthy_for=10 * MIN),
    }
    fields.update(changes)
    return Policy(**fields)  # type: ignore[arg-type]


def states(harness: Harness, node: str) -> list[RemediationState]:
    return sorted(
        (r.state for r in harness.cluster.remediations() if r.state.node == node),
        key=lambda s: s.started_at,
    )


async def test_a_failed_ladder_stays_failed_until_the_fault_clears_and_returns(
    harness: Harness,
) -> None:
    """Defect 2: `onExhausted: Fail` reopened the incident and rebooted the node every minute."""
    cluster, clock = harness.cluster, harness.clock
    drive = Driver(
        harness,
        policy(
            Step(Action.Cordon),
            Step(Action.Reboot, timeout=10 * MIN),
            on_exhausted=OnExhausted.Fail,
        ),
    )
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Reboot)
    cluster.finish_execution("gpu-0", Action.Reboot)
    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    assert drive.remediation("gpu-0").phase is Phase.Failed

    for _ in range(12):  # an hour of agent heartbeats, the fault still present
        clock.advance(5 * MIN)
        await drive.settle()

    assert len(states(harness, "gpu-0")) == 1, "no new incident while the fault is unchanged"
    assert len(cluster.executions("gpu-0")) == 1, "rebooted once"
    assert cluster.views()["gpu-0"].unschedulable, "left cordoned for a human"

    heal(harness, "gpu-0")
    await drive.settle(["gpu-0"])
    assert cluster.views()["gpu-0"].unschedulable, "still the human's node"
    fault(harness, "gpu-0")
    await drive.settle(["gpu-0"])
    assert len(states(harness, "gpu-0")) == 2, "a fault that cleared and returned is new"


async def test_a_fault_flapping_after_a_failure_is_one_failed_incident(harness: Harness) -> None:
    """Defects 2 and 15, found by the safety model: with `tolerate: 0` and `onExhausted: Fail`
    each flap (clear, return) opened and failed a new incident: 11 in an hour."""
    clock = harness.clock
    drive = Driver(harness, policy(Step(Action.Cordon), on_exhausted=OnExhausted.Fail))
    for _ in range(30):  # five minutes of 5 s on, 5 s off
        fault(harness, "gpu-2")
        await drive.settle(["gpu-2"])
        clock.advance(timedelta(seconds=5))
        heal(harness, "gpu-2")
        await drive.settle(["gpu-2"])
        clock.advance(timedelta(seconds=5))
    assert [s.phase for s in states(harness, "gpu-2")] == [Phase.Failed]

    clock.advance(10 * MIN)
    fault(harness, "gpu-2")
    await drive.settle(["gpu-2"])
    assert len(states(harness, "gpu-2")) == 2, "a return after healthyFor is a new fault"


async def test_a_new_machine_under_a_failed_nodes_name_gets_its_own_incident(
    harness: Harness,
) -> None:
    """Found by the safety model: a Failed incident's hold was keyed by the node's name, so a
    new machine that joined under the name and reported a fault got no incident."""
    cluster, clock = harness.cluster, harness.clock
    fail = policy(Step(Action.Cordon), on_exhausted=OnExhausted.Fail, startup_grace=MIN)
    drive = Driver(harness, fail)
    fault(harness, "gpu-1")
    await drive.run_until(lambda: drive.remediation("gpu-1").terminal)
    failed = drive.remediation("gpu-1")
    assert failed.phase is Phase.Failed
    assert failed.node_created_at == cluster.views()["gpu-1"].created_at
    clock.advance(MIN)
    await drive.settle()
    assert len(states(harness, "gpu-1")) == 1, "the same machine stays failed"

    cluster.delete_node("gpu-1")
    clock.advance(MIN)
    cluster.add_node("gpu-1")
    clock.advance(timedelta(seconds=5))
    fault(harness, "gpu-1")
    # After startupGrace, still within recovery.healthyFor (10m) of the failure.
    await drive.run_until(lambda: len(states(harness, "gpu-1")) == 2, within=2 * MIN)

    again = drive.remediation("gpu-1")
    assert again.name != failed.name, "a new machine is not the one a human was asked to see"
    assert again.node_created_at == cluster.views()["gpu-1"].created_at


async def test_a_reboot_keeps_a_failed_incidents_hold(harness: Harness) -> None:
    """A reboot changes the node's bootID, not the machine: the Failed hold stays."""
    cluster, clock = harness.cluster, harness.clock
    ladder = (Step(Action.Cordon), Step(Action.Reboot, timeout=10 * MIN))
    drive = Driver(harness, policy(*ladder, on_exhausted=OnExhausted.Fail))
    fault(harness, "gpu-1")
    await drive.run_until(lambda: drive.remediation("gpu-1").step is Action.Reboot)
    boot = cluster.views()["gpu-1"].boot_id
    cluster.finish_execution("gpu-1", Action.Reboot)
    await drive.run_until(lambda: drive.remediation("gpu-1").terminal)
    assert drive.remediation("gpu-1").phase is Phase.Failed
    assert cluster.views()["gpu-1"].boot_id != boot, "the node rebooted"
    clock.advance(MIN)
    await drive.settle(["gpu-1"])
    assert len(states(harness, "gpu-1")) == 1


async def test_deleting_the_failed_remediation_is_how_an_administrator_starts_again(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    drive = Driver(harness, policy(Step(Action.Cordon), on_exhausted=OnExhausted.Fail))
    fault(harness, "gpu-1")
    await drive.run_until(lambda: drive.remediation("gpu-1").terminal)
    failed = drive.remediation("gpu-1")
    assert failed.phase is Phase.Failed
    assert "Cordon ran" in failed.message
    cluster.delete_remediation(failed.name)
    harness.clock.advance(MIN)

    await drive.settle()

    (again,) = states(harness, "gpu-1")
    assert again.name != failed.name


async def test_a_name_taken_by_another_policy_is_not_retried_in_a_loop(harness: Harness) -> None:
    """Defect 3: colliding names made the engine spin on AlreadyExists (38 CPU-s in 47 s)."""
    cluster = harness.cluster
    ours = policy(Step(Action.Cordon), tolerate=2 * MIN)
    fault(harness, "gpu-2")
    probe = await harness.reconcile(ours)
    (planned,) = probe.written
    cluster.delete_remediation(planned.name)
    squatter = replace(planned, policy="someone-else", node="gpu-9")
    await cluster.create_remediation(squatter)

    creates: list[None] = []
    cluster.inject("create_remediation", lambda: creates.append(None), times=100)

    result = await harness.reconcile(ours)

    assert len(creates) == 1, "one attempt per reconcile, not a re-plan loop"
    assert result.next_wake == harness.clock.now + timedelta(seconds=30)
    assert any("taken by a Remediation of policy someone-else" in e for e in result.errors)
    assert states(harness, "gpu-2") == []


async def test_replace_on_a_node_without_nodeclaim_fails_at_once_with_the_reason(
    harness: Harness,
) -> None:
    """Defect 12: the refusal was swallowed and Replace waited out its whole timeout."""
    cluster = harness.cluster
    cluster.add_node(
        "bare", labels={"pool": "a"}, nodeclaim=False, created_at=harness.clock.now - 60 * MIN
    )
    drive = Driver(harness, policy(Step(Action.Cordon), Step(Action.Replace, timeout=60 * MIN)))
    fault(harness, "bare")
    started = harness.clock.now

    await drive.run_until(
        lambda: any(
            s.action is Action.Replace and s.outcome is not None
            for s in drive.remediation("bare").steps
        )
    )

    assert harness.clock.now - started < MIN, "refused at once, not at the timeout"
    state = drive.remediation("bare")
    record = next(s for s in state.steps if s.action is Action.Replace)
    assert record.outcome is Outcome.PermanentFailure
    assert "has no NodeClaim" in record.message
    assert cluster.has_node("bare")
    assert state.reason is not Reason.NodeReplaced
    events = cluster.events_for("Remediation", state.name)
    assert any(e.reason is Reason.StepFailed and "NodeClaim" in e.message for e in events)


def drain_policy(on_pdb_blocked: OnPDBBlocked = OnPDBBlocked.Wait, **changes: object) -> Policy:
    return policy(
        Step(Action.Cordon),
        Step(
            Action.Drain,
            timeout=10 * MIN,
            on_pdb_blocked=on_pdb_blocked,
            on_timeout=changes.pop("on_timeout", OnTimeout.Escalate),  # type: ignore[arg-type]
        ),
        Step(Action.GPUReset, timeout=10 * MIN),
        **changes,
    )


async def test_a_drain_blocked_by_a_pdb_waits_past_its_timeout_by_default(
    harness: Harness,
) -> None:
    """Defect 6: the default `onTimeout: Escalate` bypassed the PDB (GPUReset ran with the
    protected pod on the node)."""
    cluster, clock = harness.cluster, harness.clock
    lifts = clock.now + 47 * MIN
    cluster.add_pod("gpu-0", "trainer-0", protected_until=lifts, pdb="training/trainer-pdb")
    drive = Driver(harness, drain_policy())
    fault(harness, "gpu-0")

    await drive.run_until(lambda: drive.remediation("gpu-0").phase is Phase.Blocked)
    blocked = drive.remediation("gpu-0")
    assert (blocked.step, blocked.reason) == (Action.Drain, Reason.DrainBlockedByPDB)
    assert "training/trainer-pdb" in blocked.message
    assert "default/trainer-0" in blocked.message
    assert not cluster.executions("gpu-0"), "no GPUReset while the PDB protects the pod"

    await drive.run_until(
        lambda: any(
            s.action is Action.Drain and s.outcome is Outcome.Succeeded
            for s in drive.remediation("gpu-0").steps
        )
    )
    assert clock.now - lifts <= timedelta(seconds=10), "evictions retried within seconds"
    assert [p.name for p in cluster.pods("gpu-0")] == []
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.GPUReset)
    events = [
        e
        for e in cluster.events_for("Remediation", blocked.name)
        if e.reason is Reason.DrainBlockedByPDB
    ]
    assert sum(e.count for e in events) >= 4, "Evented again every 10 minutes of the block"


async def test_escalating_past_a_pdb_is_explicit_and_names_the_budget_and_pods(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    cluster.add_pod(
        "gpu-0", "trainer-0", protected_until=clock.now + 5 * 60 * MIN, pdb="training/pdb"
    )
    drive = Driver(harness, drain_policy(OnPDBBlocked.Escalate))
    fault(harness, "gpu-0")

    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.GPUReset)

    state = drive.remediation("gpu-0")
    drain = next(s for s in state.steps if s.action is Action.Drain)
    assert drain.reason is Reason.StepTimedOut
    assert "training/pdb" in drain.message
    assert "default/trainer-0" in drain.message
    assert [p.name for p in cluster.pods("gpu-0")] == ["trainer-0"]
    timed_out = [
        e for e in cluster.events_for("Remediation", state.name) if e.reason is Reason.StepTimedOut
    ]
    assert timed_out
    assert "training/pdb" in timed_out[0].message


async def test_force_still_deletes_the_protected_pods(harness: Harness) -> None:
    cluster, clock = harness.cluster, harness.clock
    cluster.add_pod("gpu-0", "trainer-0", protected_until=clock.now + 5 * 60 * MIN)
    drive = Driver(harness, drain_policy(on_timeout=OnTimeout.Force))
    fault(harness, "gpu-0")

    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.GPUReset)

    assert [p.name for p in cluster.pods("gpu-0")] == []
    state = drive.remediation("gpu-0")
    drains = [(s.attempt, s.reason) for s in state.steps if s.action is Action.Drain]
    assert drains == [(1, Reason.StepTimedOut), (2, Reason.StepSucceeded)]
    events = cluster.events_for("Remediation", state.name)
    forced = [e for e in events if e.reason is Reason.DrainForced]
    assert forced
    assert "default/trainer-0" in forced[0].message, "the status and Event name the pod"
    assert "default/pdb" in forced[0].message, "and its PodDisruptionBudget"


async def test_a_forced_drain_resumed_after_a_flap_names_the_pods_and_budget_it_takes(
    harness: Harness,
) -> None:
    """Defects 6, 15 and 17, found by the safety model: the fault cleared during the drain and
    came back after its timeout; the drain resumed and was forced in the same plan, before
    anyone looked at its pods, and said only "deleting the remaining pods"."""
    cluster, clock = harness.cluster, harness.clock
    cluster.add_pod("gpu-0", "trainer-0", protected_until=clock.now + 5 * 60 * MIN)
    drive = Driver(harness, drain_policy(on_timeout=OnTimeout.Force))
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Drain)
    clock.advance(9 * MIN)
    heal(harness, "gpu-0")
    await drive.settle(["gpu-0"])
    assert drive.remediation("gpu-0").step_outcome is Outcome.Cancelled, "in probation"
    clock.advance(2 * MIN)  # past the drain's timeout, within recovery.healthyFor
    fault(harness, "gpu-0")

    await drive.run_until(lambda: not cluster.pods("gpu-0"))

    state = drive.remediation("gpu-0")
    events = cluster.events_for("Remediation", state.name)
    forced = [e.message for e in events if e.reason is Reason.DrainForced]
    assert forced
    assert all("default/trainer-0" in m for m in forced), "the Event (and status) name the pod"
    assert all("default/pdb" in m for m in forced), "and its PodDisruptionBudget"


async def test_an_edited_ladder_is_followed_by_action_and_never_repeats_a_step(
    harness: Harness,
) -> None:
    """Defect 10: inserting a rung before the current one repeated a finished Reboot."""
    cluster = harness.cluster
    before = policy(
        Step(Action.Cordon),
        Step(Action.Reboot, timeout=30 * MIN, escalate_after=10 * MIN),
        Step(Action.Replace, timeout=60 * MIN),
    )
    drive = Driver(harness, before)
    fault(harness, "gpu-3")
    await drive.run_until(lambda: drive.remediation("gpu-3").step is Action.Reboot)
    cluster.finish_execution("gpu-3", Action.Reboot)
    await drive.run_until(lambda: drive.remediation("gpu-3").phase is Phase.Waiting)

    (fault_,) = before.faults
    inserted = (fault_.ladder[0], Step(Action.GPUReset, timeout=10 * MIN), *fault_.ladder[1:])
    drive.policy = replace(before, generation=2, faults=(replace(fault_, ladder=inserted),))
    await drive.run_until(lambda: drive.remediation("gpu-3").step is Action.Replace)

    actions = [s.action for s in drive.remediation("gpu-3").steps]
    assert actions == [Action.Cordon, Action.Reboot, Action.Replace]
    assert [e.action for e in cluster.executions("gpu-3")] == [Action.Reboot]


async def test_deleting_a_policy_switched_to_dry_run_gives_the_node_back(
    harness: Harness,
) -> None:
    """Defect 11: the release was held back by the policy's new mode."""
    cluster = harness.cluster
    enforce = policy(Step(Action.Cordon), Step(Action.Drain, timeout=30 * MIN))
    drive = Driver(harness, enforce)
    cluster.add_pod("gpu-1", "trainer", protected_until=harness.clock.now + 600 * MIN)
    fault(harness, "gpu-1")
    await drive.run_until(lambda: drive.remediation("gpu-1").step is Action.Drain)
    view = cluster.views()["gpu-1"]
    assert view.unschedulable
    assert view.quarantined

    drive.policy = replace(enforce, mode=Mode.DryRun, generation=2)
    await drive.settle()
    drive.policy = replace(drive.policy, deleted=True)
    await drive.settle()

    state = drive.remediation("gpu-1")
    assert (state.phase, state.reason) == (Phase.Cancelled, Reason.PolicyDeleted)
    view = cluster.views()["gpu-1"]
    assert not view.unschedulable
    assert not view.quarantined
    assert DO_NOT_DISRUPT not in cluster.node("gpu-1")["metadata"].get("annotations", {})


async def test_an_enforce_incident_under_a_policy_now_in_dry_run_still_gives_back_its_node(
    harness: Harness,
) -> None:
    """Defect 11: nothing new starts under DryRun, but what the incident did is undone."""
    cluster = harness.cluster
    enforce = policy(Step(Action.Cordon, escalate_after=5 * MIN), Step(Action.Drain))
    drive = Driver(harness, enforce)
    fault(harness, "gpu-2")
    await drive.run_until(lambda: drive.remediation("gpu-2").phase is Phase.Waiting)
    drive.policy = replace(enforce, mode=Mode.DryRun, generation=2)

    await drive.run_until(lambda: drive.remediation("gpu-2").reason is Reason.DryRun)
    assert drive.remediation("gpu-2").phase is Phase.Blocked
    assert not any(s.action is Action.Drain for s in drive.remediation("gpu-2").steps)
    heal(harness, "gpu-2")
    await drive.run_until(lambda: drive.remediation("gpu-2").terminal)

    assert drive.remediation("gpu-2").reason is Reason.Recovered
    view = cluster.views()["gpu-2"]
    assert not view.unschedulable
    assert not view.quarantined


async def test_a_small_pool_picks_up_its_next_faulty_node_when_the_first_recovers(
    harness: Harness,
) -> None:
    """Defect 13: the next faulty node of the group sat idle, schedulable and faulty."""
    cluster = harness.cluster
    breaker = CircuitBreaker("20%", min_nodes=5, cooldown=15 * MIN)
    drive = Driver(harness, policy(Step(Action.Cordon), circuit_breaker=breaker))
    fault(harness, "gpu-0")
    fault(harness, "gpu-1")
    await drive.settle()
    assert {s.node for r in cluster.remediations() for s in [r.state]} == {"gpu-0"}
    assert not cluster.views()["gpu-1"].unschedulable

    heal(harness, "gpu-0")
    await drive.settle(["gpu-0"])
    harness.clock.advance(10 * MIN)
    await drive.settle(["gpu-0"])  # only gpu-0's own wake: its probation ends

    assert drive.remediation("gpu-0").phase is Phase.Succeeded
    assert cluster.views()["gpu-1"].unschedulable, "picked up in the same reconcile"


async def test_a_flapping_fault_is_one_incident_with_bounded_steps_and_kept_clocks(
    harness: Harness,
) -> None:
    """Defect 15: a fault present 2 s, absent 2 s under tolerate 10 s never cordoned and made
    one Remediation per flap; after the cordon each flap restarted the drain."""
    cluster, clock = harness.cluster, harness.clock
    cluster.add_pod("gpu-2", "trainer", protected_until=clock.now + 600 * MIN)
    drive = Driver(
        harness,
        policy(
            Step(Action.Cordon),
            Step(Action.Drain, timeout=5 * MIN, on_pdb_blocked=OnPDBBlocked.Escalate),
            tolerate=timedelta(seconds=10),
        ),
    )
    for _ in range(150):  # ten minutes of 2 s on, 2 s off
        fault(harness, "gpu-2")
        await drive.settle(["gpu-2"])
        clock.advance(timedelta(seconds=2))
        heal(harness, "gpu-2")
        await drive.settle(["gpu-2"])
        clock.advance(timedelta(seconds=2))

    remediations = states(harness, "gpu-2")
    assert len(remediations) == 1, "one incident, not one per flap"
    state = remediations[0]
    assert cluster.views()["gpu-2"].unschedulable, "treated as persistent: cordoned"
    assert len(state.steps) <= 4, "steps[] does not grow with the flaps"
    drain = [s for s in state.steps if s.action is Action.Drain]
    assert drain
    assert drain[0].outcome is not None, "the drain's timeout ran on across the flaps"


async def test_messages_say_what_happened(harness: Harness) -> None:
    """Defect 17: finished records kept "Escalating to ..."; DryRun read as if done; the
    approval message did not name the annotation."""
    cluster = harness.cluster
    ladder = (Step(Action.Cordon), Step(Action.Drain, timeout=30 * MIN))
    drive = Driver(harness, policy(*ladder, require_approval=frozenset({Action.Drain})))
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.AwaitingApproval)
    waiting = drive.remediation("gpu-0")
    assert APPROVE_ANNOTATION in waiting.message
    assert waiting.name in waiting.message
    cluster.annotate_remediation(waiting.name, APPROVE_ANNOTATION, "Drain")
    await drive.run_until(
        lambda: (
            drive.remediation("gpu-0").terminal is False
            and any(
                s.action is Action.Drain and s.outcome is not None
                for s in drive.remediation("gpu-0").steps
            )
        )
    )
    for record in drive.remediation("gpu-0").steps:
        if record.outcome is not None:
            assert not record.message.startswith("Escalating to"), record

    dry = Driver(harness, replace(policy(*ladder), name="dry", mode=Mode.DryRun))
    fault(harness, "gpu-3")
    await dry.settle()
    for event in cluster.events_for("Node", "gpu-3"):
        if event.reason is Reason.DryRun:
            assert "would" in event.message
