"""Recovery needs every GPU advertised again (issue 21 finding 5, D68).

The NVIDIA device plugin marks a GPU unhealthy for the life of its process after a critical
XID (NVIDIA/k8s-device-plugin, internal/rm/health.go), so after a reset or a reboot that fixed
the GPU the node still advertises fewer `nvidia.com/gpu` than its capacity until the plugin's
pod restarts. A node given back like that cannot take the 8-GPU job it is there for: the
incident holds it cordoned (`GPUsNotAdvertised`) until allocatable equals capacity.
"""

from __future__ import annotations

import pytest

from remediation_operator.domain.effects import Announce, Release, Severity
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase
from tests.domain.fake_cluster import FakeCluster, node, policy, run

REPAIRED = "fault plan +2m plan plan +5m plan ok plan ok plan"
"""Cordon, drain, then a GPU reset that succeeded; the fault is still on the condition."""


def eight_gpu_fleet() -> FakeCluster:
    return FakeCluster(policy(), {"gpu-1": node(gpu_capacity=8, gpu_allocatable=8)})


def repaired_but_one_gpu_short(cluster: FakeCluster) -> None:
    """The reset fixed the GPU and the agent reports healthy; the device plugin still holds
    the GPU it saw fail as unhealthy: 7 of 8 advertised. Probation then runs out."""
    run(cluster, REPAIRED)
    state = cluster.active["gpu-1"]
    assert (state.step, state.step_finished_at is not None) == (Action.GPUReset, True)
    cluster.edit("gpu-1", gpu_allocatable=7)
    run(cluster, "clear plan")
    assert cluster.active["gpu-1"].reason is Reason.FaultCleared
    run(cluster, "+10m plan")


def test_a_node_short_of_gpus_after_probation_stays_cordoned_with_the_reason() -> None:
    cluster = eight_gpu_fleet()
    repaired_but_one_gpu_short(cluster)

    state = cluster.active["gpu-1"]
    assert (state.phase, state.reason) == (Phase.Blocked, Reason.GPUsNotAdvertised)
    assert "7 of its 8 nvidia.com/gpu" in state.message
    assert "device plugin" in state.message
    assert cluster.finished == []
    view = cluster.nodes["gpu-1"]
    assert view.unschedulable, "never uncordoned short of GPUs"
    assert view.quarantined
    assert cluster.last is not None
    assert not any(isinstance(e, Release) for e in cluster.last.effects)
    (warning,) = [e for e in cluster.last.effects if isinstance(e, Announce)]
    assert (warning.reason, warning.severity) == (Reason.GPUsNotAdvertised, Severity.Warning)

    # Re-checked later: still held, announced once.
    again = run(cluster, "+30m plan")
    assert cluster.active["gpu-1"].reason is Reason.GPUsNotAdvertised
    assert not any(isinstance(e, (Announce, Release)) for e in again.effects)
    assert cluster.nodes["gpu-1"].unschedulable


def test_the_node_recovers_once_the_device_plugin_advertises_every_gpu() -> None:
    cluster = eight_gpu_fleet()
    repaired_but_one_gpu_short(cluster)

    cluster.edit("gpu-1", gpu_allocatable=8)  # the device plugin's pod restarted
    run(cluster, "+5s plan")

    (state,) = cluster.finished
    assert (state.phase, state.reason) == (Phase.Succeeded, Reason.Recovered)
    assert not cluster.nodes["gpu-1"].unschedulable
    assert not cluster.nodes["gpu-1"].quarantined


def test_the_fault_returning_while_held_resumes_the_ladder() -> None:
    cluster = eight_gpu_fleet()
    repaired_but_one_gpu_short(cluster)

    run(cluster, "fault plan")

    state = cluster.active["gpu-1"]
    assert state.reason is not Reason.GPUsNotAdvertised
    assert state.healthy_since is None, "probation is over: the fault is back"
    assert cluster.nodes["gpu-1"].unschedulable


def test_an_uncordon_by_hand_while_held_is_the_administrators() -> None:
    """Our recovery never released this node (it was short), so an uncordon now is a human's:
    the incident ends as theirs, not as a recovery we already gave back."""
    cluster = eight_gpu_fleet()
    repaired_but_one_gpu_short(cluster)

    run(cluster, "uncordon plan")

    (state,) = cluster.finished
    assert (state.phase, state.reason) == (Phase.Cancelled, Reason.AdminUncordoned)


def test_our_release_lost_after_the_gpus_came_back_is_still_a_recovery() -> None:
    """The release is applied before the `Recovered` record; a crash in between must not read
    as an administrator's uncordon once the node advertises every GPU."""
    cluster = eight_gpu_fleet()
    repaired_but_one_gpu_short(cluster)
    cluster.edit("gpu-1", gpu_allocatable=8)
    lost = cluster.decide()
    for effect in lost.effects:
        cluster.apply(effect)
    assert not cluster.nodes["gpu-1"].unschedulable

    run(cluster, "+5s plan")

    (state,) = cluster.finished
    assert (state.phase, state.reason) == (Phase.Succeeded, Reason.Recovered)


@pytest.mark.parametrize(
    ("capacity", "allocatable", "short"),
    [
        (8, 8, False),
        (8, 7, True),
        (8, None, True),  # the device plugin advertises none
        (8, 0, True),
        (None, None, False),  # no GPU counts known (a CPU node, or a view without them)
        (None, 3, False),
        (0, 0, False),
    ],
)
def test_a_node_is_short_only_when_it_advertises_fewer_than_a_known_capacity(
    capacity: int | None, allocatable: int | None, short: bool
) -> None:
    view = NodeView("gpu-1", gpu_capacity=capacity, gpu_allocatable=allocatable)
    assert view.gpus_short is short


def test_a_node_without_gpu_counts_recovers_as_before() -> None:
    cluster = FakeCluster(policy(), {"gpu-1": node()})
    run(cluster, REPAIRED + " clear plan +10m plan")

    (state,) = cluster.finished
    assert state.reason is Reason.Recovered


def test_our_release_lost_before_a_gpu_was_marked_again_is_still_a_recovery() -> None:
    """The recovery's release was applied (taint off, uncordoned)
    but its record lost; a GPU is marked before the next plan. The node was given back by us:
    the next plan records the recovery, not an administrator's uncordon, and does not hold."""
    cluster = eight_gpu_fleet()
    repaired_but_one_gpu_short(cluster)
    cluster.edit("gpu-1", gpu_allocatable=8)
    lost = cluster.decide()
    for effect in lost.effects:
        cluster.apply(effect)
    cluster.edit("gpu-1", gpu_allocatable=7)  # the plugin marks a GPU again

    run(cluster, "+5s plan")

    (state,) = cluster.finished
    assert (state.phase, state.reason) == (Phase.Succeeded, Reason.Recovered)
