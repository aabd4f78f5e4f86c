"""Where a restart of the node's pods stands, from the pods the API lists (D71)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from remediation_operator.domain import restarting
from remediation_operator.domain.fleet import NodePod, Progress
from remediation_operator.domain.policy import RestartTarget
from remediation_operator.domain.selectors import LabelSelector

AGENT = RestartTarget("kube-system", LabelSelector({"app.kubernetes.io/name": "agent"}))
PLUGIN = RestartTarget("gpu-operator", LabelSelector({"app": "plugin"}))
STARTED = datetime(2026, 12, 2, 4, 0, 0, 700_000, tzinfo=UTC)
OLD = STARTED - timedelta(days=3)


def pod(
    target: int, name: str, created: datetime, *, ready: bool = True, deleting: bool = False
) -> NodePod:
    namespace = (AGENT, PLUGIN)[target].namespace
    return NodePod(target, namespace, name, created, ready, deleting)


def test_an_old_pod_not_deleted_means_the_restart_did_not_happen() -> None:
    seen = restarting.observe((AGENT, PLUGIN), [pod(0, "a-1", OLD), pod(1, "p-1", OLD)], STARTED)
    assert seen.progress is Progress.Absent
    assert "kube-system/a-1 not deleted yet" in seen.message()


def test_a_pod_recreated_within_the_second_of_the_restart_is_a_new_one() -> None:
    """creationTimestamp has one-second resolution: 04:00:00 after a restart at 04:00:00.7."""
    same_second = STARTED.replace(microsecond=0)
    seen = restarting.observe((AGENT,), [pod(0, "a-2", same_second)], STARTED)
    assert seen.progress is Progress.Succeeded
    assert seen.back == ("kube-system/a-2",)


def test_terminating_old_pods_and_unready_new_ones_are_waited_for() -> None:
    pods = [
        pod(0, "a-1", OLD, deleting=True),
        pod(1, "p-1", OLD, deleting=True),
        pod(1, "p-2", STARTED + timedelta(seconds=3), ready=False),
    ]
    seen = restarting.observe((AGENT, PLUGIN), pods, STARTED)
    assert seen.progress is Progress.InProgress
    assert seen.waiting == (
        "kube-system/app.kubernetes.io/name=agent: no new pod yet",
        "gpu-operator/app=plugin: gpu-operator/p-2 not Ready yet",
    )


def test_an_entry_without_pods_on_the_node_has_nothing_to_restart() -> None:
    seen = restarting.observe((AGENT, PLUGIN), [pod(1, "p-2", STARTED)], STARTED)
    assert seen.progress is Progress.Succeeded
    assert seen.absent == ("kube-system/app.kubernetes.io/name=agent",)
    assert "no pod of kube-system/app.kubernetes.io/name=agent runs on this node" in (
        seen.message()
    )


def test_an_entry_whose_recorded_pod_is_gone_and_not_back_is_waited_for() -> None:
    """Deleted, removed by the kubelet, not recreated yet (or never): not "nothing to
    restart", since the record says the node ran it."""
    recorded = ("gpu-operator/p-1 (gpu-operator/app=plugin)",)
    seen = restarting.observe((AGENT, PLUGIN), [pod(0, "a-2", STARTED)], STARTED, recorded)
    assert seen.progress is Progress.InProgress
    assert seen.waiting == ("gpu-operator/app=plugin: no new pod yet",)


def test_the_observation_names_the_old_pods_for_the_record() -> None:
    pods = [pod(0, "a-1", OLD), pod(1, "p-1", OLD, deleting=True), pod(1, "p-2", STARTED)]
    seen = restarting.observation((AGENT, PLUGIN), pods, STARTED, 1)
    assert seen.holding == (
        "kube-system/a-1 (kube-system/app.kubernetes.io/name=agent)",
        "gpu-operator/p-1 (gpu-operator/app=plugin)",
    )
