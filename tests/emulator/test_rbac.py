"""Optional RBAC enforcement: ServiceAccount tokens checked against stored (Cluster)Roles."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from remediation_emulator import apiserver
from tests.emulator.conftest import ready_node

OPERATOR = "system:serviceaccount:gpu-remediation:operator"


@pytest.fixture
async def rbac_api() -> AsyncIterator[apiserver.ApiServer]:
    async with apiserver.serve(rbac=True) as api:
        api.store.create("namespaces", {"metadata": {"name": "gpu-remediation"}})
        api.store.create(
            "clusterroles",
            {
                "metadata": {"name": "operator"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["nodes"],
                        "verbs": ["get", "list", "watch", "patch"],
                    },
                    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                ],
            },
        )
        api.store.create(
            "clusterrolebindings",
            {
                "metadata": {"name": "operator"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "operator",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "operator", "namespace": "gpu-remediation"}
                ],
            },
        )
        api.store.create("nodes", ready_node("gpu-1"))
        yield api


async def test_bound_service_account_is_allowed_and_others_forbidden(
    rbac_api: apiserver.ApiServer,
) -> None:
    allowed = {"Authorization": f"Bearer {rbac_api.token(OPERATOR)}"}
    stranger = {"Authorization": f"Bearer {rbac_api.token('system:serviceaccount:x:y')}"}
    async with aiohttp.ClientSession(base_url=rbac_api.url) as http:
        async with http.get("/api/v1/nodes", headers=allowed) as resp:
            assert resp.status == 200
        async with http.patch(
            "/api/v1/nodes/gpu-1",
            headers={**allowed, "Content-Type": "application/merge-patch+json"},
            data=json.dumps({"spec": {"unschedulable": True}}),
        ) as resp:
            assert resp.status == 200
        async with http.delete("/api/v1/nodes/gpu-1", headers=allowed) as resp:
            body = json.loads(await resp.text())
            assert resp.status == 403
            assert body["reason"] == "Forbidden"
            assert body["message"] == (
                f'nodes "gpu-1" is forbidden: User "{OPERATOR}" cannot delete resource "nodes" '
                'in API group "" at the cluster scope'
            )
        async with http.get("/api/v1/namespaces/default/pods", headers=stranger) as resp:
            body = json.loads(await resp.text())
            assert resp.status == 403
            assert body["message"].endswith(
                'cannot list resource "pods" in API group "" in the namespace "default"'
            )
        async with http.get("/api/v1", headers=stranger) as resp:
            assert resp.status == 200  # discovery is open to everyone
    assert rbac_api.store.find("nodes", "gpu-1") is not None
    forbidden = rbac_api.request_log.matching(code=403)
    assert [(e.verb, e.resource, e.user) for e in forbidden] == [
        ("delete", "nodes", OPERATOR),
        ("list", "pods", "system:serviceaccount:x:y"),
    ]
