"""The Eviction API and PodDisruptionBudget status, as kubectl drain and the operator see them."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.errors import ApiError
from remediation_emulator.eviction import Disruption
from remediation_emulator.store import Store
from tests.emulator.conftest import RUNNING_READY, pod


def _running(store: Store, name: str, node: str = "n1", **labels: str) -> None:
    store.create("pods", pod(name, node, **labels))
    store.patch("pods", name, RUNNING_READY, "default", subresource="status")


def _pdb(store: Store, name: str, **spec: object) -> None:
    store.create(
        "poddisruptionbudgets",
        {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}},
        "default",
    )


def _status(store: Store, name: str = "budget") -> dict[str, object]:
    return store.get("poddisruptionbudgets", name, "default")["status"]  # type: ignore[no-any-return]


def _evict(store: Store, name: str) -> tuple[int, dict[str, Any]]:
    """Evict through the store's disruption controller, as POST pods/NAME/eviction does."""
    owners = [getattr(o, "__self__", None) for o in store.observers]
    disruption = next(o for o in owners if isinstance(o, Disruption))
    return disruption.evict("default", name, {"metadata": {"name": name}})


def test_pdb_status_follows_pods(store: Store) -> None:
    _running(store, "a", app="web")
    _running(store, "b", app="web")
    _running(store, "c", app="other")
    _pdb(store, "budget", minAvailable=1)
    assert {
        k: _status(store)[k]
        for k in ("expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed")
    } == {"expectedPods": 2, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1}
    _running(store, "d", app="web")
    assert _status(store)["disruptionsAllowed"] == 2


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({"minAvailable": "50%"}, 2),  # desired ceil(50% of 4) = 2
        ({"minAvailable": "60%"}, 1),  # desired ceil(2.4) = 3
        ({"maxUnavailable": 1}, 1),
        ({"maxUnavailable": "30%"}, 2),  # ceil(1.2) = 2 unavailable allowed
        ({"minAvailable": 4}, 0),
    ],
)
def test_budget_arithmetic(store: Store, spec: dict[str, object], allowed: int) -> None:
    for name in "abcd":
        _running(store, name, app="web")
    _pdb(store, "budget", **spec)
    assert _status(store)["disruptionsAllowed"] == allowed


def test_eviction_refused_with_429_when_budget_is_spent(store: Store) -> None:
    _running(store, "a", app="web")
    _running(store, "b", app="web")
    _pdb(store, "budget", minAvailable=1)
    code, body = _evict(store, "a")
    assert code == 201
    assert body["status"] == "Success"
    evicted = store.get("pods", "a", "default")
    assert evicted["metadata"]["deletionTimestamp"]
    assert any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])
    assert _status(store)["disruptionsAllowed"] == 0
    with pytest.raises(ApiError) as err:
        _evict(store, "b")
    status = err.value.to_status()
    assert status["code"] == 429
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget budget needs 1 healthy pods and has 1 currently",
        }
    ]
    assert not store.get("pods", "b", "default")["metadata"].get("deletionTimestamp")


def test_budget_recovers_when_the_evicted_pod_is_gone_and_replaced(store: Store) -> None:
    _running(store, "a", app="web")
    _running(store, "b", app="web")
    _pdb(store, "budget", minAvailable=1)
    _evict(store, "a")
    store.delete("pods", "a", "default", grace_period_seconds=0)  # the kubelet finishes it
    assert "disruptedPods" not in _status(store)
    _running(store, "a2", app="web")
    assert _status(store)["disruptionsAllowed"] == 1


def test_terminating_pending_and_unmatched_pods_ignore_budgets(store: Store) -> None:
    _running(store, "a", app="web")
    _pdb(store, "budget", minAvailable=1)
    store.create("pods", pod("pending", "n1", app="web"))
    assert _evict(store, "pending")[0] == 201
    store.delete("pods", "a", "default")  # now terminating
    assert _evict(store, "a")[0] == 201
    _running(store, "free", app="other")
    assert _evict(store, "free")[0] == 201


def test_pod_covered_by_two_budgets_is_500(store: Store) -> None:
    _running(store, "a", app="web")
    _pdb(store, "one", maxUnavailable=1)
    _pdb(store, "two", maxUnavailable=1)
    code, body = _evict(store, "a")
    assert code == 500
    assert body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the "
        "eviction subresource does not support."
    )
    assert not store.get("pods", "a", "default")["metadata"].get("deletionTimestamp")


def test_unready_pod_evicted_without_spending_budget_when_budget_is_healthy(store: Store) -> None:
    _running(store, "a", app="web")
    _running(store, "b", app="web")
    store.create("pods", pod("sick", "n1", app="web"))
    store.patch(
        "pods",
        "sick",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}},
        "default",
        subresource="status",
    )
    _pdb(store, "budget", minAvailable=2)
    assert _status(store)["disruptionsAllowed"] == 0
    assert _evict(store, "sick")[0] == 201


async def test_eviction_over_http(api: ApiServer) -> None:
    api.store.create("pods", pod("a", "n1", app="web"), "default")
    api.store.patch("pods", "a", RUNNING_READY, "default", subresource="status")
    api.store.create(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "budget"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
        "default",
    )
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "a", "namespace": "default"},
    }
    async with aiohttp.ClientSession(base_url=api.url) as http:
        async with http.post("/api/v1/namespaces/default/pods/a/eviction", json=body) as resp:
            assert resp.status == 429
            assert (
                json.loads(await resp.text())["details"]["causes"][0]["reason"]
                == "DisruptionBudget"
            )
        async with http.post(
            "/api/v1/namespaces/default/pods/a/eviction",
            json={**body, "metadata": {"name": "other"}},
        ) as resp:
            assert resp.status == 400
    entry = api.request_log.matching(verb="create", subresource="eviction")[0]
    assert (entry.resource, entry.name, entry.code) == ("pods", "a", 429)
