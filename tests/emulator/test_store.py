"""Object semantics of the emulator's store: what any client sees after each write."""

from __future__ import annotations

import pytest

from remediation_emulator.errors import ApiError
from remediation_emulator.store import Store
from tests.emulator.conftest import RUNNING_READY, ManualClock, pod, ready_node
from tests.emulator.crd_fixtures import remediation_crd


def test_create_sets_uid_timestamp_and_increasing_resource_versions(store: Store) -> None:
    a = store.create("nodes", ready_node("a"))
    b = store.create("nodes", ready_node("b"))
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert a["metadata"]["creationTimestamp"] == "2026-11-30T12:00:00Z"
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert a["apiVersion"] == "v1"
    assert a["kind"] == "Node"


def test_create_keeps_node_status_but_resets_pod_status(store: Store) -> None:
    node = store.create("nodes", ready_node("a"))
    assert node["status"]["conditions"][0]["type"] == "Ready"
    created = store.create("pods", {**pod("p", "a"), **RUNNING_READY})
    assert created["status"] == {"phase": "Pending"}


def test_duplicate_name_is_409_already_exists(store: Store) -> None:
    store.create("nodes", ready_node("a"))
    with pytest.raises(ApiError) as err:
        store.create("nodes", ready_node("a"))
    status = err.value.to_status()
    assert (status["code"], status["reason"]) == (409, "AlreadyExists")
    assert status["details"] == {"name": "a", "kind": "nodes"}
    assert status["message"] == 'nodes "a" already exists'


def test_generate_name_appends_five_characters(store: Store) -> None:
    created = store.create("configmaps", {"metadata": {"generateName": "cfg-"}}, "default")
    name = created["metadata"]["name"]
    assert name.startswith("cfg-")
    assert len(name) == len("cfg-") + 5


@pytest.mark.parametrize("bad", ["Upper", "under_score", "-lead", "a" * 254])
def test_invalid_names_are_422_naming_the_field(store: Store, bad: str) -> None:
    with pytest.raises(ApiError) as err:
        store.create("nodes", ready_node(bad))
    status = err.value.to_status()
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.name"
    assert store.list("nodes").items == []


def test_namespaced_object_in_missing_namespace_is_404(store: Store) -> None:
    with pytest.raises(ApiError) as err:
        store.create("configmaps", {"metadata": {"name": "c"}}, "nope")
    assert err.value.code == 404
    assert err.value.message == 'namespaces "nope" not found'


def test_default_namespaces_exist(store: Store) -> None:
    names = {n["metadata"]["name"] for n in store.list("namespaces").items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names


def test_stale_resource_version_in_update_is_409_conflict_and_changes_nothing(store: Store) -> None:
    node = store.create("nodes", ready_node("a"))
    store.patch("nodes", "a", {"metadata": {"labels": {"x": "1"}}})
    stale = {**node, "metadata": {**node["metadata"], "labels": {"x": "2"}}}
    with pytest.raises(ApiError) as err:
        store.replace("nodes", "a", stale)
    assert err.value.code == 409
    assert err.value.reason == "Conflict"
    assert "the object has been modified" in err.value.message
    assert store.get("nodes", "a")["metadata"]["labels"] == {"x": "1"}


def test_stale_resource_version_in_patch_body_is_409(store: Store) -> None:
    node = store.create("nodes", ready_node("a"))
    store.patch("nodes", "a", {"spec": {"unschedulable": True}})
    with pytest.raises(ApiError) as err:
        store.patch(
            "nodes",
            "a",
            {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"unschedulable": False},
            },
        )
    assert err.value.code == 409
    assert store.get("nodes", "a")["spec"]["unschedulable"] is True


def test_noop_patch_keeps_resource_version(store: Store) -> None:
    store.create("nodes", ready_node("a", zone="z1"))
    before = store.get("nodes", "a")["metadata"]["resourceVersion"]
    after = store.patch("nodes", "a", {"metadata": {"labels": {"zone": "z1"}}})
    assert after["metadata"]["resourceVersion"] == before


