"""A crash between recording a step and carrying it out neither loses nor repeats the step.

The cordon is the exception to "record, then act" (docs/decisions.md D14): it is written
first, with the node's own mark of whose cordon it is, and a crash before its record is
repaired from that mark."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import cast

import pytest

from remediation_operator.domain.effects import (
    Announce,
    Cordon,
    ProtectFromConsolidation,
    Release,
    RunExecutor,
)
from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    OnExhausted,
    Policy,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from remediation_operator.engine.ports import Transient
from remediation_operator.engine.reconciler import IMMEDIATE_RETRIES
from remediation_operator.sim.memory_cluster import (
    QUARANTINE,
    QUARANTINED_BY,
    UNCORDON_ON_RELEASE,
    MemoryCluster,
)
from tests.engine.conftest import (
    Driver,
    Harness,
    ScriptedPlanner,
    plan_of,
    simple_policy,
    state,
)
from tests.engine.test_ladder import fault, heal


class ProcessKilledError(Exception):
    """Stands for the operator process dying at that instant."""


FAST = Fault(
    name="gpu-xid-reset",
    match=(ConditionMatch("AcceleratedHardwareReady", "False", r"NvidiaXID(46|62|64|95)Error"),),
    ladder=(Step(Action.Cordon, escalate_after=timedelta(hours=1)),),
    on_exhausted=OnExhausted.Hold,
)
"""Cordon at once (no tolerance window): the cordon is the first write of the incident."""


def _annotations(cluster: MemoryCluster, node: str) -> Mapping[str, str]:
    return cast(Mapping[str, str], cluster.node(node)["metadata"]["annotations"])


async def _crash_between_cordon_and_record(harness: Harness, policy: Policy) -> None:
    fault(harness, "gpu-0")
    harness.cluster.inject("create_remediation", ProcessKilledError())
    with pytest.raises(ProcessKilledError):
        await harness.reconcile(policy)
    assert harness.cluster.remediations("gpu") == [], "the crash came before the record"
    assert harness.cluster.views()["gpu-0"].unschedulable, "the cordon came first"
    harness.cluster.restart_operator()


async def test_the_cordon_is_written_before_the_remediation_that_records_it(
    harness: Harness,
) -> None:
    policy = simple_policy(faults=(FAST,))
    fault(harness, "gpu-0")
    order: list[str] = []
    harness.cluster.inject("cordon", lambda: order.append("cordon"))
    harness.cluster.inject("create_remediation", lambda: order.append("create_remediation"))

    await harness.reconcile(policy)

    assert order == ["cordon", "create_remediation"]
    annotations = _annotations(harness.cluster, "gpu-0")
    assert annotations[QUARANTINED_BY] == "gpu"
    assert annotations[UNCORDON_ON_RELEASE] == "true"


async def test_after_a_crash_between_cordon_and_record_the_cordon_is_known_as_ours(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy(faults=(FAST,))
    await _crash_between_cordon_and_record(harness, policy)

    harness.clock.advance(timedelta(seconds=5))
    await harness.reconcile(policy)

    (record,) = cluster.remediations("gpu")
    assert record.state.step is Action.Cordon
    assert record.state.cordoned_by_us, "the node's mark says the cordon was ours"
    assert Reason.AlreadyCordoned not in harness.recorder.decisions
    assert cluster.calls[("cordon", "gpu-0")] == 1, "the node was cordoned once"

    heal(harness, "gpu-0")
    drive = Driver(harness, policy)
    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    assert drive.remediation("gpu-0").reason is Reason.Recovered
    view = cluster.views()["gpu-0"]
    assert not view.unschedulable, "our cordon is undone at the end"
    assert not view.quarantined
    assert QUARANTINED_BY not in _annotations(cluster, "gpu-0")
    assert UNCORDON_ON_RELEASE not in _annotations(cluster, "gpu-0")


async def test_an_unrecorded_cordon_is_released_once_the_fault_is_gone(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy(faults=(FAST,))
    await _crash_between_cordon_and_record(harness, policy)
    heal(harness, "gpu-0")

    await harness.reconcile(policy)

    view = cluster.views()["gpu-0"]
    assert not view.unschedulable
    assert not view.quarantined
    assert QUARANTINED_BY not in _annotations(cluster, "gpu-0")
    assert cluster.remediations("gpu") == []
    (released,) = [
        e for e in harness.recorder.explanations if e.reason is Reason.UnrecordedCordonReleased
    ]
    assert released.node == "gpu-0"
    assert "uncordoned" in released.message


async def test_an_unrecorded_cordon_of_an_admin_cordoned_node_leaves_it_cordoned(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy(faults=(FAST,))
    cluster.set_unschedulable("gpu-0", True)  # an administrator's cordon, before the fault
    await _crash_between_cordon_and_record(harness, policy)
    assert UNCORDON_ON_RELEASE not in _annotations(cluster, "gpu-0")
    heal(harness, "gpu-0")

    await harness.reconcile(policy)

    view = cluster.views()["gpu-0"]
    assert view.unschedulable, "the administrator's cordon stays"
    assert not view.quarantined, "our taint is gone"
    assert QUARANTINED_BY not in _annotations(cluster, "gpu-0")


async def test_another_policys_unrecorded_cordon_is_not_ours_to_release(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    await _crash_between_cordon_and_record(harness, simple_policy(faults=(FAST,)))
    heal(harness, "gpu-0")

    await harness.reconcile(simple_policy(name="other", faults=(FAST,)))

    assert cluster.views()["gpu-0"].quarantined
    assert cluster.views()["gpu-0"].unschedulable


async def test_a_recorded_cordon_that_failed_is_carried_out_exactly_once(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    started = state("gpu-0", step=Action.Cordon, phase=Phase.Running, reason=Reason.StepStarted)
    announce = Announce("gpu-0", started.name, Reason.StepStarted, "Cordon started.")
    cluster.inject("cordon", Transient("API unavailable"), times=IMMEDIATE_RETRIES + 1)

    result = await harness.reconcile(
        policy, plan=ScriptedPlanner([plan_of(started, Cordon("gpu-0"), announce)])
    )

    assert result.errors, "the failed cordon is reported"
    (record,) = cluster.remediations("gpu")
    assert record.state.step is Action.Cordon
    assert record.state.phase is Phase.Running
    assert not cluster.views()["gpu-0"].unschedulable

    harness.clock.advance(timedelta(seconds=5))
    result = await harness.reconcile(policy, plan=ScriptedPlanner())

    node = cluster.node("gpu-0")
    assert node["spec"]["unschedulable"] is True
    assert {"key": QUARANTINE, "value": "gpu-xid-reset", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    assert [a.effect for a in result.applied if a.resumed] == [Cordon("gpu-0")]
    assert cluster.calls[("cordon", "gpu-0")] == 1

    harness.clock.advance(timedelta(seconds=5))
    await harness.reconcile(policy, plan=ScriptedPlanner())
    assert cluster.calls[("cordon", "gpu-0")] == 1
    assert cluster.noops[("cordon", "gpu-0")] == 0
    (record,) = cluster.remediations("gpu")
    assert len(record.state.steps) == 1, "no step was repeated"


async def test_a_lost_executor_start_is_resumed_with_the_same_attempt(harness: Harness) -> None:
    cluster, policy = harness.cluster, simple_policy()
    running = state("gpu-0", step=Action.GPUReset, phase=Phase.Running, attempt=2)
    effect = RunExecutor("gpu-0", running.name, Action.GPUReset, 2)
    cluster.inject("run_executor", ProcessKilledError())

    with pytest.raises(ProcessKilledError):
        await harness.reconcile(
            policy,
            plan=ScriptedPlanner(
                [plan_of(running, ProtectFromConsolidation("gpu-0", True), effect)]
            ),
        )
    assert cluster.executions("gpu-0") == []

    planner = ScriptedPlanner()
    await harness.reconcile(policy, plan=planner)
    await harness.reconcile(policy, plan=planner)

    (execution,) = cluster.executions("gpu-0")
    assert (execution.remediation, execution.action, execution.attempt) == (
        running.name,
        Action.GPUReset,
        2,
    )
    first, second = (s.observations["gpu-0"] for s in planner.seen)
    assert first.progress is Progress.Absent, "the planner is told the truth it observed"
    assert second.progress is Progress.InProgress
    assert cluster.node("gpu-0")["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


async def test_resume_is_dropped_when_the_plan_moves_past_the_recorded_step(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    reset = state("gpu-0", step=Action.GPUReset, phase=Phase.Running)
    await cluster.create_remediation(reset)
    reboot = state("gpu-0", step=Action.Reboot, phase=Phase.Running, reason=Reason.StepTimedOut)
    escalate = plan_of(reboot, RunExecutor("gpu-0", reboot.name, Action.Reboot, 1))

    await harness.reconcile(policy, plan=ScriptedPlanner([escalate]))

    assert [e.action for e in cluster.executions("gpu-0")] == [Action.Reboot]


async def test_clean_up_runs_before_the_state_that_records_it(harness: Harness) -> None:
    cluster, policy = harness.cluster, simple_policy()
    await cluster.cordon("gpu-0", "gpu-xid-reset", "gpu-default")
    recovering = state("gpu-0", step=Action.Cordon, phase=Phase.Recovering, cordoned_by_us=True)
    await cluster.create_remediation(recovering)
    done = state(
        "gpu-0",
        step=Action.Cordon,
        phase=Phase.Succeeded,
        reason=Reason.Recovered,
        cordoned_by_us=True,
        finished_at=harness.clock.now,
    )
    finish = plan_of(
        Release("gpu-0", uncordon=True), ProtectFromConsolidation("gpu-0", False), done
    )
    cluster.inject("update_remediation", ProcessKilledError())

    with pytest.raises(ProcessKilledError):
        await harness.reconcile(policy, plan=ScriptedPlanner([finish]))

    view = cluster.views()["gpu-0"]
    assert not view.unschedulable, "the node was released first"
    assert not view.quarantined
    (record,) = cluster.remediations("gpu")
    assert record.state.phase is Phase.Recovering, "the incident is not closed before that"

    await harness.reconcile(policy, plan=ScriptedPlanner([finish]))
    (record,) = cluster.remediations("gpu")
    assert record.state.phase is Phase.Succeeded
    assert cluster.calls[("release", "gpu-0")] == 1


async def test_an_uncordon_after_an_unrecorded_cordon_is_the_administrators_to_keep(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy(faults=(FAST,))
    await _crash_between_cordon_and_record(harness, policy)
    cluster.set_unschedulable("gpu-0", False)  # `kubectl uncordon`, fault still there

    await harness.reconcile(policy)
    harness.clock.advance(timedelta(minutes=1))
    await harness.reconcile(policy)

    (record,) = cluster.remediations("gpu")
    assert (record.state.phase, record.state.reason) == (Phase.Cancelled, Reason.AdminUncordoned)
    view = cluster.views()["gpu-0"]
    assert not view.unschedulable, "not cordoned again"
    assert not view.quarantined
    assert cluster.calls[("cordon", "gpu-0")] == 1
