"""Evidence from before a disruptive step never decides the next one, also when the operator
restarts in between (issue 12, defect 4).

A restarted operator sees every condition for the first time at start-up, so its own
observation times cannot tell a pre-reboot condition from a new report. The Remediation
records the condition as it was when the step ended (remote heartbeat and transition), and
the next disruptive step needs those remote values to have changed since."""

from __future__ import annotations

from datetime import timedelta

from remediation_operator.domain.policy import Action, Fault, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from tests.engine.conftest import Driver, Harness
from tests.engine.test_ladder import RESET_GPU, fault, policy

REBOOT_THEN_REPLACE = Fault(
    name=RESET_GPU.name,
    match=RESET_GPU.match,
    tolerate=timedelta(0),
    ladder=(
        Step(Action.Cordon, escalate_after=timedelta(0)),
        Step(Action.Reboot, timeout=timedelta(minutes=30), escalate_after=timedelta(minutes=10)),
        Step(Action.Replace, timeout=timedelta(minutes=60)),
    ),
)


async def _rebooted_with_a_silent_agent(harness: Harness) -> Driver:
    """The node rebooted (Reboot succeeded) and its agent has not reported since."""
    cluster = harness.cluster
    drive = Driver(harness, policy(REBOOT_THEN_REPLACE))
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Reboot)
    cluster.agents_report_after_reboot = False
    cluster.silent.add("gpu-0")
    cluster.finish_execution("gpu-0", Action.Reboot)
    await drive.settle(["gpu-0"])
    state = drive.remediation("gpu-0")
    assert (state.step, state.step_finished_at is not None) == (Action.Reboot, True)
    assert state.evidence_at_step_end is not None
    return drive


async def test_a_restart_after_a_reboot_does_not_make_pre_reboot_evidence_fresh(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    drive = await _rebooted_with_a_silent_agent(harness)

    clock.advance(timedelta(minutes=9))
    cluster.restart_operator()  # every condition is "first seen" now, after the reboot
    clock.advance(timedelta(minutes=2))  # escalateAfter of the Reboot has passed
    await drive.settle()

    state = drive.remediation("gpu-0")
    assert state.step is Action.Reboot, "Replace decided on evidence from before the reboot"
    assert (state.phase, state.reason) == (Phase.Blocked, Reason.EvidenceInsufficient)
    assert "not been reported again since Reboot ended" in state.message
    assert cluster.replacement_requested("gpu-0") is None

    # The agent reports the fault again (a new heartbeat): now it may decide the replacement.
    cluster.silent.discard("gpu-0")
    clock.advance(timedelta(minutes=1))
    fault(harness, "gpu-0")
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Replace)


async def test_without_a_restart_a_fresh_report_after_the_reboot_escalates(
    harness: Harness,
) -> None:
    """The recorded condition holds nothing back once the agent has reported again."""
    cluster, clock = harness.cluster, harness.clock
    drive = await _rebooted_with_a_silent_agent(harness)
    clock.advance(timedelta(minutes=1))
    cluster.silent.discard("gpu-0")
    fault(harness, "gpu-0")
    clock.advance(timedelta(minutes=10))
    await drive.run_until(lambda: drive.remediation("gpu-0").step is Action.Replace)
    assert drive.remediation("gpu-0").reason is not Reason.EvidenceInsufficient
