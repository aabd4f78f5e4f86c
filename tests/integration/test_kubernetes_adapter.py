"""The Kubernetes adapter (`k8s/` behind the engine's ports) against the API emulator over HTTP:
what each port call does to real API objects, and that each is idempotent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_operator.domain.effects import DrainPlan
from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    Executor,
    PodHandling,
    PodRule,
    ReplaceProvider,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.engine.ports import Conflict, NotFound, Refused
from remediation_operator.handlers.cluster_port import KubernetesCluster
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder, ObjectRef
from remediation_operator.k8s.executors import job_name
from tests.integration.conftest import JOB_TEMPLATE, NAMESPACE, ROOT

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUARANTINE = "remediation.gpuops.io/quarantine"


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with apiserver.serve() as server:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            server.store.create("customresourcedefinitions", yaml.safe_load(crd.read_text()))
        server.store.create("customresourcedefinitions", nodeclaim_crd())
        for ns in (NAMESPACE, "training"):
            server.store.create("namespaces", {"metadata": {"name": ns}})
        yield server


@pytest.fixture
async def client(api: ApiServer, tmp_path: Path) -> AsyncIterator[Client]:
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user="adapter")
    connected = await Client.from_environment(str(config))
    yield connected
    await connected.close()


def nodeclaim_crd() -> dict[str, Any]:
    path = ROOT / "emulator/remediation_emulator/fleet/nodeclaim-crd.yaml"
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


def pod(name: str, node_name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "training", **metadata},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox"}]},
    }


def writes(api: ApiServer, resource: str) -> int:
    return sum(1 for e in api.request_log if e.is_write and e.resource == resource)


async def test_cordon_is_idempotent_and_release_keeps_an_admin_cordon(
    api: ApiServer, client: Client
) -> None:
    api.store.create("nodes", node("n1", taints=[{"key": "other", "effect": "NoExecute"}]))
    cluster = KubernetesCluster(client, NAMESPACE)

    await cluster.cordon("n1", "gpu-xid", "gpu-default")
    await cluster.protect_from_consolidation("n1", True)
    before = writes(api, "nodes")
    await cluster.cordon("n1", "gpu-xid", "gpu-default")
    assert writes(api, "nodes") == before  # already cordoned: nothing written

    got = api.store.get("nodes", "n1")
    assert got["spec"]["unschedulable"] is True
    assert {"key": QUARANTINE, "value": "gpu-xid", "effect": "NoSchedule"} in got["spec"]["taints"]
    assert got["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    # The node's own record of the cordon (D14): whose it is, and that we flipped it.
    assert got["metadata"]["annotations"]["remediation.gpuops.io/quarantined-by"] == "gpu-default"
    assert got["metadata"]["annotations"]["remediation.gpuops.io/uncordon-on-release"] == "true"

    await cluster.release("n1", uncordon=False)
    got = api.store.get("nodes", "n1")
    assert got["spec"]["unschedulable"] is True
    assert got["spec"]["taints"] == [{"key": "other", "effect": "NoExecute"}]
    annotations = got["metadata"].get("annotations") or {}
    assert "karpenter.sh/do-not-disrupt" not in annotations
    assert not [k for k in annotations if k.startswith("remediation.gpuops.io/")]

    await cluster.release("n1", uncordon=True)
    assert not api.store.get("nodes", "n1")["spec"].get("unschedulable")

    # An administrator's cordon first: ours adds the taint and says whose it is, but not that
    # it may uncordon.
    api.store.create("nodes", node("n2"))
    api.store.patch("nodes", "n2", {"spec": {"unschedulable": True}})
    await cluster.cordon("n2", "gpu-xid", "gpu-default")
    annotations = api.store.get("nodes", "n2")["metadata"]["annotations"]
    assert annotations["remediation.gpuops.io/quarantined-by"] == "gpu-default"
    assert "remediation.gpuops.io/uncordon-on-release" not in annotations
    with pytest.raises(NotFound):
        await cluster.cordon("missing", "gpu-xid", "gpu-default")


async def test_a_cordon_takes_over_another_policys_quarantine_in_one_write(
    api: ApiServer, client: Client
) -> None:
    """A hand-over (D76): the node stays unschedulable, the marks change owner in the one
    write, and `uncordon-on-release` stays as the first cordon wrote it."""
    api.store.create("nodes", node("n1"))
    cluster = KubernetesCluster(client, NAMESPACE)
    await cluster.cordon("n1", "node-networking", "network")
    before = writes(api, "nodes")

    await cluster.cordon("n1", "gpu-xid", "gpu-default")
    assert writes(api, "nodes") == before + 1
    got = api.store.get("nodes", "n1")
    assert got["spec"]["unschedulable"] is True
    ours = [t for t in got["spec"]["taints"] if t["key"] == QUARANTINE]
    assert ours == [{"key": QUARANTINE, "value": "gpu-xid", "effect": "NoSchedule"}]
    annotations = got["metadata"]["annotations"]
    assert annotations["remediation.gpuops.io/quarantined-by"] == "gpu-default"
    assert annotations["remediation.gpuops.io/uncordon-on-release"] == "true"


async def test_requarantine_points_the_taint_at_the_new_fault_and_never_cordons(
    api: ApiServer, client: Client
) -> None:
    """D77: after FaultWorsened the taint's value names the fault followed now."""
    api.store.create("nodes", node("n1", taints=[{"key": "other", "effect": "NoExecute"}]))
    api.store.create("nodes", node("n2"))
    cluster = KubernetesCluster(client, NAMESPACE)
    await cluster.cordon("n1", "gpu-xid-reset", "gpu-default")

    await cluster.requarantine("n1", "gpu-contact-support", "gpu-default")
    got = api.store.get("nodes", "n1")
    assert got["spec"]["taints"] == [
        {"key": "other", "effect": "NoExecute"},
        {"key": QUARANTINE, "value": "gpu-contact-support", "effect": "NoSchedule"},
    ]
    assert got["spec"]["unschedulable"] is True
    before = writes(api, "nodes")
    await cluster.requarantine("n1", "gpu-contact-support", "gpu-default")
    assert writes(api, "nodes") == before  # already so: nothing written

    await cluster.requarantine("n2", "gpu-contact-support", "gpu-default")
    got = api.store.get("nodes", "n2")
    assert not got["spec"].get("unschedulable")
    assert not got["spec"].get("taints")
    assert writes(api, "nodes") == before


