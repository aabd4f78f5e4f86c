"""A Reboot is asked for once per boot (issue 22, D70): a reboot Job whose pod ended with the
shutdown it asked for reports a failure although the node rebooted. Another attempt must not
reboot the node again: the operator takes the node's new bootID as the reboot's success, and a
retry carries the bootID of the step's first start, the one the reboot replaces (the node
program reboots only while the node still has it)."""

from __future__ import annotations

from dataclasses import replace

from remediation_operator.domain.effects import Announce, RunExecutor
from remediation_operator.domain.fleet import Condition
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome
from tests.domain.fake_cluster import FakeCluster, node, policy, run
from tests.domain.test_ladder_table import REBOOTING


def reboot_runs(cluster: FakeCluster) -> list[tuple[int, str]]:
    assert cluster.last is not None
    return [
        (e.attempt, e.boot_id)
        for e in cluster.last.effects
        if isinstance(e, RunExecutor) and e.action is Action.Reboot
    ]


def not_ready(cluster: FakeCluster, boot_id: str) -> None:
    view = cluster.nodes["gpu-1"]
    conditions = tuple(
        replace(c, status="Unknown") if c.type == "Ready" else c for c in view.conditions
    )
    cluster.edit("gpu-1", boot_id=boot_id, conditions=conditions)


def back(cluster: FakeCluster) -> None:
    view = cluster.nodes["gpu-1"]
    conditions = tuple(
        Condition("Ready", "True") if c.type == "Ready" else c for c in view.conditions
    )
    cluster.edit("gpu-1", conditions=conditions)


def test_a_node_back_with_a_new_boot_id_after_a_failed_job_is_not_rebooted_again() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, REBOOTING + " fail plan")
    assert cluster.active["gpu-1"].steps[-1].outcome is Outcome.TransientFailure
    cluster.edit("gpu-1", boot_id="boot-2")

    run(cluster, "+5m plan")

    assert reboot_runs(cluster) == [], "no second reboot Job"
    state = cluster.active["gpu-1"]
    assert (state.step, state.step_outcome) == (Action.Reboot, Outcome.Succeeded)
    (said,) = [
        e.message
        for e in cluster.last.effects  # type: ignore[union-attr]
        if isinstance(e, Announce) and e.reason is Reason.StepSucceeded
    ]
    assert "new bootID although attempt 1's Job failed" in said
    assert "not rebooting it again" in said


def test_a_retry_while_the_node_is_still_down_expects_the_first_starts_boot_id() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, REBOOTING + " fail plan")
    # The node is rebooting: the kubelet reports the new bootID before the node is Ready.
    not_ready(cluster, "boot-2")

    run(cluster, "+5m plan")

    assert reboot_runs(cluster) == [(2, "boot-1")], "the Job reboots only a node still on boot-1"
    back(cluster)
    run(cluster, "plan")
    state = cluster.active["gpu-1"]
    assert (state.step, state.step_outcome) == (Action.Reboot, Outcome.Succeeded)
