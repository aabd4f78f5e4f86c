"""No verdict is not a failed verdict (issue 22, D53), against the real operator process.

A validation that could not run says nothing about the GPU: no Job template, a pod that never
starts (an image that cannot be pulled, a suspended Job). Before, each counted as a failed
validation and climbed: the GPU reset had cleared the fault and the node was rebooted, then
replaced. Now the node stays cordoned with reason ValidationNotRun, a Warning Event and the
decisions metric say so, and nothing climbs. The running step keeps the timeout it started
with when the policy's `validation` is removed, and a fault reported again during the
validation ends it and resumes the ladder.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.conftest import (
    CONFIG,
    FAULT_REASONS,
    JOB_TEMPLATE,
    NAMESPACE,
    Cluster,
    eventually,
    is_cordoned_by_us,
    policy,
)

pytestmark = pytest.mark.integration

RESET_FIXES = CONFIG.with_(reset_clears=1.0, agent="kind")
"""The kind agent: its condition clears with the reset (the real ones stay until restarted,
D74), so the validation runs after the repair rather than the ladder climbing."""
SLOW_CHECK = RESET_FIXES.with_(job_duration=120.0)
"""The reset Job takes 0.2 s, any other Job (the validation) two minutes."""


def reset_then_reboot(validation: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "faults": [
            {
                "name": "gpu-xid",
                "match": [
                    {"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}
                ],
                "tolerate": "0s",
                "ladder": [
                    {"action": "Cordon"},
                    {"action": "GPUReset", "timeout": "30s", "escalateAfter": "30s"},
                    {"action": "Reboot", "timeout": "30s", "escalateAfter": "30s"},
                    {"action": "Replace", "timeout": "30s"},
                ],
            }
        ],
        "recovery": {"healthyFor": "2s"},
        # The reset brings its own template: an operator without --job-templates can reset.
        "actions": {"gpuReset": {"executor": "Job", "jobTemplate": JOB_TEMPLATE}},
    }
    if validation is not None:
        spec["validation"] = validation
    return policy(**spec)


def template(**pod: Any) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(JOB_TEMPLATE)
    body["spec"]["template"]["spec"].update(pod)
    return body


def jobs_of(cluster: Cluster, action: str) -> list[dict[str, Any]]:
    return [
        j
        for j in cluster.api.store.list("jobs", NAMESPACE)
        if j["metadata"]["labels"].get("remediation.gpuops.io/action") == action
    ]


def status(cluster: Cluster, node: str) -> dict[str, Any]:
    remediation = cluster.remediation(node)
    return remediation["status"] if remediation else {}


def node_condition(cluster: Cluster, node: str, type_: str) -> str:
    conditions = ((cluster.node(node) or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == type_), "")


def held_unrun(cluster: Cluster, node: str) -> bool:
    now = status(cluster, node)
    return now.get("phase") == "Blocked" and now.get("reason") == "ValidationNotRun"


async def stays(check: Callable[[], bool], seconds: float, what: str) -> None:
    """`check` holds throughout `seconds` (several of the operator's re-checks go by)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        assert check(), what
        await asyncio.sleep(0.1)


async def assert_held_without_climbing(cluster: Cluster, node: str, why: str) -> None:
    await eventually(lambda: held_unrun(cluster, node), within=40, what="held: ValidationNotRun")
    now = status(cluster, node)
    assert now["step"] == "Validate"
    validate = now["steps"][-1]
    assert (validate["action"], validate["reason"]) == ("Validate", "ValidationNotRun")
    assert validate["outcome"] == "Cancelled"
    assert why in validate["message"], validate["message"]
    assert "stays cordoned" in now["message"]
    assert is_cordoned_by_us(cluster.node(node))
    await eventually(
        lambda: [
            e
            for e in cluster.events(node, "Node")
            if e["reason"] == "ValidationNotRun" and e["type"] == "Warning" and why in e["message"]
        ],
        what="a Warning Event naming why the validation could not run",
    )
    metrics = await cluster.operators[0].metrics()
    assert 'reason="ValidationNotRun"' in metrics
    # The fault is gone (the reset fixed it) and stays gone: nothing climbs, nothing releases.
    await stays(
        lambda: held_unrun(cluster, node) and not jobs_of(cluster, "Reboot"),
        4,
        "the node stays held, with no Reboot",
    )
    assert [s["action"] for s in status(cluster, node)["steps"]] == [
        "Cordon",
        "GPUReset",
        "Validate",
    ]


@pytest.mark.fleet(config=RESET_FIXES)
async def test_a_validation_with_no_job_template_holds_the_node(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(reset_then_reboot({"after": ["GPUReset"]}))
    empty = cluster.tmp / "no-templates"
    empty.mkdir()
    await cluster.start_operator("operator-a", "--job-templates", str(empty))

    cluster.fleet.inject(node, "xid-62")

    await assert_held_without_climbing(cluster, node, "no Job template for Validate")


@pytest.mark.fleet(config=RESET_FIXES)
async def test_a_validation_whose_image_cannot_be_pulled_holds_the_node(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    unpullable = template()
    unpullable["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/dcgm:1"
    cluster.apply(reset_then_reboot({"timeout": "3s", "jobTemplate": unpullable}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await assert_held_without_climbing(cluster, node, "no pod of it has started")


@pytest.mark.fleet(config=RESET_FIXES)
async def test_a_suspended_validation_job_holds_the_node(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    suspended = template()
    suspended["spec"]["suspend"] = True
    cluster.apply(reset_then_reboot({"timeout": "3s", "jobTemplate": suspended}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")

    await assert_held_without_climbing(cluster, node, "is suspended")


@pytest.mark.fleet(config=SLOW_CHECK)
async def test_removing_validation_keeps_the_running_steps_timeout(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    cluster.apply(reset_then_reboot({"timeout": "4s", "after": ["GPUReset"]}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: jobs_of(cluster, "Validate"), within=30, what="a Validate Job")
    validate = status(cluster, node)["steps"][-1]
    assert (validate["action"], validate["timeout"]) == ("Validate", "4s")

    # The policy's validation goes away while its Job runs (two minutes): the step keeps 4s.
    cluster.api.store.patch("remediationpolicies", "gpu", {"spec": {"validation": None}})

    await eventually(
        lambda: status(cluster, node)["steps"][2].get("outcome"),
        within=20,
        what="the validation ended at its recorded timeout",
    )
    ended = status(cluster, node)["steps"][2]
    assert ended["reason"] == "ValidationFailed"
    assert ended["message"].startswith("Validation did not finish within 4"), ended["message"]


@pytest.mark.fleet(config=SLOW_CHECK)
async def test_deleting_the_job_of_a_removed_validation_is_no_failed_validation(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(reset_then_reboot({"timeout": "60s", "jobTemplate": template()}))
    empty = cluster.tmp / "no-templates"
    empty.mkdir()
    await cluster.start_operator("operator-a", "--job-templates", str(empty))

    cluster.fleet.inject(node, "xid-62")
    (job,) = await eventually(
        lambda: jobs_of(cluster, "Validate"), within=30, what="a Validate Job"
    )
    changed = cluster.api.store.patch("remediationpolicies", "gpu", {"spec": {"validation": None}})
    generation = changed["metadata"]["generation"]
    # The Job goes once the operator took in the change (else it re-creates the Job from the
    # policy it still knows, which then runs and times out: a check that ran).
    await eventually(
        lambda: any(
            c.get("type") == "Accepted" and c.get("observedGeneration") == generation
            for c in cluster.policy_status().get("conditions") or []
        ),
        what="the policy change accepted",
    )
    cluster.api.store.delete("jobs", job["metadata"]["name"], NAMESPACE)

    await assert_held_without_climbing(cluster, node, "no Job template for Validate")


@pytest.mark.fleet(config=SLOW_CHECK)
async def test_a_fault_reported_again_during_validation_resumes_the_ladder(
    cluster: Cluster,
) -> None:
    node = cluster.node_names()[0]
    cluster.apply(reset_then_reboot({"timeout": "120s", "after": ["GPUReset"]}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: jobs_of(cluster, "Validate"), within=30, what="a Validate Job")
    await eventually(
        lambda: node_condition(cluster, node, "AcceleratedHardwareReady") == "True",
        within=20,
        what="the reset cleared the fault",
    )

    # Condition times have one-second resolution: a report within the second of the first
    # one carries the same lastTransitionTime and cannot be told from it (a real fault does
    # not return within a second of its repair).
    await asyncio.sleep(1.1)
    cluster.fleet.inject(node, "xid-62")

    await eventually(lambda: jobs_of(cluster, "Reboot"), within=20, what="the ladder went on")
    steps = status(cluster, node)["steps"]
    assert [s["action"] for s in steps] == ["Cordon", "GPUReset", "Validate", "Reboot"]
    validate = steps[2]
    assert (validate["outcome"], validate["reason"]) == ("PermanentFailure", "FaultReturned")
    assert "reported again" in validate["message"]
    assert "escalating to Reboot" in validate["message"]


@pytest.mark.fleet(config=RESET_FIXES)
async def test_a_validation_refused_by_pod_security_holds_the_node(cluster: Cluster) -> None:
    """The Job controller cannot create the pod and says so in a FailedCreate Event (the
    emulator has no Job controller: the test writes that Event, as kube-controller-manager
    does, on a Job that never gets a pod)."""
    node = cluster.node_names()[0]
    never = template()
    never["spec"]["suspend"] = True  # no pod, as when admission refuses every one
    cluster.apply(reset_then_reboot({"timeout": "30s", "jobTemplate": never}))
    await cluster.start_operator()

    cluster.fleet.inject(node, "xid-62")
    (job,) = await eventually(
        lambda: jobs_of(cluster, "Validate"), within=30, what="a Validate Job"
    )
    name = job["metadata"]["name"]
    cluster.api.store.create(
        "events",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.refused", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Job", "name": name, "namespace": NAMESPACE},
            "reason": "FailedCreate",
            "type": "Warning",
            "message": f'Error creating: pods "{name}-x" is forbidden: violates PodSecurity'
            ' "restricted:latest": privileged',
        },
        NAMESPACE,
    )

    await assert_held_without_climbing(cluster, node, "violates PodSecurity")