async def test_drain_skips_daemonset_mirror_and_finished_pods_and_reports_a_pdb(
    api: ApiServer, client: Client
) -> None:
    api.store.create("nodes", node("n1"))
    ds_owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "ds",
            "uid": "u1",
            "controller": True,
        }
    ]
    api.store.create("pods", pod("daemon", "n1", ownerReferences=ds_owner), "training")
    api.store.create(
        "pods", pod("static", "n1", annotations={"kubernetes.io/config.mirror": "x"}), "training"
    )
    done = api.store.create("pods", pod("done", "n1"), "training")
    api.store.patch(
        "pods", "done", {"status": {"phase": "Succeeded"}}, "training", subresource="status"
    )
    assert done
    for name in ("work", "guarded"):
        api.store.create("pods", pod(name, "n1", labels={"app": name}), "training")
        # Running and Ready, as a kubelet would report (a Pending pod ignores PDBs).
        api.store.patch(
            "pods",
            name,
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            "training",
            subresource="status",
        )
    api.store.create(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": "training"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
        "training",
    )
    cluster = KubernetesCluster(client, NAMESPACE)

    before = await cluster.drain_status("n1")
    assert (before.remaining, before.attempted) == (2, False)

    status = await cluster.evict("n1", force=False)

    evictions = [e for e in api.request_log if e.subresource == "eviction"]
    assert sorted((e.name, e.code) for e in evictions) == [("guarded", 429), ("work", 201)]
    assert status.blocked_by_pdb is True
    assert "training/guarded" in status.message
    assert status.attempted is True
    # The API server's 429 names the budget (details.causes[reason=DisruptionBudget]).
    assert status.pdbs == ("training/guard",)
    assert status.blocked_pods == ("training/guarded",)
    assert "training/guard" in status.message

    await cluster.evict("n1", force=True)
    deleted = [e.name for e in api.request_log if e.verb == "delete" and e.resource == "pods"]
    assert "guarded" in deleted
    assert "daemon" not in deleted
    assert "static" not in deleted


