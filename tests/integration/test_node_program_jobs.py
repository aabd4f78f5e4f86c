"""The executor Jobs run the node program against a fake GPU node (issue 22, D55).

Real: the operator process; the chart-style Jobs (`remediation-operator node reset|reboot`)
run as processes by the emulated fleet's Job runner, against the fake GPU node's tools; the
program labels the Node through the API emulator to stop the GPU clients. Faked: the GPUs
(`remediation_emulator.gpunode`), whose clients (the device plugin) hold the GPUs until the
Node carries the GPU Operator's stop labels.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from remediation_emulator.gpunode import state as fake
from tests.integration.conftest import CONFIG, NAMESPACE, Cluster, eventually, policy

pytestmark = pytest.mark.integration

PROGRAM = CONFIG.with_(node_program=True, reset_clears=1.0, reboot_clears=1.0, agent="kind")
"""The kind agent: its condition clears with a reset that ran (the real ones stay until
restarted, D74), so a reset that stopped the GPU clients ends the ladder."""
STOP = {
    f"nvidia.com/gpu.deploy.{c}": "false"
    for c in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
}


def node_job(step: str, *args: str, root: bool = True) -> dict[str, Any]:
    """The chart's executor Job, as far as the fleet runs it (as root, as the chart runs it;
    `root=False`: as the image's own user)."""
    return {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": step,
                            "image": "ghcr.io/gpuops/remediation-operator:0.1.0",
                            "command": [
                                "remediation-operator",
                                "node",
                                "--host-root",
                                "/host",
                                step,
                            ],
                            "args": list(args),
                            "securityContext": {"runAsUser": 0 if root else 65532},
                        }
                    ]
                }
            }
        }
    }


def reset_then_reboot(clients: str, *, root: bool = True, reset_retries: int = 3) -> dict[str, Any]:
    body = policy()
    fault = body["spec"]["faults"][0]
    fault["ladder"] = [
        {"action": "Cordon"},
        {"action": "GPUReset", "timeout": "60s", "escalateAfter": "30s", "retries": reset_retries},
        {"action": "Reboot", "timeout": "60s", "escalateAfter": "30s"},
        {"action": "Replace", "timeout": "30s"},
    ]
    body["spec"]["actions"] = {
        "gpuReset": {
            "executor": "Job",
            "jobTemplate": node_job("reset", f"--clients={clients}", root=root),
        },
        "reboot": {"executor": "Job", "jobTemplate": node_job("reboot")},
        "replace": {"provider": "Karpenter"},
    }
    return copy.deepcopy(body)


def steps(cluster: Cluster, node: str) -> list[tuple[str, str]]:
    status = (cluster.remediation(node) or {}).get("status") or {}
    return [(s["action"], s.get("outcome", "")) for s in status.get("steps") or []]


@pytest.mark.fleet(config=PROGRAM)
async def test_a_reset_stops_the_gpu_clients_resets_every_gpu_and_restores_them(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(reset_then_reboot("gpu-operator"))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=60, what="recovered")
    assert steps(cluster, node) == [("Cordon", "Succeeded"), ("GPUReset", "Succeeded")]
    program = cluster.fleet.jobs.program
    assert program is not None
    state = program.state(node)
    assert state["resets"] == [[fake.gpu(i)["uuid"] for i in range(8)]], "one command, all GPUs"
    labels = (cluster.node(node) or {})["metadata"].get("labels") or {}
    assert not set(STOP) & set(labels), "the stop labels are gone again"
    await eventually(
        lambda: [
            p
            for p in cluster.api.store.list("pods")
            if p["spec"].get("nodeName") == node
            and p["metadata"]["labels"].get("app") == "nvidia-device-plugin-daemonset"
        ],
        what="the device plugin back on the node",
    )
    patches = [
        e
        for e in cluster.writes_by("gpu-fleet")
        if e.resource == "nodes" and e.verb == "patch" and e.name == node
    ]
    assert len(patches) >= 2, "the program labelled the Node and put its labels back"
    assert any(
        e.verb == "delete" and e.resource == "pods" and e.name.startswith("nvidia-device-plugin")
        for e in cluster.writes_by("gpu-fleet")
    ), "the device plugin's pod left the node while the GPUs were reset"


@pytest.mark.fleet(config=PROGRAM.with_(agent="eks"))
async def test_a_reset_that_leaves_the_clients_running_fails_and_the_reboot_runs_once(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    boot = (cluster.node(node) or {})["status"]["nodeInfo"]["bootID"]
    # No retries: each failed reset Job would be retried with backoff until the step's 60 s
    # timeout (a minute of waiting that proves nothing more here).
    cluster.apply(reset_then_reboot("none", reset_retries=0))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=90, what="recovered")
    status = (cluster.remediation(node) or {})["status"]
    reset = next(s for s in status["steps"] if s["action"] == "GPUReset")
    assert "In use by another client" in reset["message"], reset["message"]
    assert ("Reboot", "Succeeded") in steps(cluster, node)
    program = cluster.fleet.jobs.program
    assert program is not None
    assert program.state(node)["reboots"] == 1
    assert (cluster.node(node) or {})["status"]["nodeInfo"]["bootID"] != boot
    jobs = [
        j
        for j in cluster.api.store.list("jobs", NAMESPACE)
        if j["metadata"]["labels"].get("remediation.gpuops.io/action") == "Reboot"
    ]
    (job,) = jobs
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert {"name": "REMEDIATION_EXPECTED_BOOT_ID", "value": boot} in container["env"]


