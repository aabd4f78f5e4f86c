"""What GPU fleets need beyond the ladder (issue 15) on a real kube-apiserver: validation
before return to service, diagnostics before a reboot and workload-aware drain.

Every Job here is a real Job run by the real Job controller (the fleet plays the kubelet for
its pod, as in test_ladder.py): the operator's Validate and Diagnose Jobs, whose pod passes
only if the node shows no fault and no repair left one latent (the `row-remap-failure` class:
a reboot clears its XID but DCGM diagnostics still fail), and a user's training Job, whose pod
runs for the fleet's `job_duration` and then succeeds. The emulator versions of these
scenarios are tests/integration/test_validation.py, test_diagnostics.py and
test_workload_drain.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import E2E_CONFIG, Scenario
from tests.integration.conftest import FAULT_REASONS, JOB_TEMPLATE, eventually, is_cordoned_by_us

REBOOTS_FIX = E2E_CONFIG.with_(reboot_clears=1.0)
TRAINING_RUNS_FOR = 10.0
"""Seconds the user's training Job's pod runs (the fleet's `job_duration`): long enough to see
the drain wait for it, short enough to keep the test quick."""
ACTION = "remediation.gpuops.io/action"


def reboot_then_replace() -> dict[str, Any]:
    """One fault whose ladder is Cordon, Reboot, Replace (no drain, no reset)."""
    return {
        "name": "gpu-xid",
        "match": [{"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}],
        "tolerate": "0s",
        "ladder": [
            {"action": "Cordon"},
            {"action": "Reboot", "timeout": "30s", "escalateAfter": "30s"},
            {"action": "Replace", "timeout": "30s"},
        ],
    }


def jobs_of(e2e: Scenario, action: str) -> list[dict[str, Any]]:
    return [j for j in e2e.jobs() if j["metadata"]["labels"].get(ACTION) == action]


def job_name(job: dict[str, Any]) -> str:
    return str(job["metadata"]["name"])


def pods_of_job(e2e: Scenario, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in e2e.pods(namespace)
        if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job
    ]


def pod(e2e: Scenario, namespace: str, name: str) -> dict[str, Any] | None:
    return e2e.admin.find(f"/api/v1/namespaces/{namespace}/pods/{name}")


def phase_of(found: dict[str, Any] | None) -> str | None:
    return ((found or {}).get("status") or {}).get("phase")


def gone(found: dict[str, Any] | None) -> bool:
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def bare_pod(node: str, name: str, namespace: str, *, gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if gpus:  # an extended resource: the API server requires requests == limits
        container["resources"] = {
            "requests": {"nvidia.com/gpu": str(gpus)},
            "limits": {"nvidia.com/gpu": str(gpus)},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [container]},
    }


async def wait_namespace_ready(e2e: Scenario, namespace: str) -> None:
    """A real server refuses pods until the controller-manager made the default ServiceAccount."""
    await eventually(
        lambda: e2e.admin.find(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        what=f"the default ServiceAccount of {namespace}",
    )


def step(e2e: Scenario, node: str, action: str) -> dict[str, Any]:
    remediation = e2e.remediation(node)
    assert remediation is not None
    found: dict[str, Any] = next(s for s in remediation["status"]["steps"] if s["action"] == action)
    return found


# Validation before return to service ------------------------------------------------------


@pytest.mark.fleet(config=REBOOTS_FIX)
async def test_a_reboot_followed_by_a_failing_validation_escalates_to_replace(
    scenario: Scenario,
) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    nccl: dict[str, Any] = copy.deepcopy(JOB_TEMPLATE)  # a user's own check (an NCCL test)
    nccl["spec"]["template"]["spec"]["containers"][0]["name"] = "nccl-tests"
    validation = {"after": ["Reboot"], "level": 3, "jobTemplate": nccl}
    e2e.apply(
        e2e.policy(
            faults=[reboot_then_replace()], recovery={"healthyFor": "2s"}, validation=validation
        )
    )
    await e2e.start_operator()

    e2e.fleet.inject(node, "row-remap-failure")

    (job,) = await eventually(lambda: jobs_of(e2e, "Validate"), within=40, what="a Validate Job")
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == node
    (container,) = spec["containers"]
    assert container["name"] == "nccl-tests"
    assert {"name": "REMEDIATION_DIAG_LEVEL", "value": "3"} in container["env"]
    # The real Job controller ran it to failure: the fleet's pod exited 1.
    await eventually(
        lambda: any(
            phase_of(p) == "Failed" for p in pods_of_job(e2e, e2e.namespace, job_name(job))
        ),
        within=30,
        what="the validation pod Failed",
    )

    await eventually(lambda: e2e.phase(node) == "Succeeded", within=90, what="replaced")
    remediation = e2e.remediation(node)
    assert remediation is not None
    status = remediation["status"]
    assert status["reason"] == "NodeReplaced"
    assert [s["action"] for s in status["steps"]] == ["Cordon", "Reboot", "Validate", "Replace"]
    validate = status["steps"][2]
    assert (validate["outcome"], validate["reason"]) == ("PermanentFailure", "ValidationFailed")
    assert validate["message"].startswith("Validation failed after ")
    assert "escalating to Replace" in validate["message"]
    assert validate["startedAt"] <= validate["finishedAt"]
    await eventually(
        lambda: {"ValidationStarted", "ValidationFailed"} <= e2e.event_reasons(node, "Node"),
        what="validation Events on the Node",
    )
    (failed,) = jobs_of(e2e, "Validate")
    conditions = {c["type"]: c["status"] for c in (failed.get("status") or {})["conditions"]}
    assert conditions.get("Failed") == "True", "the Job controller marked the Job Failed"
    metrics = await e2e.operators[0].metrics()
    assert 'action="Validate",outcome="PermanentFailure"' in metrics


@pytest.mark.fleet(config=REBOOTS_FIX)
async def test_a_passing_validation_releases_the_node_after_probation(scenario: Scenario) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    # The default check: validate.yaml of --job-templates, at level 2.
    e2e.apply(
        e2e.policy(faults=[reboot_then_replace()], recovery={"healthyFor": "2s"}, validation={})
    )
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-62")

    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), what="cordon")
    (job,) = await eventually(lambda: jobs_of(e2e, "Validate"), within=40, what="a Validate Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert {"name": "REMEDIATION_DIAG_LEVEL", "value": "2"} in container["env"]
    await eventually(lambda: e2e.phase(node) == "Succeeded", within=40, what="recovered")
    remediation = e2e.remediation(node)
    assert remediation is not None
    status = remediation["status"]
    assert status["reason"] == "Recovered"
    assert [s["action"] for s in status["steps"]] == ["Cordon", "Reboot", "Validate"]
    validate = status["steps"][2]
    assert (validate["outcome"], validate["reason"]) == ("Succeeded", "ValidationPassed")
    assert validate["message"].startswith("Validation passed in ")
    assert any(
        phase_of(p) == "Succeeded" for p in pods_of_job(e2e, e2e.namespace, job_name(job))
    ), "the Job controller's validation pod succeeded"
    await eventually(
        lambda: not ((e2e.node(node) or {}).get("spec") or {}).get("unschedulable"),
        what="uncordoned",
    )
    assert "ValidationPassed" in e2e.event_reasons(node, "Node")
    assert e2e.node(node) is not None, "a passing validation does not replace the node"


# Diagnostics before a destructive step ----------------------------------------------------


@pytest.mark.fleet(config=REBOOTS_FIX)
async def test_diagnostics_are_collected_before_a_reboot_and_status_says_where(
    scenario: Scenario,
) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    boot_before = (e2e.node(node) or {})["status"]["nodeInfo"]["bootID"]
    diagnostics = {"destination": "pvc://gpu-diagnostics/reports", "before": ["Reboot"]}
    e2e.apply(e2e.policy(faults=[reboot_then_replace()], diagnostics=diagnostics))
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-62")

    (job,) = await eventually(lambda: jobs_of(e2e, "Diagnose"), within=30, what="Diagnose Job")
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == node
    assert {"name": "diagnostics", "persistentVolumeClaim": {"claimName": "gpu-diagnostics"}} in (
        spec["volumes"]
    )
    (container,) = spec["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    name = job["metadata"]["annotations"]["remediation.gpuops.io/remediation"]
    location = f"pvc://gpu-diagnostics/reports/{name}/diagnose-1"
    assert env["REMEDIATION_DIAGNOSTICS_LOCATION"] == location
    assert env["REMEDIATION_DIAGNOSTICS_DIR"] == f"/diagnostics/reports/{name}/diagnose-1"

    await eventually(lambda: e2e.phase(node) == "Succeeded", within=40, what="recovered")
    remediation = e2e.remediation(node)
    assert remediation is not None
    status = remediation["status"]
    assert [s["action"] for s in status["steps"]] == ["Cordon", "Diagnose", "Reboot"]
    diagnose = status["steps"][1]
    assert diagnose["location"] == location
    assert (diagnose["outcome"], diagnose["reason"]) == ("Succeeded", "DiagnosticsCollected")
    assert diagnose["message"].startswith(f"Diagnostics collected to {location} in ")
    # The reboot started only once the diagnostics were over, and it happened.
    assert diagnose["finishedAt"] <= status["steps"][2]["startedAt"]
    assert (e2e.node(node) or {})["status"]["nodeInfo"]["bootID"] != boot_before
    reboots = jobs_of(e2e, "Reboot")
    assert reboots
    assert all(r["metadata"]["creationTimestamp"] >= diagnose["finishedAt"] for r in reboots)
    await eventually(
        lambda: (
            {"CollectingDiagnostics", "DiagnosticsCollected"} <= e2e.event_reasons(node, "Node")
        ),
        what="diagnostics Events on the Node",
    )


# Workload-aware drain ---------------------------------------------------------------------


@pytest.mark.fleet(config=E2E_CONFIG.with_(job_duration=TRAINING_RUNS_FOR))
async def test_allow_completion_waits_for_a_jobs_pod_then_drains(scenario: Scenario) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    training = e2e.shape.training_namespace
    rules = {
        "pods": [
            {
                "handling": "AllowCompletion",
                "namespaces": [training],
                "podSelector": {"matchLabels": {"app": "trainer"}},
                "waitFor": "1h",
            }
        ]
    }
    e2e.apply(e2e.policy(drain=rules))
    await e2e.start_operator()
    trainer = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer", "namespace": training},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                },
            },
        },
    }
    e2e.admin.create(f"/apis/batch/v1/namespaces/{training}/jobs", trainer)
    # A bare pod the rules do not name: evicted at once (the default, Evict).
    e2e.admin.create(f"/api/v1/namespaces/{training}/pods", bare_pod(node, "notebook", training))
    await eventually(
        lambda: phase_of(pod(e2e, training, "notebook")) == "Running", what="the notebook running"
    )
    (trainer_pod,) = await eventually(
        lambda: [p for p in pods_of_job(e2e, training, "trainer") if phase_of(p) == "Running"],
        what="the training Job's pod running (created by the Job controller)",
    )
    pod_name = trainer_pod["metadata"]["name"]

    e2e.fleet.inject(node, "xid-62")

    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), what="cordon")
    await eventually(
        lambda: (e2e.remediation(node) or {}).get("status", {}).get("step") == "Drain",
        what="the drain under way",
    )
    # The drain evicts the other pod in the same pass but waits for the Job's pod: it keeps
    # running and the ladder does not go on.
    await eventually(
        lambda: gone(pod(e2e, training, "notebook")), within=20, what="the bare pod evicted"
    )
    assert not gone(pod(e2e, training, pod_name))
    remediation = e2e.remediation(node)
    assert remediation is not None
    assert remediation["status"]["phase"] in ("Running", "Waiting")
    assert phase_of(pod(e2e, training, pod_name)) == "Running"
    assert not jobs_of(e2e, "GPUReset")

    # The pod finishes by itself (it is not evicted); the drain is then complete.
    (reset,) = await eventually(
        lambda: jobs_of(e2e, "GPUReset"), within=TRAINING_RUNS_FOR + 30, what="the GPU reset"
    )
    finished = pod(e2e, training, pod_name)
    assert finished is not None, "the Job's pod was left to complete, not evicted"
    assert phase_of(finished) == "Succeeded"
    assert not finished["metadata"].get("deletionTimestamp")
    (state,) = finished["status"]["containerStatuses"]
    assert reset["metadata"]["creationTimestamp"] >= state["state"]["terminated"]["finishedAt"]
    assert step(e2e, node, "Drain")["outcome"] == "Succeeded"


async def test_gpu_only_drain_before_a_reset_leaves_a_cpu_pod_in_place(scenario: Scenario) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    training = e2e.shape.training_namespace
    system = e2e.extra_namespace("system")
    await wait_namespace_ready(e2e, system)
    e2e.admin.create(
        f"/api/v1/namespaces/{training}/pods", bare_pod(node, "trainer-0", training, gpus=8)
    )
    e2e.admin.create(f"/api/v1/namespaces/{system}/pods", bare_pod(node, "log-shipper", system))
    await eventually(
        lambda: phase_of(pod(e2e, training, "trainer-0")) == "Running", what="the GPU pod running"
    )
    await eventually(
        lambda: phase_of(pod(e2e, system, "log-shipper")) == "Running", what="the CPU pod running"
    )
    e2e.apply(e2e.policy(drain={"gpuPodsOnlyBeforeReset": True}))
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-62")

    await eventually(
        lambda: gone(pod(e2e, training, "trainer-0")), within=30, what="the GPU pod evicted"
    )
    await eventually(lambda: jobs_of(e2e, "GPUReset"), within=30, what="the GPU reset")
    log_shipper = pod(e2e, system, "log-shipper")
    assert phase_of(log_shipper) == "Running"
    assert not gone(log_shipper)
    assert step(e2e, node, "Drain")["outcome"] == "Succeeded"
