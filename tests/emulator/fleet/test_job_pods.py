"""With a real Job controller (`FleetConfig.job_controller`), the Job runner plays the kubelet
for the Jobs' pods instead of writing Job status: a pod the controller made for a GPU-reset Job
runs on its node, ends Succeeded (exit code 0) and resets the GPUs; Job status is left alone.

The emulator has no Job controller, so the test creates the pod itself, as the controller
would (controller ownerReference to the Job, the template's nodeName)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import fleet, resources
from remediation_emulator.fleet.client import KubeClient
from remediation_emulator.fleet.fleet import Fleet
from tests.emulator.fleet.conftest import SHAPE, TEST_CONFIG, connection, eventually
from tests.emulator.fleet.test_jobs import NS, executor_job, gpu_condition


@pytest.fixture
async def gpus_with_a_job_controller(api: ApiServer) -> AsyncIterator[Fleet]:
    config = TEST_CONFIG.with_(job_controller=True)
    async with fleet.running(connection(api), shape=SHAPE, config=config, seed=1) as running:
        yield running


def pod_of(job: dict[str, Any], name: str) -> dict[str, Any]:
    """The pod the Job controller would create for `job`."""
    meta = job["metadata"]
    template = job["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"batch.kubernetes.io/job-name": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"],
    }


async def test_the_pod_of_a_reset_job_runs_to_success_and_resets_the_gpus(
    api: ApiServer, gpus_with_a_job_controller: Fleet, admin: KubeClient
) -> None:
    node = "gpu-0001"
    gpus_with_a_job_controller.inject(node, "xid-62")
    await eventually(lambda: gpu_condition(api, node)["status"] == "False", what="fault")
    job = await admin.create(
        resources.JOBS, executor_job("reset-1", node, "GPUReset"), namespace=NS
    )
    await admin.create(resources.PODS, pod_of(job, "reset-1-abcde"), namespace=NS)

    def pod_phase() -> str | None:
        pod = api.store.find("pods", "reset-1-abcde", NS)
        return ((pod or {}).get("status") or {}).get("phase")

    await eventually(lambda: pod_phase() == "Succeeded", what="the pod succeeded")
    pod = api.store.get("pods", "reset-1-abcde", NS)
    [container] = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 0
    assert container["state"]["terminated"]["reason"] == "Completed"
    assert gpus_with_a_job_controller.agent.validate(node)  # the reset fixed the GPU
    assert gpu_condition(api, node)["status"] == "False"  # the EKS agent's stays until it restarts
    # Job status belongs to the (real) Job controller: the fleet wrote none.
    assert not (api.store.get("jobs", "reset-1", NS).get("status") or {}).get("conditions")


async def test_a_job_pod_on_a_node_the_fleet_does_not_play_is_left_alone(
    api: ApiServer, admin: KubeClient
) -> None:
    """On a real cluster (`adopt_all_nodes=False`) a Ready node the fleet did not create has
    its own kubelet: its Job pods are not the fleet's to run."""
    config = TEST_CONFIG.with_(job_controller=True, adopt_all_nodes=False)
    async with fleet.running(connection(api), shape=SHAPE, config=config, seed=1):
        await admin.create(
            resources.NODES,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "real-node"}},
        )
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        await admin.patch(
            resources.NODES, "real-node", {"status": {"conditions": [ready]}}, subresource="status"
        )
        job = await admin.create(
            resources.JOBS, executor_job("reset-2", "real-node", "GPUReset"), namespace=NS
        )
        await admin.create(resources.PODS, pod_of(job, "reset-2-abcde"), namespace=NS)
        deadline = time.monotonic() + 1.0  # several of the runner's 0.2 s job durations
        while time.monotonic() < deadline:
            pod = api.store.get("pods", "reset-2-abcde", NS)
            phase = (pod.get("status") or {}).get("phase")
            assert phase in (None, "Pending"), "the fleet ran a real node's pod"
            await asyncio.sleep(0.05)