async def test_job_executor_is_idempotent_by_name_and_reads_job_conditions(
    api: ApiServer, client: Client
) -> None:
    api.store.create("nodes", node("n1"))
    cluster = KubernetesCluster(client, NAMESPACE, {Action.GPUReset: JOB_TEMPLATE})
    executor = ActionExecutor(Executor.Job)
    name = job_name("n1-20261130t1200", Action.GPUReset, 2)

    absent = await cluster.executor_status("n1", "n1-20261130t1200", Action.GPUReset, 2, executor)
    assert absent.progress is Progress.Absent
    await cluster.run_executor("n1", "n1-20261130t1200", Action.GPUReset, 2, executor)
    await cluster.run_executor("n1", "n1-20261130t1200", Action.GPUReset, 2, executor)

    jobs = api.store.list("jobs", NAMESPACE)
    assert [j["metadata"]["name"] for j in jobs] == [name]
    job = jobs[0]
    assert job["metadata"]["labels"]["remediation.gpuops.io/action"] == "GPUReset"
    assert job["metadata"]["annotations"]["remediation.gpuops.io/remediation"] == (
        "n1-20261130t1200"
    )
    assert job["spec"]["template"]["spec"]["nodeName"] == "n1"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    running = await cluster.executor_status("n1", "n1-20261130t1200", Action.GPUReset, 2, executor)
    assert running.progress is Progress.InProgress

    api.store.patch(
        "jobs",
        name,
        {
            "status": {
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ]
            }
        },
        NAMESPACE,
        subresource="status",
    )
    failed = await cluster.executor_status("n1", "n1-20261130t1200", Action.GPUReset, 2, executor)
    assert failed.progress is Progress.Failed
    assert "BackoffLimitExceeded" in failed.message


async def test_job_executor_without_any_template_fails_permanently_and_says_where(
    api: ApiServer, client: Client
) -> None:
    api.store.create("nodes", node("n1"))
    cluster = KubernetesCluster(client, NAMESPACE)
    status = await cluster.executor_status("n1", "r", Action.Reboot, 1, ActionExecutor())
    assert status.progress is Progress.Failed
    assert status.permanent is True
    assert "spec.actions.reboot.jobTemplate" in status.message
    assert "--job-templates" in status.message


def test_job_names_fit_in_a_label_and_stay_distinct() -> None:
    long = "x" * 240
    one, two = job_name(long, Action.Reboot, 1), job_name(long, Action.Reboot, 2)
    assert max(len(one), len(two)) <= 63
    assert one != two
    assert job_name("gpu-17-20261130t1102", Action.GPUReset, 1) == (
        "gpu-17-20261130t1102-gpureset-1"
    )


async def test_node_agent_executor_requests_and_reads_the_acknowledgement(
    api: ApiServer, client: Client
) -> None:
    api.store.create("nodes", node("n1"))
    cluster = KubernetesCluster(client, NAMESPACE)
    agent = ActionExecutor(Executor.NodeAgent)

    await cluster.run_executor("n1", "rem", Action.Reboot, 1, agent)
    annotations = api.store.get("nodes", "n1")["metadata"]["annotations"]
    assert annotations["remediation.gpuops.io/agent-request"] == "Reboot:rem:1"
    status = await cluster.executor_status("n1", "rem", Action.Reboot, 1, agent)
    assert status.progress is Progress.InProgress

    api.store.patch(
        "nodes",
        "n1",
        {
            "metadata": {
                "annotations": {"remediation.gpuops.io/agent-ack": "Reboot:rem:1:Succeeded"}
            }
        },
    )
    assert (await cluster.executor_status("n1", "rem", Action.Reboot, 1, agent)).progress is (
        Progress.Succeeded
    )
    # An acknowledgement of another attempt does not count.
    other = await cluster.executor_status("n1", "rem", Action.Reboot, 2, agent)
    assert other.progress is Progress.Absent
    noop = await cluster.executor_status(
        "n1", "rem", Action.Reboot, 1, ActionExecutor(Executor.Noop)
    )
    assert noop.progress is Progress.Succeeded


