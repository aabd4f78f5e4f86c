"""Executor Jobs pinned to a node: run, end with Job-controller status, apply their effect."""

from __future__ import annotations

from typing import Any

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import resources
from remediation_emulator.fleet.client import KubeClient
from remediation_emulator.fleet.fleet import Fleet
from tests.emulator.fleet.conftest import eventually

NS = "remediation-system"


def executor_job(name: str, node: str, action: str, **spec: Any) -> dict[str, Any]:
    """Shaped like the operator's executor Jobs (contracts-runtime.md)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {
                "remediation.gpuops.io/action": action,
                "app.kubernetes.io/managed-by": "remediation-operator",
            },
            "annotations": {"remediation.gpuops.io/node": node},
        },
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "tolerations": [
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
                    ],
                    "containers": [{"name": "reset", "image": "nvcr.io/nvidia/cuda:12.6.0-base"}],
                }
            },
        },
    }


def job_condition(job: dict[str, Any] | None) -> str | None:
    for c in (job or {}).get("status", {}).get("conditions", []):
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return str(c["type"])
    return None


def gpu_condition(api: ApiServer, node: str) -> dict[str, Any]:
    conditions = api.store.get("nodes", node)["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "AcceleratedHardwareReady")


async def test_a_gpu_reset_job_succeeds_and_clears_the_fault(
    api: ApiServer, kind_gpus: Fleet, admin: KubeClient
) -> None:
    # the kind agent: a repair or a clear shows healthy at once (the real ones are sticky)
    kind_gpus.inject("gpu-0001", "xid-62")
    await eventually(lambda: gpu_condition(api, "gpu-0001")["status"] == "False", what="fault")
    await admin.create(
        resources.JOBS, executor_job("reset-1", "gpu-0001", "GPUReset"), namespace=NS
    )
    job = await eventually(
        lambda: job_condition(j := api.store.find("jobs", "reset-1", NS)) and j, what="job end"
    )
    status = job["status"]
    assert job_condition(job) == "Complete"
    assert status["succeeded"] == 1
    assert "active" not in status
    assert status["startTime"] <= status["completionTime"]
    types = [c["type"] for c in status["conditions"]]
    assert types == ["SuccessCriteriaMet", "Complete"]
    # The agent writes the node's conditions from its own work queue, after the reset ran and
    # independently of the Job's completion (as the reboot test below waits for its effects).
    await eventually(
        lambda: gpu_condition(api, "gpu-0001")["status"] == "True", what="the fault cleared"
    )


async def test_a_gpu_reset_job_fails_when_the_gpu_cannot_be_reset(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    gpus.inject("gpu-0002", "xid-79")
    await admin.create(
        resources.JOBS, executor_job("reset-2", "gpu-0002", "GPUReset"), namespace=NS
    )
    job = await eventually(
        lambda: job_condition(j := api.store.find("jobs", "reset-2", NS)) and j, what="job end"
    )
    assert job_condition(job) == "Failed"
    assert job["status"]["failed"] == 1
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert gpu_condition(api, "gpu-0002")["reason"] == "NvidiaXID79Error"


async def test_a_reboot_job_passes_the_node_through_not_ready_to_a_new_boot_id(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    ready_seen: list[str] = []

    def watch_ready(key: str, old: object, new: dict[str, Any] | None) -> None:
        if key == "gpu-0000" and new is not None:
            ready = next(c for c in new["status"]["conditions"] if c["type"] == "Ready")
            ready_seen.append(ready["status"])

    gpus.nodes.subscribe(watch_ready)
    boot = api.store.get("nodes", "gpu-0000")["status"]["nodeInfo"]["bootID"]
    gpus.inject("gpu-0000", "xid-79")
    await admin.create(resources.JOBS, executor_job("reboot-1", "gpu-0000", "Reboot"), namespace=NS)
    job = await eventually(
        lambda: job_condition(j := api.store.find("jobs", "reboot-1", NS)) and j, what="job end"
    )
    assert job_condition(job) == "Complete"
    await eventually(
        lambda: api.store.get("nodes", "gpu-0000")["status"]["nodeInfo"]["bootID"] != boot,
        what="new bootID",
    )
    await eventually(lambda: ready_seen[-1] == "True", what="Ready again")
    assert "Unknown" in ready_seen
    assert gpu_condition(api, "gpu-0000")["status"] == "True"

    # The training pod on the node lost readiness during the reboot and came back.
    def restarts() -> int:
        pods = api.store.list("pods", "training")
        pod = next(p for p in pods if p["spec"]["nodeName"] == "gpu-0000")
        return int(pod["status"]["containerStatuses"][0]["restartCount"])

    await eventually(lambda: restarts() == 1, what="the training pod restarted once")


async def test_a_finished_job_is_deleted_after_its_ttl(
    api: ApiServer, gpus: Fleet, admin: KubeClient
) -> None:
    body = executor_job("plain-1", "gpu-0002", "GPUReset", ttlSecondsAfterFinished=1)
    await admin.create(resources.JOBS, body, namespace=NS)
    await eventually(lambda: job_condition(api.store.find("jobs", "plain-1", NS)), what="job end")
    await eventually(
        lambda: api.store.find("jobs", "plain-1", NS) is None, within=4.0, what="TTL deletion"
    )