def test_generation_bumps_on_spec_change_only(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    store.create("remediations", {"metadata": {"name": "r"}, "spec": {"nodeName": "a"}})
    labelled = store.patch("remediations", "r", {"metadata": {"labels": {"k": "v"}}})
    assert labelled["metadata"]["generation"] == 1
    status = store.patch(
        "remediations", "r", {"status": {"phase": "Running"}}, subresource="status"
    )
    assert status["metadata"]["generation"] == 1
    changed = store.patch("remediations", "r", {"spec": {"fault": "xid"}})
    assert changed["metadata"]["generation"] == 2


def test_status_subresource_changes_only_status(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    store.create("remediations", {"metadata": {"name": "r"}, "spec": {"nodeName": "a"}})
    out = store.patch(
        "remediations",
        "r",
        {
            "spec": {"nodeName": "b"},
            "status": {"phase": "Running"},
            "metadata": {"labels": {"sneaky": "yes"}},
        },
        subresource="status",
    )
    assert out["spec"]["nodeName"] == "a"
    assert out["status"] == {"phase": "Running"}
    assert "labels" not in out["metadata"]


def test_main_resource_ignores_status_when_subresource_exists(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    created = store.create(
        "remediations",
        {"metadata": {"name": "r"}, "spec": {"nodeName": "a"}, "status": {"phase": "Running"}},
    )
    assert "status" not in created
    out = store.patch("remediations", "r", {"spec": {"fault": "f"}, "status": {"phase": "Failed"}})
    assert out["spec"]["fault"] == "f"
    assert "status" not in out


def test_custom_resource_schema_prunes_defaults_and_validates(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    created = store.create(
        "remediations", {"metadata": {"name": "r"}, "spec": {"nodeName": "a", "unknown": 1}}
    )
    assert created["spec"] == {"nodeName": "a", "attempt": 1}
    with pytest.raises(ApiError) as err:
        store.create("remediations", {"metadata": {"name": "bad"}, "spec": {"attempt": 0}})
    fields = {c["field"] for c in err.value.to_status()["details"]["causes"]}
    assert fields == {"spec.attempt", "spec.nodeName"}
    with pytest.raises(ApiError) as err:
        store.patch("remediations", "r", {"status": {"phase": "Exploded"}}, subresource="status")
    assert err.value.code == 422
    assert "supported values" in err.value.message


def test_custom_resource_put_needs_resource_version(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    obj = store.create("remediations", {"metadata": {"name": "r"}, "spec": {"nodeName": "a"}})
    body = {**obj, "metadata": {"name": "r"}}
    with pytest.raises(ApiError) as err:
        store.replace("remediations", "r", body)
    assert err.value.code == 422
    assert err.value.causes[0].field == "metadata.resourceVersion"


def test_finalizers_hold_deletion_until_the_last_is_removed(
    store: Store, clock: ManualClock
) -> None:
    store.create("configmaps", {"metadata": {"name": "c", "finalizers": ["a/x", "b/y"]}}, "default")
    obj, gone = store.delete("configmaps", "c", "default")
    assert not gone
    assert obj["metadata"]["deletionTimestamp"] == "2026-11-30T12:00:00Z"
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 0
    with pytest.raises(ApiError) as err:
        store.patch(
            "configmaps", "c", {"metadata": {"finalizers": ["a/x", "b/y", "c/z"]}}, "default"
        )
    assert err.value.code == 422
    store.patch("configmaps", "c", {"metadata": {"finalizers": ["b/y"]}}, "default")
    assert store.get("configmaps", "c", "default")["metadata"]["finalizers"] == ["b/y"]
    store.patch("configmaps", "c", {"metadata": {"finalizers": None}}, "default")
    with pytest.raises(ApiError) as err:
        store.get("configmaps", "c", "default")
    assert err.value.code == 404


def test_bound_pod_deletes_gracefully_and_unbound_pod_at_once(
    store: Store, clock: ManualClock
) -> None:
    store.create("pods", pod("bound", "n1"))
    store.patch("pods", "bound", RUNNING_READY, "default", subresource="status")
    store.create("pods", pod("loose"))
    obj, gone = store.delete("pods", "bound", "default")
    assert not gone
    assert obj["metadata"]["deletionTimestamp"] == "2026-11-30T12:00:30Z"
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 30
    _, gone = store.delete("pods", "loose", "default")
    assert gone
    _, gone = store.delete("pods", "bound", "default", grace_period_seconds=0)
    assert gone
    assert store.list("pods", "default").items == []


def test_delete_precondition_on_uid_is_409(store: Store) -> None:
    store.create("nodes", ready_node("a"))
    with pytest.raises(ApiError) as err:
        store.delete("nodes", "a", preconditions={"uid": "other"})
    assert err.value.code == 409
    assert store.get("nodes", "a")


def test_crd_becomes_served_and_established(store: Store) -> None:
    crd = store.create("customresourcedefinitions", remediation_crd())
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert store.lookup("remediation.gpuops.io", "v1alpha1", "remediations") is not None
    store.delete("customresourcedefinitions", crd["metadata"]["name"])
    assert store.lookup("remediation.gpuops.io", "v1alpha1", "remediations") is None


def test_invalid_crd_is_422(store: Store) -> None:
    crd = remediation_crd()
    crd["metadata"]["name"] = "wrong.name.io"
    with pytest.raises(ApiError) as err:
        store.create("customresourcedefinitions", crd)
    assert err.value.code == 422
    assert err.value.causes[0].field == "metadata.name"


def test_label_and_field_selectors(store: Store) -> None:
    store.create("nodes", ready_node("a", pool="p1", zone="z1"))
    store.create("nodes", ready_node("b", pool="p2", zone="z1"))
    store.create("nodes", ready_node("c", zone="z2"))

    def names(**kw: str) -> list[str]:
        return [n["metadata"]["name"] for n in store.list("nodes", **kw).items]  # type: ignore[arg-type]

    assert names(label_selector="pool=p1") == ["a"]
    assert names(label_selector="pool==p1") == ["a"]
    assert names(label_selector="pool!=p1") == ["b", "c"]
    assert names(label_selector="pool in (p1,p2),zone=z1") == ["a", "b"]
    assert names(label_selector="pool notin (p1)") == ["b", "c"]
    assert names(label_selector="pool") == ["a", "b"]
    assert names(label_selector="!pool") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b") == ["a", "c"]
    with pytest.raises(ApiError) as err:
        store.list("nodes", field_selector="spec.providerID=x")
    assert (err.value.code, err.value.message) == (
        400,
        "field label not supported: spec.providerID",
    )


def test_pod_field_selectors_by_node_and_phase(store: Store) -> None:
    store.create("pods", pod("p1", "n1"))
    store.create("pods", pod("p2", "n2"))
    store.create("pods", pod("p3", "n1", namespace="kube-system"))
    store.patch("pods", "p1", RUNNING_READY, "default", subresource="status")
    on_n1 = store.list("pods", field_selector="spec.nodeName=n1").items
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in on_n1] == [
        ("default", "p1"),
        ("kube-system", "p3"),
    ]
    running = store.list("pods", "default", field_selector="status.phase=Running").items
    assert [p["metadata"]["name"] for p in running] == ["p1"]


def test_pagination_walks_everything_once_and_counts_remaining(store: Store) -> None:
    for i in range(7):
        store.create("nodes", ready_node(f"n{i}"))
    seen: list[str] = []
    first = store.list("nodes", limit=3)
    assert first.remaining == 4
    assert first.continue_token
    token = first.continue_token
    seen += [n["metadata"]["name"] for n in first.items]
    store.create("nodes", ready_node("zz"))  # created mid-listing: later pages may show it
    while token:
        page = store.list("nodes", limit=3, continue_token=token)
        seen += [n["metadata"]["name"] for n in page.items]
        token = page.continue_token
    assert seen == [f"n{i}" for i in range(7)] + ["zz"]


def test_expired_continue_token_is_410(store: Store) -> None:
    for i in range(3):
        store.create("nodes", ready_node(f"n{i}"))
    page = store.list("nodes", limit=1)
    store.create("nodes", ready_node("later"))
    store.compact()
    with pytest.raises(ApiError) as err:
        store.list("nodes", limit=1, continue_token=page.continue_token)
    assert (err.value.code, err.value.reason) == (410, "Expired")


def test_namespace_deletion_removes_its_content(store: Store) -> None:
    store.create("namespaces", {"metadata": {"name": "team"}})
    store.create("configmaps", {"metadata": {"name": "c"}}, "team")
    store.delete("namespaces", "team")
    assert store.list("configmaps", "team").items == []


def test_go_zero_values_are_filled_like_a_real_server(store: Store) -> None:
    node = store.create(
        "nodes", {"metadata": {"name": "a"}, "status": {"nodeInfo": {"bootID": "b1"}}}
    )
    assert node["status"]["nodeInfo"]["bootID"] == "b1"
    assert node["status"]["nodeInfo"]["machineID"] == ""
    store.create("pods", pod("p", "a"))
    patched = store.patch(
        "pods",
        "p",
        {"status": {"containerStatuses": [{"name": "main", "ready": True}]}},
        "default",
        subresource="status",
    )
    assert patched["status"]["containerStatuses"][0] == {
        "name": "main",
        "ready": True,
        "restartCount": 0,
        "image": "",
        "imageID": "",
    }


def test_strict_field_validation_rejects_undeclared_fields(store: Store) -> None:
    store.create("customresourcedefinitions", remediation_crd())
    body = {"metadata": {"name": "r"}, "spec": {"nodeName": "a", "typo": 1}}
    with pytest.raises(ApiError) as err:
        store.create("remediations", body, field_validation="Strict")
    assert err.value.code == 400
    assert 'unknown field "spec.typo"' in err.value.message
    assert store.list("remediations").items == []


def _job(restart_policy: str | None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "reset", "image": "nvidia/smi"}]}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return {"metadata": {"name": "gpu-reset"}, "spec": {"template": {"spec": spec}}}


def test_job_is_defaulted_and_needs_never_or_on_failure(store: Store) -> None:
    with pytest.raises(ApiError) as err:
        store.create("jobs", _job(None), "default")
    assert err.value.code == 422
    assert err.value.causes[0].field == "spec.template.spec.restartPolicy"
    assert 'Unsupported value: "Always"' in err.value.message
    job = store.create("jobs", _job("Never"), "default")
    uid = job["metadata"]["uid"]
    assert job["spec"]["backoffLimit"] == 6
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"]["job-name"] == "gpu-reset"
    with pytest.raises(ApiError) as immutable:
        store.patch(
            "jobs",
            "gpu-reset",
            {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}},
            "default",
        )
    assert immutable.value.causes[0].field == "spec.template"


def test_pod_containers_need_name_and_image(store: Store) -> None:
    with pytest.raises(ApiError) as err:
        store.create(
            "pods", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, "default"
        )
    assert [c.field for c in err.value.causes] == ["spec.containers[0].image"]
