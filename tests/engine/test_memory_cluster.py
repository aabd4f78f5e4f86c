"""The in-memory cluster behaves like the real one where the engine depends on it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    Executor,
    ReplaceProvider,
)
from remediation_operator.domain.remediation import Phase
from remediation_operator.engine.ports import Conflict, NotFound
from remediation_operator.sim.memory_cluster import (
    AGENT_ACK,
    AGENT_REQUEST,
    REPLACE_REQUESTED,
    ExecutorScript,
)
from tests.engine.conftest import Harness, state

JOB = ActionExecutor(Executor.Job)
AGENT = ActionExecutor(Executor.NodeAgent)


async def test_writes_with_a_stale_resource_version_conflict(harness: Harness) -> None:
    cluster = harness.cluster
    first = await cluster.create_remediation(state("gpu-0"))
    with pytest.raises(Conflict):
        await cluster.create_remediation(state("gpu-0"))
    second = await cluster.update_remediation(
        state("gpu-0", phase=Phase.Running, step=Action.Cordon), first.resource_version
    )
    assert second.resource_version != first.resource_version
    with pytest.raises(Conflict):
        await cluster.update_remediation(state("gpu-0"), first.resource_version)
    with pytest.raises(NotFound):
        await cluster.update_remediation(state("gpu-9"), "1")
    assert (await cluster.get_remediation(first.state.name)).state.step is Action.Cordon


async def test_effects_are_idempotent_and_counted_once(harness: Harness) -> None:
    cluster = harness.cluster
    for _ in range(3):
        await cluster.cordon("gpu-0", "gpu-xid-reset", "gpu-default")
        await cluster.protect_from_consolidation("gpu-0", True)
    assert cluster.calls[("cordon", "gpu-0")] == 1
    assert cluster.noops[("cordon", "gpu-0")] == 2
    node = cluster.node("gpu-0")
    assert len(node["spec"]["taints"]) == 1

    await cluster.release("gpu-0", uncordon=False)
    view = cluster.views()["gpu-0"]
    assert view.unschedulable, "release without uncordon keeps the cordon"
    assert not view.quarantined
    assert "karpenter.sh/do-not-disrupt" not in cluster.node("gpu-0")["metadata"]["annotations"]
    with pytest.raises(NotFound):
        await cluster.cordon("nope", "x", "p")


async def test_eviction_honours_pdbs_and_skips_daemonsets_mirror_and_finished_pods(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    cluster.add_pod("gpu-0", "guarded", protected_until=clock.now + timedelta(minutes=5))
    cluster.add_pod("gpu-0", "free")
    cluster.add_pod("gpu-0", "ds", daemonset=True)
    cluster.add_pod("gpu-0", "static", mirror=True)
    cluster.add_pod("gpu-0", "done", phase="Succeeded")
    assert (await cluster.drain_status("gpu-0")).attempted is False

    status = await cluster.evict("gpu-0", force=False)
    assert (status.remaining, status.blocked_by_pdb, status.attempted) == (1, True, True)

    clock.advance(timedelta(minutes=5))
    status = await cluster.evict("gpu-0", force=False)
    assert (status.remaining, status.blocked_by_pdb) == (0, False)
    assert [p.name for p in cluster.pods("gpu-0")] == ["ds", "static", "done"]


async def test_a_forced_drain_ignores_the_pdb(harness: Harness) -> None:
    cluster = harness.cluster
    cluster.add_pod("gpu-0", "guarded", protected_until=harness.clock.now + timedelta(hours=1))
    status = await cluster.evict("gpu-0", force=True)
    assert status.remaining == 0


async def test_job_executors_finish_after_their_scripted_duration(harness: Harness) -> None:
    cluster, clock = harness.cluster, harness.clock
    cluster.scripts[Action.GPUReset] = ExecutorScript(
        timedelta(minutes=2), succeed=False, permanent=True
    )
    await cluster.run_executor("gpu-0", "r1", Action.GPUReset, 1, JOB)
    await cluster.run_executor("gpu-0", "r1", Action.GPUReset, 1, JOB)
    assert len(cluster.executions("gpu-0")) == 1, "same name, same Job"
    assert cluster.next_due() == clock.now + timedelta(minutes=2)
    status = await cluster.executor_status("gpu-0", "r1", Action.GPUReset, 1, JOB)
    assert status.progress is Progress.InProgress

    clock.advance(timedelta(minutes=2))
    status = await cluster.executor_status("gpu-0", "r1", Action.GPUReset, 1, JOB)
    assert (status.progress, status.permanent) == (Progress.Failed, True)
    assert cluster.next_due() is None
    other = await cluster.executor_status("gpu-0", "r1", Action.GPUReset, 2, JOB)
    assert other.progress is Progress.Absent


async def test_a_node_agent_is_asked_by_annotation_and_answers_by_annotation(
    harness: Harness,
) -> None:
    cluster = harness.cluster
    boot = cluster.views()["gpu-0"].boot_id
    await cluster.run_executor("gpu-0", "r1", Action.Reboot, 2, AGENT)
    annotations = cluster.node("gpu-0")["metadata"]["annotations"]
    assert annotations[AGENT_REQUEST] == "Reboot:r1:2"
    status = await cluster.executor_status("gpu-0", "r1", Action.Reboot, 2, AGENT)
    assert status.progress is Progress.InProgress

    cluster.finish_execution("gpu-0", Action.Reboot)

    assert annotations[AGENT_ACK] == "Reboot:r1:2:Succeeded"
    status = await cluster.executor_status("gpu-0", "r1", Action.Reboot, 2, AGENT)
    assert status.progress is Progress.Succeeded
    assert cluster.views()["gpu-0"].boot_id != boot, "a successful reboot reboots the node"
    noop = await cluster.executor_status(
        "gpu-0", "r1", Action.Reboot, 3, ActionExecutor(Executor.Noop)
    )
    assert noop.progress is Progress.Succeeded


@pytest.mark.parametrize(
    ("provider", "during"),
    [
        (ReplaceProvider.Karpenter, Progress.InProgress),
        (ReplaceProvider.Manual, Progress.InProgress),
        (ReplaceProvider.DeleteNode, Progress.Succeeded),
    ],
)
async def test_replacement_providers(
    harness: Harness, provider: ReplaceProvider, during: Progress
) -> None:
    cluster, clock = harness.cluster, harness.clock
    cluster.replace_duration = timedelta(minutes=30)
    assert await cluster.replacement_status("gpu-0", provider) is Progress.Absent

    await cluster.replace("gpu-0", provider)

    assert await cluster.replacement_status("gpu-0", provider) is during
    if provider is ReplaceProvider.Manual:
        assert cluster.node("gpu-0")["metadata"]["labels"][REPLACE_REQUESTED] == "true"
    clock.advance(timedelta(minutes=30))
    assert not cluster.has_node("gpu-0")
    assert await cluster.replacement_status("gpu-0", provider) is Progress.Succeeded


async def test_changes_are_reported_like_watch_events(harness: Harness) -> None:
    cluster = harness.cluster
    cluster.take_changed()
    cluster.set_condition("gpu-1", "GPUHealthy", "False", "Xid")
    await cluster.cordon("gpu-2", "f", "p")
    await cluster.cordon("gpu-2", "f", "p")
    cluster.delete_node("gpu-3")
    assert cluster.take_changed() == {"gpu-1", "gpu-2", "gpu-3"}
    assert cluster.take_changed() == set()
    with pytest.raises(ValueError, match="cannot go back"):
        cluster.advance(harness.clock.now - timedelta(seconds=1))
