"""An executor Job whose pod the cluster refuses (Pod Security, a missing RuntimeClass) fails
the step at once with the API's reason, instead of being waited out until the step's timeout.

Real: `k8s.executors.Executors` and the shapes kube-apiserver returns (a Job with no pods and
the Job controller's `FailedCreate` Event). Faked: the API client, by a hand-written one that
serves those objects.
"""

from __future__ import annotations

from typing import Any, cast

from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import Action, ActionExecutor, Executor
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.executors import Executors, job_name

NAMESPACE = "remediation-system"
REFUSAL = (
    'Error creating: pods "rem-1-gpureset-1-x" is forbidden: violates PodSecurity'
    ' "restricted:latest": privileged (container "gpu-reset" must not set'
    " securityContext.privileged=true)"
)


class FakeClient:
    def __init__(self, job: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.job, self.events = job, events
        self.reads: list[str] = []

    async def get(self, path: str, **query: str) -> dict[str, Any]:
        self.reads.append(path)
        if path.endswith("/events"):
            return {"items": self.events}
        return self.job


def event(name: str, reason: str, message: str) -> dict[str, Any]:
    return {"involvedObject": {"kind": "Job", "name": name}, "reason": reason, "message": message}


async def status_of(job_status: dict[str, Any], events: list[dict[str, Any]]) -> Any:
    name = job_name("rem-1", Action.GPUReset, 1)
    client = FakeClient({"metadata": {"name": name}, "status": job_status}, events)
    executors = Executors(cast(Client, client), NAMESPACE, {})
    executor = ActionExecutor(executor=Executor.Job)
    return await executors.status("gpu-1", "rem-1", Action.GPUReset, 1, executor), client


async def test_a_refused_pod_fails_the_step_permanently_with_the_reason() -> None:
    name = job_name("rem-1", Action.GPUReset, 1)
    status, _ = await status_of({}, [event(name, "FailedCreate", REFUSAL)])
    assert status.progress is Progress.Failed
    assert status.permanent
    assert "violates PodSecurity" in status.message
    assert f"{NAMESPACE}/{name}" in status.message


async def test_a_job_with_pods_is_not_second_guessed_and_other_jobs_events_do_not_count() -> None:
    name = job_name("rem-1", Action.GPUReset, 1)
    status, client = await status_of({"active": 1}, [event(name, "FailedCreate", REFUSAL)])
    assert status.progress is Progress.InProgress
    assert not any(r.endswith("/events") for r in client.reads), "no Event read while it runs"
    status, _ = await status_of({}, [event("other-job", "FailedCreate", REFUSAL)])
    assert status.progress is Progress.InProgress
    status, _ = await status_of({}, [event(name, "SuccessfulCreate", "Created pod")])
    assert status.progress is Progress.InProgress


async def test_a_refused_pod_is_a_check_that_never_ran() -> None:
    """A validation refused by admission gave no verdict: it holds, it does not climb."""
    name = job_name("rem-1", Action.GPUReset, 1)
    status, _ = await status_of({}, [event(name, "FailedCreate", REFUSAL)])
    assert (status.not_run, status.started) == (True, False)


class PodsClient(FakeClient):
    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        super().__init__(job, [])
        self.pods = pods
        self.selectors: list[str] = []

    async def get(self, path: str, **query: str) -> dict[str, Any]:
        if path.endswith("/pods"):
            self.selectors.append(query.get("labelSelector", ""))
            return {"items": self.pods}
        return await super().get(path, **query)


async def pending_status(job: dict[str, Any], pods: list[dict[str, Any]]) -> Any:
    name = job_name("rem-1", Action.Validate, 1)
    client = PodsClient({"metadata": {"name": name}, **job}, pods)
    executors = Executors(cast(Client, client), NAMESPACE, {})
    executor = ActionExecutor(executor=Executor.Job)
    return await executors.status("gpu-1", "rem-1", Action.Validate, 1, executor), client


async def test_a_job_whose_pod_cannot_pull_its_image_has_not_started() -> None:
    pulling = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "state": {
                        "waiting": {
                            "reason": "ImagePullBackOff",
                            "message": 'Back-off pulling image "registry.invalid/dcgm:1"',
                        }
                    }
                }
            ],
        }
    }
    status, client = await pending_status({"status": {"active": 1, "ready": 0}}, [pulling])
    assert status.progress is Progress.InProgress
    assert not status.started
    assert "ImagePullBackOff" in status.message
    assert client.selectors == [f"job-name={job_name('rem-1', Action.Validate, 1)}"]
    running = {"status": {"phase": "Running"}}
    status, _ = await pending_status({"status": {"active": 1, "ready": 0}}, [running])
    assert status.started
    status, client = await pending_status({"status": {"active": 1, "ready": 1}}, [])
    assert status.started
    assert client.selectors == [], "a Ready pod needs no pod read"


async def test_a_suspended_job_has_not_started() -> None:
    status, _ = await pending_status({"spec": {"suspend": True}, "status": {}}, [])
    assert (status.progress, status.started) == (Progress.InProgress, False)
    assert "is suspended" in status.message


async def test_a_missing_template_is_a_check_that_never_ran() -> None:
    class Gone(FakeClient):
        async def get(self, path: str, **query: str) -> dict[str, Any]:
            from remediation_operator.k8s.client import ApiError

            raise ApiError(404, "NotFound", "jobs not found")

    executors = Executors(cast(Client, Gone({}, [])), NAMESPACE, {})
    executor = ActionExecutor(executor=Executor.Job)
    status = await executors.status("gpu-1", "rem-1", Action.Validate, 1, executor)
    assert (status.progress, status.permanent, status.not_run) == (Progress.Failed, True, True)
    assert "no Job template for Validate" in status.message
