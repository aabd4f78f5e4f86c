"""Objects the builder creates, checked without a server: names, owners, validation."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from remediation_emulator.fleet import jobs, manifests
from remediation_emulator.fleet.manifests import Shape, ShapeError

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_zones_are_spread_round_robin_and_names_are_stable() -> None:
    shape = Shape(nodes=5)
    assert [shape.zone(i) for i in range(4)] == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1a",
    ]
    assert shape.node_name(7) == "gpu-0007"


def test_the_same_seed_gives_the_same_instances_and_boot_ids() -> None:
    first, second = random.Random(4), random.Random(4)
    assert manifests.instance_id(first) == manifests.instance_id(second)
    assert manifests.new_uuid(first) == manifests.new_uuid(second)
    assert manifests.instance_id(random.Random(4)).startswith("i-0")


def test_a_node_without_the_karpenter_finalizer_when_asked() -> None:
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
             "metadata": {"name": "c", "uid": "u"}}  # fmt: skip
    kwargs = dict(index=0, zone="us-east-1a", claim=claim, provider="aws:///x/i-1",
                  boot_id=manifests.new_uuid(random.Random(1)), now=NOW)  # fmt: skip
    with_finalizer = manifests.node(Shape(), **kwargs)  # type: ignore[arg-type]
    without = manifests.node(Shape(node_finalizer=False), **kwargs)  # type: ignore[arg-type]
    assert with_finalizer["metadata"]["finalizers"] == ["karpenter.sh/termination"]
    assert "finalizers" not in without["metadata"]


def test_the_nodeclaim_crd_fixture_is_structural_with_a_status_subresource() -> None:
    crd = manifests.nodeclaim_crd()
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1"
    assert version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["nodeClassRef", "requirements"]
    assert spec["properties"]["nodeClassRef"]["required"] == ["group", "kind", "name"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodes": -1}, "nodes: must not be negative"),
        ({"zones": ()}, "zones: at least one zone"),
        ({"nodes_per_training_job": 0}, "nodes_per_training_job: must be at least 1"),
    ],
)
def test_an_impossible_shape_is_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        Shape(**change)  # type: ignore[arg-type]


def test_jobs_are_pinned_by_node_name_or_hostname_selector() -> None:
    by_name = {"spec": {"template": {"spec": {"nodeName": "gpu-0001"}}}}
    by_selector = {
        "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "gpu-0002"}}}}
    }
    unpinned = {
        "spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"}}}}
    }
    assert jobs.pinned_node(by_name) == "gpu-0001"
    assert jobs.pinned_node(by_selector) == "gpu-0002"
    assert jobs.pinned_node(unpinned) is None


def test_a_finished_jobs_end_time_is_its_completion_or_failure_time() -> None:
    done = jobs.succeeded_status({}, NOW)
    assert jobs.finished(done)
    assert jobs.finished_at(done) == NOW
    failed = jobs.failed_status({}, 1, NOW)
    assert jobs.finished(failed)
    assert jobs.finished_at(failed) == NOW
    assert not jobs.finished(jobs.started_status(NOW))
