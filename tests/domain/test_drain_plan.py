"""Workload-aware drain (issue 15): which pods a Drain moves, how, and when their waits end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from remediation_operator.domain import drain
from remediation_operator.domain.effects import DrainPlan, Evict
from remediation_operator.domain.policy import (
    Action,
    DrainOptions,
    PodHandling,
    PodRule,
    Step,
)
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.k8s.drain import Move, completes, evictable, move, uses_gpu
from tests.domain.fake_cluster import MIN, T0, FakeCluster, node, policy, run, xid_fault

TRAINING = PodRule(PodHandling.AllowCompletion, frozenset({"training"}), wait_for=30 * MIN)
BATCH = PodRule(
    PodHandling.DeleteAfterTimeout,
    selector=LabelSelector({"team": "batch"}),
    wait_for=10 * MIN,
)


def pod(
    namespace: str = "training",
    owner: str | None = "Job",
    labels: dict[str, str] | None = None,
    gpus: str | None = None,
) -> dict[str, Any]:
    refs = [{"kind": owner, "name": "x", "controller": True}] if owner else []
    container: dict[str, Any] = {"name": "main"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "metadata": {
            "name": "p",
            "namespace": namespace,
            "labels": labels or {},
            "ownerReferences": refs,
        },
        "spec": {"containers": [container]},
        "status": {"phase": "Running"},
    }


def test_waits_count_from_the_drains_first_start() -> None:
    options = DrainOptions(pods=(TRAINING, BATCH))
    p = policy(drain=options)
    assert drain.plan(p, "gpu-xid-reset", None, T0).expired == frozenset()
    assert drain.plan(p, "gpu-xid-reset", T0, T0 + 10 * MIN).expired == {1}
    assert drain.plan(p, "gpu-xid-reset", T0, T0 + 30 * MIN).expired == {0, 1}


def test_gpu_only_applies_to_a_drain_whose_next_rung_is_a_gpu_reset() -> None:
    on = DrainOptions(gpu_pods_only_before_reset=True)
    assert drain.gpu_only(policy(drain=on), "gpu-xid-reset")
    assert not drain.gpu_only(policy(), "gpu-xid-reset")
    no_reset = replace(
        xid_fault(),
        name="reboot-only",
        ladder=(Step(Action.Cordon), Step(Action.Drain), Step(Action.Reboot)),
    )
    assert not drain.gpu_only(policy(drain=on, faults=(no_reset,)), "reboot-only")
    assert not drain.gpu_only(policy(drain=on), "agent-silent")  # no Drain at all


@pytest.mark.parametrize(
    ("target", "expired", "expected"),
    [
        (pod(), frozenset(), Move.WAIT),  # a Job's pod may finish
        (pod(owner=None), frozenset(), Move.WAIT),  # a bare pod too
        (pod(owner="ReplicaSet"), frozenset(), Move.EVICT),  # never finishes by itself
        (pod(), frozenset({0}), Move.EVICT),  # its wait is over: evicted (PDBs honoured)
        (pod(namespace="web"), frozenset(), Move.EVICT),  # no rule: kubectl drain's way
        (pod(namespace="web", labels={"team": "batch"}), frozenset(), Move.WAIT),
        (pod(namespace="web", labels={"team": "batch"}), frozenset({1}), Move.DELETE),
    ],
)
def test_the_first_rule_selecting_a_pod_decides(
    target: dict[str, Any], expired: frozenset[int], expected: Move
) -> None:
    assert move(target, DrainPlan((TRAINING, BATCH), expired)) is expected


def test_kubectl_drain_rules_for_daemonsets_mirror_and_unmanaged_pods() -> None:
    assert not evictable(pod(owner="DaemonSet"))
    mirror = pod(owner=None)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    assert not evictable(mirror)
    assert evictable(pod(owner=None))  # unmanaged: evicted, as `kubectl drain --force`
    emptydir = pod(owner="ReplicaSet")
    emptydir["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    assert evictable(emptydir)  # as `--delete-emptydir-data`
    assert completes(pod(owner=None))
    assert not completes(pod(owner="StatefulSet"))


def test_gpu_pods_are_those_requesting_nvidia_gpus() -> None:
    assert uses_gpu(pod(gpus="8"))
    assert not uses_gpu(pod(gpus="0"))
    assert not uses_gpu(pod())


def test_the_drain_effect_carries_the_plan_and_its_waits_expire_on_later_checks() -> None:
    cluster = FakeCluster(policy(drain=DrainOptions(pods=(TRAINING,))), {"gpu-1": node()})
    run(cluster, "fault plan +2m plan plan +5m plan")
    assert cluster.active["gpu-1"].step is Action.Drain
    assert cluster.last is not None
    (evict,) = [e for e in cluster.last.effects if isinstance(e, Evict)]
    assert evict.plan == DrainPlan((TRAINING,), frozenset())
    run(cluster, "+30m plan")
    assert cluster.last is not None
    evicts = [e for e in cluster.last.effects if isinstance(e, Evict)]
    assert [e.plan.expired for e in evicts] == [frozenset({0})]
