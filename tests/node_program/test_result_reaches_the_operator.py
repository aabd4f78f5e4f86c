"""The node program's result reaches the Remediation (issue 22): the operator reads the
executor pod's termination message, so the step's record and Event say what the program found
(which check failed on which GPU), and a PermanentFailure climbs at once."""

from __future__ import annotations

from typing import Any, cast

from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import Action, ActionExecutor, Executor
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.executors import Executors, job_name, node_said
from remediation_operator.node.result import Check, Outcome, Result

NAMESPACE = "remediation-system"


class JobAndPods:
    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        self.job, self.pods = job, pods

    async def get(self, path: str, **query: str) -> dict[str, Any]:
        return {"items": self.pods} if path.endswith("/pods") else self.job


def ended(message: str) -> dict[str, Any]:
    terminated = {"exitCode": 2, "reason": "Error", "message": message}
    return {
        "metadata": {"name": "p", "creationTimestamp": "2026-12-02T01:00:00Z"},
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]},
    }


async def status(condition: str, pods: list[dict[str, Any]]) -> Any:
    name = job_name("rem-1", Action.GPUReset, 1)
    job = {
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": condition, "status": "True", "reason": "BackoffLimitExceeded"}]
        },
    }
    executors = Executors(cast(Client, JobAndPods(job, pods)), NAMESPACE, {})
    return await executors.status(
        "gpu-1", "rem-1", Action.GPUReset, 1, ActionExecutor(executor=Executor.Job)
    )


def program_result(outcome: Outcome) -> str:
    checks = (Check("row-remap-failure", "GPU-1", False, "failed"), Check("gpu-count", "", True))
    return Result(
        "reset", outcome, "ResetDidNotHeal", "after the reset, row-remap-failure failed", {}, checks
    ).termination_message()


async def test_a_permanent_result_is_a_permanent_failure_naming_check_and_gpu() -> None:
    found = await status("Failed", [ended(program_result(Outcome.PermanentFailure))])
    assert (found.progress, found.permanent) == (Progress.Failed, True)
    assert "ResetDidNotHeal: after the reset" in found.message
    assert "(failed: row-remap-failure on GPU-1)" in found.message


async def test_a_transient_result_may_be_retried_and_other_images_are_quoted() -> None:
    found = await status("Failed", [ended(program_result(Outcome.Failed))])
    assert (found.progress, found.permanent) == (Progress.Failed, False)
    found = await status("Failed", [ended("nccl all-reduce: 41 GB/s < 300 GB/s")])
    assert found.message.endswith("failed: nccl all-reduce: 41 GB/s < 300 GB/s")
    found = await status("Failed", [])
    assert found.message.endswith("failed: BackoffLimitExceeded"), "no pod: the Job's reason"


def test_a_long_message_is_cut() -> None:
    said = node_said("x" * 5000)
    assert said is not None
    assert len(said.message) == 600


async def test_a_validation_that_could_not_check_anything_is_no_verdict() -> None:
    notrun = Result("validate", Outcome.NotRun, "GpuStackNotReady", "the GPU stack was not ready")
    found = await status("Failed", [ended(notrun.termination_message())])
    assert (found.progress, found.not_run) == (Progress.Failed, True)
    assert "GpuStackNotReady" in found.message