async def test_karpenter_replace_finds_the_nodeclaim_by_provider_id(
    api: ApiServer, client: Client
) -> None:
    provider = "aws:///us-east-1a/i-0abc"
    api.store.create("nodes", node("n1", providerID=provider))
    api.store.create(
        "nodeclaims",
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "claim-1"},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass",
                    "name": "default",
                },
                "requirements": [],
            },
        },
    )
    api.store.patch(
        "nodeclaims", "claim-1", {"status": {"providerID": provider}}, subresource="status"
    )
    cluster = KubernetesCluster(client, NAMESPACE)
    assert await cluster.replacement_status("n1", ReplaceProvider.Karpenter) is Progress.Absent

    await cluster.replace("n1", ReplaceProvider.Karpenter)

    assert api.store.find("nodeclaims", "claim-1") is None
    assert api.store.find("nodes", "n1") is not None  # Karpenter, not us, removes the node
    api.store.delete("nodes", "n1")
    assert await cluster.replacement_status("n1", ReplaceProvider.Karpenter) is (Progress.Succeeded)


async def test_karpenter_replace_of_a_node_without_nodeclaim_is_refused_with_the_reason(
    api: ApiServer, client: Client
) -> None:
    """Issue 12, defect 12: the refusal was swallowed and the step waited out its timeout."""
    api.store.create("nodes", node("n1", providerID="aws:///us-east-1a/i-0none"))
    cluster = KubernetesCluster(client, NAMESPACE)

    with pytest.raises(Refused, match=r"has no NodeClaim.*DeleteNode or Manual"):
        await cluster.replace("n1", ReplaceProvider.Karpenter)
    with pytest.raises(Refused, match="has no NodeClaim"):
        await cluster.replacement_status("n1", ReplaceProvider.Karpenter)
    assert api.store.find("nodes", "n1") is not None


async def test_without_the_nodeclaim_crd_replace_is_refused_never_reported_done(
    api: ApiServer, client: Client
) -> None:
    """Issue 12, defect 12: with Karpenter's CRD absent, Replace reported NodeReplaced."""
    api.store.delete("customresourcedefinitions", "nodeclaims.karpenter.sh")
    body = node("n1", providerID="aws:///us-east-1a/i-0abc")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "claim-1", "uid": "u1"}
    ]
    api.store.create("nodes", body)
    cluster = KubernetesCluster(client, NAMESPACE)

    with pytest.raises(Refused, match=r"NodeClaim CRD .* is not installed"):
        await cluster.replacement_status("n1", ReplaceProvider.Karpenter)
    with pytest.raises(Refused, match="is not installed"):
        await cluster.replace("n1", ReplaceProvider.Karpenter)


async def test_manual_replace_labels_the_node_and_waits(api: ApiServer, client: Client) -> None:
    api.store.create("nodes", node("n1"))
    cluster = KubernetesCluster(client, NAMESPACE)
    await cluster.replace("n1", ReplaceProvider.Manual)
    labels = api.store.get("nodes", "n1")["metadata"]["labels"]
    assert labels["remediation.gpuops.io/replace-requested"] == "true"
    assert await cluster.replacement_status("n1", ReplaceProvider.Manual) is Progress.InProgress


def state(name: str = "n1-20261130t1200", **changes: Any) -> RemediationState:
    base: dict[str, Any] = dict(
        name=name,
        node="n1",
        policy="gpu",
        fault="gpu-xid",
        phase=Phase.Running,
        reason=Reason.StepStarted,
        message="Started Cordon.",
        started_at=NOW,
        step=Action.Cordon,
        step_index=0,
        attempt=1,
        step_started_at=NOW,
    )
    base.update(changes)
    return RemediationState(**base)


