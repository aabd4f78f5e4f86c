"""The three patch formats, as clients use them on built-in and custom resources."""

from __future__ import annotations

import pytest

from remediation_emulator import patching
from remediation_emulator.errors import ApiError
from remediation_emulator.store import Store
from tests.emulator.conftest import ready_node
from tests.emulator.crd_fixtures import remediation_crd


def test_merge_patch_merges_objects_deletes_nulls_replaces_lists() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}
    out = patching.merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3]})
    assert out == {"a": {"c": 2, "d": 3}, "l": [3], "keep": True}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}  # input untouched


def test_json_patch_operations_and_failed_test_is_422(store: Store) -> None:
    store.create("nodes", ready_node("a", zone="z1"))
    out = store.patch(
        "nodes",
        "a",
        [
            {"op": "test", "path": "/metadata/labels/zone", "value": "z1"},
            {"op": "add", "path": "/spec", "value": {"unschedulable": True}},
            {"op": "replace", "path": "/metadata/labels/zone", "value": "z2"},
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "slash"},
        ],
        patch_type="json",
    )
    assert out["spec"] == {"unschedulable": True}
    assert out["metadata"]["labels"] == {"zone": "z2", "a/b": "slash"}
    before = store.get("nodes", "a")
    with pytest.raises(ApiError) as err:
        store.patch(
            "nodes",
            "a",
            [
                {"op": "test", "path": "/metadata/labels/zone", "value": "z1"},
                {"op": "remove", "path": "/spec/unschedulable"},
            ],
            patch_type="json",
        )
    assert err.value.code == 422
    assert store.get("nodes", "a") == before


def test_json_patch_on_missing_path_is_422(store: Store) -> None:
    store.create("nodes", ready_node("a"))
    with pytest.raises(ApiError) as err:
        store.patch(
            "nodes",
            "a",
            [{"op": "replace", "path": "/spec/nothing/here", "value": 1}],
            patch_type="json",
        )
    assert err.value.code == 422


def test_strategic_merge_of_node_conditions_by_type(store: Store) -> None:
    store.create("nodes", ready_node("a"))
    out = store.patch(
        "nodes",
        "a",
        {
            "status": {
                "conditions": [
                    {
                        "type": "AcceleratedHardwareReady",
                        "status": "False",
                        "reason": "NvidiaXID79Error",
                    },
                    {"type": "Ready", "status": "True", "reason": "StillReady"},
                ]
            }
        },
        patch_type="strategic",
        subresource="status",
    )
    conditions = {c["type"]: c for c in out["status"]["conditions"]}
    assert set(conditions) == {"Ready", "AcceleratedHardwareReady"}
    assert conditions["Ready"]["reason"] == "StillReady"
    deleted = store.patch(
        "nodes",
        "a",
        {"status": {"conditions": [{"type": "AcceleratedHardwareReady", "$patch": "delete"}]}},
        patch_type="strategic",
        subresource="status",
    )
    assert [c["type"] for c in deleted["status"]["conditions"]] == ["Ready"]


def test_strategic_merge_replaces_taints_and_unions_finalizers(store: Store) -> None:
    node = ready_node("a")
    node["spec"] = {"taints": [{"key": "a", "effect": "NoSchedule"}]}
    node["metadata"]["finalizers"] = ["x/one"]  # type: ignore[index]
    store.create("nodes", node)
    out = store.patch(
        "nodes",
        "a",
        {
            "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
            "metadata": {"finalizers": ["x/two"]},
        },
        patch_type="strategic",
    )
    # NodeSpec.Taints has no patchStrategy in k8s.io/api: the list is replaced.
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    # ObjectMeta.Finalizers has patchStrategy merge: values are added.
    assert out["metadata"]["finalizers"] == ["x/one", "x/two"]


def test_strategic_merge_containers_by_name() -> None:
    target = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    out = patching.strategic_merge(target, {"spec": {"containers": [{"name": "b", "image": "2"}]}})
    assert out["spec"]["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]


def test_strategic_merge_on_custom_resource_is_415(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    store.create("remediations", {"metadata": {"name": "r"}, "spec": {"nodeName": "a"}})
    with pytest.raises(ApiError) as err:
        store.patch("remediations", "r", {"spec": {"fault": "x"}}, patch_type="strategic")
    assert (err.value.code, err.value.reason) == (415, "UnsupportedMediaType")
