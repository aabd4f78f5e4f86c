"""Executor Jobs are deleted `--job-retention` after their step ended, whatever the outcome
(issue 24, item 4): finished, timed out (the Job still runs), cancelled with its incident, or
orphaned (its Remediation gone). Pure rules on a manual clock; then the operator process
against the emulator, with a GPU reset that outlives its step's timeout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from remediation_operator.domain.policy import Action
from remediation_operator.handlers.job_retention import JobJanitor, JobKey
from remediation_operator.k8s import names
from remediation_operator.k8s.executors import job_name
from tests.integration.conftest import CONFIG, FAULT_REASONS, Cluster, eventually, policy

T0 = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(
    remediation: str, action: Action, attempt: int, finished: datetime | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "name": job_name(remediation, action, attempt),
            "namespace": "executors",
            "labels": {names.ACTION_LABEL: action.value, names.MANAGED_BY: names.MANAGER},
            "annotations": {names.REMEDIATION_ANNOTATION: remediation},
        },
        "status": {"active": 1},
    }
    if finished is not None:
        body["status"] = {
            "failed": 1,
            "conditions": [
                {"type": "Failed", "status": "True", "lastTransitionTime": stamp(finished)}
            ],
        }
    return body


def remediation(
    name: str, phase: str, steps: list[dict[str, Any]], finished: datetime | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "steps": steps}
    if finished is not None:
        status["finishedAt"] = stamp(finished)
    return {"metadata": {"name": name}, "status": status}


def record(action: Action, attempt: int, finished: datetime | None) -> dict[str, Any]:
    found: dict[str, Any] = {"action": action.value, "attempt": attempt, "startedAt": stamp(T0)}
    if finished is not None:
        found["finishedAt"] = stamp(finished)
    return found


def janitor() -> JobJanitor:
    async def delete(_: JobKey) -> None:
        return None

    return JobJanitor(HOUR, delete, lambda: True)


def key(body: dict[str, Any]) -> JobKey:
    return JobKey("executors", body["metadata"]["name"])


def test_a_finished_job_goes_an_hour_after_it_finished() -> None:
    j = janitor()
    failed = job("n1-r", Action.GPUReset, 1, finished=T0)
    j.remediation("ADDED", remediation("n1-r", "Running", [record(Action.GPUReset, 1, None)]))
    j.job("ADDED", failed)
    assert j.due(T0 + HOUR - timedelta(seconds=1)) == []
    assert j.next_expiry(T0) == T0 + HOUR
    assert j.due(T0 + HOUR) == [key(failed)]


def test_a_timed_out_job_that_still_runs_goes_an_hour_after_its_step_ended() -> None:
    j = janitor()
    running = job("n1-r", Action.Validate, 2)
    j.job("ADDED", running)
    ended = T0 + timedelta(minutes=10)
    j.remediation(
        "ADDED",
        remediation(
            "n1-r",
            "Running",
            [record(Action.Validate, 1, T0), record(Action.Validate, 2, None)],
        ),
    )
    assert j.due(T0 + 5 * HOUR) == []  # its attempt still runs: never deleted
    j.remediation(
        "MODIFIED",
        remediation(
            "n1-r",
            "Running",
            [record(Action.Validate, 1, T0), record(Action.Validate, 2, ended)],
        ),
    )
    assert j.due(ended + HOUR - timedelta(seconds=1)) == []
    assert j.due(ended + HOUR) == [key(running)]


def test_a_job_of_a_cancelled_incident_goes_an_hour_after_the_incident_ended() -> None:
    j = janitor()
    running = job("n1-r", Action.Diagnose, 1)
    j.job("ADDED", running)
    j.remediation("ADDED", remediation("n1-r", "Cancelled", [record(Action.Diagnose, 1, None)], T0))
    assert j.due(T0 + HOUR) == [key(running)]


def test_an_orphaned_job_goes_an_hour_after_it_was_first_seen_without_its_remediation() -> None:
    j = janitor()
    running = job("gone-r", Action.Reboot, 1)
    j.job("ADDED", running)
    assert j.due(T0) == []  # orphaned since T0
    assert j.due(T0 + HOUR) == [key(running)]
    j.job("DELETED", running)
    assert j.due(T0 + 2 * HOUR) == []


def test_jobs_of_other_attempts_are_not_confused() -> None:
    j = janitor()
    first, second = job("n1-r", Action.GPUReset, 1), job("n1-r", Action.GPUReset, 2)
    j.job("ADDED", first)
    j.job("ADDED", second)
    steps = [record(Action.GPUReset, 1, T0), record(Action.GPUReset, 2, None)]
    j.remediation("ADDED", remediation("n1-r", "Running", steps))
    assert j.due(T0 + HOUR) == [key(first)]


async def test_nothing_is_deleted_unless_the_replica_may_act() -> None:
    deleted: list[JobKey] = []

    async def delete(found: JobKey) -> None:
        deleted.append(found)

    acting = False
    j = JobJanitor(HOUR, delete, lambda: acting, clock=lambda: T0 + 2 * HOUR)
    j.job("ADDED", job("gone-r", Action.Reboot, 1, finished=T0))
    await j.sweep()
    assert deleted == []
    acting = True
    await j.sweep()
    assert [k.name for k in deleted] == [job_name("gone-r", Action.Reboot, 1)]


def slow_reset() -> list[dict[str, Any]]:
    return [
        {
            "name": "gpu-xid",
            "match": [
                {"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}
            ],
            "tolerate": "0s",
            "ladder": [
                {"action": "Cordon", "escalateAfter": "0s"},
                {"action": "GPUReset", "timeout": "2s"},
            ],
            "onExhausted": "Hold",
        }
    ]


@pytest.mark.hostile
@pytest.mark.fleet(config=CONFIG.with_(reset_duration=600.0))
async def test_a_reset_job_that_outlived_its_timeout_is_deleted(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=slow_reset(), actions={"gpuReset": {"executor": "Job"}}))
    await cluster.start_operator("operator-a", "--job-retention", "2s")
    cluster.fleet.inject(node, "xid-62")

    jobs = "remediation-system"
    await eventually(lambda: cluster.api.store.list("jobs", jobs), what="the reset Job")
    await eventually(
        lambda: any(
            s.get("action") == "GPUReset" and s.get("outcome") == "PermanentFailure"
            for s in ((cluster.remediation(node) or {}).get("status") or {}).get("steps") or []
        ),
        what="the reset step timed out",
    )
    assert cluster.api.store.list("jobs", jobs), "the Job is kept for inspection first"
    await eventually(lambda: not cluster.api.store.list("jobs", jobs), within=15, what="deleted")
    assert cluster.phase(node) not in ("Succeeded", "Failed", "Cancelled")  # still open