@pytest.mark.fleet(config=PROGRAM)
async def test_a_permanent_result_climbs_at_once_and_the_status_names_it(
    cluster: Cluster,
) -> None:
    """The program's result reaches the operator as on a real cluster: as the termination
    message of the Job's pod (D70). A reset Job not running as root gets nvidia-smi's
    "Insufficient Permissions" (exit 4, permanent): no retry, the ladder climbs to Reboot."""
    node = cluster.node_names()[0]
    cluster.apply(reset_then_reboot("none", root=False))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=90, what="recovered")
    status = (cluster.remediation(node) or {})["status"]
    resets = [s for s in status["steps"] if s["action"] == "GPUReset"]
    assert [s["outcome"] for s in resets] == ["PermanentFailure"], "no second attempt"
    assert "ResetNoPermission: " in resets[0]["message"], resets[0]["message"]
    assert "{" not in resets[0]["message"], "the result is read, not quoted"
    assert ("Reboot", "Succeeded") in steps(cluster, node)
    pods = [
        p
        for p in cluster.api.store.list("pods", NAMESPACE)
        if p["metadata"]["labels"].get("job-name", "").endswith("gpureset-1")
    ]
    (pod,) = pods
    (container,) = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 2


@pytest.mark.fleet(config=PROGRAM)
async def test_a_failed_validation_names_the_check_and_the_gpu_in_status_and_event(
    cluster: Cluster,
) -> None:
    """The chart's validation (`node validate`, DCGM against the node's host engine) after a
    reboot that left a latent fault (`row-remap-failure`: DCGM still fails): the step's record
    and the Node's Event say which check failed on which GPU, read from the pod's termination
    message as on a real cluster (D70), and the ladder climbs at once."""
    node = cluster.node_names()[0]
    body = reset_then_reboot("gpu-operator")
    fault = body["spec"]["faults"][0]
    fault["ladder"] = [
        {"action": "Cordon"},
        {"action": "Reboot", "timeout": "60s", "escalateAfter": "30s"},
        {"action": "Replace", "timeout": "30s"},
    ]
    body["spec"]["validation"] = {
        "after": ["Reboot"],
        "level": 1,
        "timeout": "60s",
        "jobTemplate": node_job("validate", "--hostengine=localhost:5555"),
    }
    cluster.apply(body)
    await cluster.start_operator()

    cluster.fleet.inject(node, "row-remap-failure")

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=90, what="replaced")
    status = (cluster.remediation(node) or {})["status"]
    assert [s["action"] for s in status["steps"]] == ["Cordon", "Reboot", "Validate", "Replace"]
    validate = status["steps"][2]
    assert (validate["outcome"], validate["reason"]) == ("PermanentFailure", "ValidationFailed")
    named = f"dcgm: Memory on {fake.gpu(0)['uuid']}"
    assert named in validate["message"], validate["message"]
    assert "{" not in validate["message"], "the result is read, not quoted"
    (failed,) = [e for e in cluster.events(node, "Node") if e["reason"] == "ValidationFailed"]
    assert named in failed["message"]


@pytest.mark.fleet(config=PROGRAM)
async def test_diagnostics_run_the_node_program_and_keep_the_files_on_the_node(
    cluster: Cluster,
) -> None:
    """The chart's diagnostics (`node collect`) before a Reboot, to a `hostpath://`
    destination: the files are in that directory on the node, and the step's record says
    where and what was written (D69)."""
    node = cluster.node_names()[0]
    body = reset_then_reboot("gpu-operator")
    body["spec"]["faults"][0]["ladder"] = [
        {"action": "Cordon"},
        {"action": "Reboot", "timeout": "60s", "escalateAfter": "30s"},
        {"action": "Replace", "timeout": "30s"},
    ]
    body["spec"]["diagnostics"] = {
        "destination": "hostpath:///var/log/gpu-diagnostics",
        "before": ["Reboot"],
        "jobTemplate": node_job("collect", "--hostengine=localhost:5555"),
    }
    cluster.apply(body)
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-79")

    await eventually(lambda: cluster.phase(node) == "Succeeded", within=90, what="rebooted")
    status = (cluster.remediation(node) or {})["status"]
    diagnose = status["steps"][1]
    assert (diagnose["action"], diagnose["reason"]) == ("Diagnose", "DiagnosticsCollected")
    name = (cluster.remediation(node) or {})["metadata"]["name"]
    where = f"/var/log/gpu-diagnostics/{name}/diagnose-1"
    assert diagnose["location"] == f"hostpath://{where}"
    assert f"collected 4 file(s) in {where}" in diagnose["message"], diagnose["message"]
    program = cluster.fleet.jobs.program
    assert program is not None
    kept = program.root / node / "host" / where.lstrip("/")
    assert sorted(p.name for p in kept.iterdir()) == [
        "dcgm-diag.txt",
        "kernel.log",
        "nvidia-smi.xml",
        "remediation-bug-report.log.gz",
    ]
