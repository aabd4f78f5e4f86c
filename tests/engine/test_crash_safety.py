"""A crash between recording a step and carrying it out neither loses nor repeats the step."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediation_operator.domain.effects import (
    Announce,
    Cordon,
    ProtectFromConsolidation,
    Release,
    RunExecutor,
)
from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from remediation_operator.sim.memory_cluster import QUARANTINE
from tests.engine.conftest import Harness, ScriptedPlanner, plan_of, simple_policy, state


class ProcessKilledError(Exception):
    """Stands for the operator process dying at that instant."""


async def test_a_recorded_cordon_lost_in_a_crash_is_carried_out_exactly_once(
    harness: Harness,
) -> None:
    cluster, policy = harness.cluster, simple_policy()
    started = state("gpu-0", step=Action.Cordon, phase=Phase.Running, reason=Reason.StepStarted)
    announce = Announce("gpu-0", started.name, Reason.StepStarted, "Cordon started.")
    cluster.inject("cordon", ProcessKilledError())

    with pytest.raises(ProcessKilledError):
        await harness.reconcile(
            policy, plan=ScriptedPlanner([plan_of(started, Cordon("gpu-0"), announce)])
        )

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
    await cluster.cordon("gpu-0", "gpu-xid-reset")
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