async def test_remediation_records_round_trip_and_reject_stale_writes(
    api: ApiServer, client: Client
) -> None:
    records = KubernetesRecords(client, EventRecorder(client, "test"))
    created = await records.create_remediation(state())
    assert created.state == state()
    updated = await records.update_remediation(
        state(phase=Phase.Waiting, cordoned_by_us=True), created.resource_version
    )
    assert updated.state.cordoned_by_us is True
    with pytest.raises(Conflict):
        await records.update_remediation(state(phase=Phase.Blocked), created.resource_version)
    with pytest.raises(Conflict):
        await records.create_remediation(state())
    api.store.create(
        "remediations",
        {
            "apiVersion": "remediation.gpuops.io/v1alpha1",
            "kind": "Remediation",
            "metadata": {"name": "other"},
            "spec": {"nodeName": "n2", "policyName": "else"},
        },
    )
    listed = await records.list_remediations("gpu")
    assert [r.state.name for r in listed] == ["n1-20261130t1200"]


async def test_an_interrupted_create_is_completed(api: ApiServer, client: Client) -> None:
    api.store.create(
        "remediations",
        {
            "apiVersion": "remediation.gpuops.io/v1alpha1",
            "kind": "Remediation",
            "metadata": {"name": "n1-20261130t1200"},
            "spec": {"nodeName": "n1", "policyName": "gpu"},
        },
    )
    records = KubernetesRecords(client, EventRecorder(client, "test"))
    assert await records.list_remediations("gpu") == []
    created = await records.create_remediation(state())
    assert created.state == state()


async def test_events_are_deduplicated_with_a_count(api: ApiServer, client: Client) -> None:
    recorder = EventRecorder(client, "operator-a")
    ref = ObjectRef("Node", "n1", "v1", uid="uid-1")
    await recorder.record(ref, "DrainBlockedByPDB", "blocked by guard", "Warning", NOW)
    await recorder.record(ref, "DrainBlockedByPDB", "blocked by guard", "Warning", NOW)
    await recorder.record(ref, "StepStarted", "Started Drain.", "Normal", NOW)
    events = api.store.list("events", "default")
    by_reason = {e["reason"]: e for e in events}
    assert len(events) == 2
    assert by_reason["DrainBlockedByPDB"]["count"] == 2
    assert by_reason["DrainBlockedByPDB"]["involvedObject"] == {
        "kind": "Node",
        "name": "n1",
        "apiVersion": "v1",
        "uid": "uid-1",
    }
    assert by_reason["DrainBlockedByPDB"]["reportingInstance"] == "operator-a"


async def test_drain_plan_waits_deletes_after_the_wait_and_can_spare_cpu_pods(
    api: ApiServer, client: Client
) -> None:
    """Workload-aware drain (D38): a pod allowed to complete is neither evicted nor deleted but
    counts as remaining; once its DeleteAfterTimeout wait is over it is deleted even though a
    PodDisruptionBudget would refuse its eviction; a GPU-only plan leaves CPU pods alone."""
    api.store.create("nodes", node("n1"))
    gpu = {"limits": {"nvidia.com/gpu": "8"}}
    for name, resources in (("trainer", gpu), ("shipper", {})):
        body = pod(name, "n1", labels={"app": name})
        body["spec"]["containers"][0]["resources"] = resources
        api.store.create("pods", body, "training")
        api.store.patch(
            "pods",
            name,
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            "training",
            subresource="status",
        )
    api.store.create(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": "training"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        },
        "training",
    )
    cluster = KubernetesCluster(client, NAMESPACE)
    rule = PodRule(PodHandling.DeleteAfterTimeout, selector=LabelSelector({"app": "trainer"}))
    gpu_only = DrainPlan((rule,), frozenset(), gpu_only=True)

    waiting = await cluster.evict("n1", False, gpu_only)
    assert waiting.remaining == 1  # the trainer, waiting; the CPU pod is not this drain's
    assert "1 allowed to complete first" in waiting.message
    assert not [e for e in api.request_log if e.resource == "pods" and e.verb == "delete"]
    assert not [e for e in api.request_log if e.subresource == "eviction"]

    over = DrainPlan((rule,), frozenset({0}), gpu_only=True)
    await cluster.evict("n1", False, over)
    deleted = [e.name for e in api.request_log if e.verb == "delete" and e.resource == "pods"]
    assert deleted == ["trainer"]
    assert api.store.find("pods", "shipper", "training") is not None
