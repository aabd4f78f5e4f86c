"""The official `kubernetes` Python client (sync, server in a thread) accepts the emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from remediation_emulator.apiserver import ThreadedApiServer
from tests.emulator.conftest import RUNNING_READY, pod, ready_node
from tests.emulator.crd_fixtures import remediation_crd


@pytest.fixture
def api_client(threaded: ThreadedApiServer, tmp_path: Path) -> Any:
    path = threaded.write_kubeconfig(tmp_path / "kubeconfig", user="system:serviceaccount:ops:op")
    new_client: Any = config.new_client_from_config
    return new_client(config_file=str(path))


def test_core_api_round_trip(threaded: ThreadedApiServer, api_client: Any) -> None:
    v1: Any = client.CoreV1Api(api_client)
    v1.create_node(ready_node("gpu-1", pool="p1"))
    nodes = v1.list_node(label_selector="pool=p1")
    assert [n.metadata.name for n in nodes.items] == ["gpu-1"]
    patched = v1.patch_node_status(
        "gpu-1",
        {
            "status": {
                "conditions": [
                    {
                        "type": "AcceleratedHardwareReady",
                        "status": "False",
                        "reason": "NvidiaXID79Error",
                    }
                ]
            }
        },
    )
    assert {c.type for c in patched.status.conditions} == {"Ready", "AcceleratedHardwareReady"}
    cordoned = v1.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert cordoned.spec.unschedulable is True
    writes = threaded.request_log.matching(resource="nodes", verb="patch")
    assert {e.user for e in writes} == {"system:serviceaccount:ops:op"}
    assert [e.subresource for e in writes] == ["status", ""]


def test_conflict_raises_api_exception_409(api_client: Any) -> None:
    v1: Any = client.CoreV1Api(api_client)
    node = v1.create_node(ready_node("gpu-1"))
    v1.patch_node("gpu-1", {"metadata": {"labels": {"x": "1"}}})
    node.metadata.labels = {"x": "2"}
    with pytest.raises(ApiException) as err:
        v1.replace_node("gpu-1", node)
    assert err.value.status == 409
    with pytest.raises(ApiException) as missing:
        v1.read_node("nope")
    assert missing.value.status == 404


def test_watch_stream_with_resume(threaded: ThreadedApiServer, api_client: Any) -> None:
    v1: Any = client.CoreV1Api(api_client)
    v1.create_node(ready_node("a"))
    listed = v1.list_node()
    threaded.store.patch("nodes", "a", {"spec": {"unschedulable": True}})
    threaded.store.create("nodes", ready_node("b"))
    watcher: Any = watch.Watch
    stream = watcher().stream(
        v1.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=1
    )
    seen = [(e["type"], e["object"].metadata.name) for e in stream]
    assert seen == [("MODIFIED", "a"), ("ADDED", "b")]


def test_eviction_and_custom_objects(threaded: ThreadedApiServer, api_client: Any) -> None:
    v1: Any = client.CoreV1Api(api_client)
    v1.create_namespaced_pod("default", pod("w", "gpu-1", app="web"))
    threaded.store.patch("pods", "w", RUNNING_READY, "default", subresource="status")
    policy: Any = client.PolicyV1Api(api_client)
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "b"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="w", namespace="default"))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_eviction("w", "default", eviction)
    assert err.value.status == 429

    extensions: Any = client.ApiextensionsV1Api(api_client)
    extensions.create_custom_resource_definition(remediation_crd())
    custom: Any = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(
        "remediation.gpuops.io",
        "v1alpha1",
        "remediations",
        {
            "apiVersion": "remediation.gpuops.io/v1alpha1",
            "kind": "Remediation",
            "metadata": {"name": "r"},
            "spec": {"nodeName": "gpu-1"},
        },
    )
    custom.patch_cluster_custom_object_status(
        "remediation.gpuops.io", "v1alpha1", "remediations", "r", {"status": {"phase": "Running"}}
    )
    got: Any = custom.get_cluster_custom_object(
        "remediation.gpuops.io", "v1alpha1", "remediations", "r"
    )
    assert got["status"] == {"phase": "Running"}
    assert got["metadata"]["generation"] == 1
