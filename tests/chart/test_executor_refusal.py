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
