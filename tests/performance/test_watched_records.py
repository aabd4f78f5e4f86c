"""Reconciles read Remediations and breakers from watched state, never older than our writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.engine.ports import Conflict, PolicyState
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder
from tests.emulated_api import CORDON_POLICY

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def state(name: str = "n1-1", node: str = "n1", **changes: Any) -> RemediationState:
    base: dict[str, Any] = dict(
        name=name,
        node=node,
        policy="gpu",
        fault="gpu-xid",
        phase=Phase.Running,
        reason=Reason.StepStarted,
        message="Started Cordon.",
        started_at=NOW,
        step=Action.Cordon,
        step_index=0,
        attempt=1,
        step_started_at=NOW,
    )
    base.update(changes)
    return RemediationState(**base)


def reads(api: ApiServer, resource: str) -> int:
    return sum(1 for e in api.request_log if e.resource == resource and e.verb in ("list", "get"))


@pytest.fixture
def records(client: Client) -> KubernetesRecords:
    port = KubernetesRecords(client, EventRecorder(client, "operator"))
    port.synced = True
    return port


async def test_listing_is_served_from_memory_and_sees_our_own_write_at_once(
    api: ApiServer, records: KubernetesRecords
) -> None:
    created = await records.create_remediation(state())
    before = reads(api, "remediations")
    listed = await records.list_remediations("gpu")
    assert [r.state for r in listed] == [state()]
    assert reads(api, "remediations") == before  # no request for the list
    # The watch then delivers the create (an older version than our status write): ignored.
    first = api.store.list("remediations")[0]
    older = dict(first, metadata=dict(first["metadata"], resourceVersion="1"))
    records.observe("ADDED", older)
    assert [r.resource_version for r in await records.list_remediations("gpu")] == [
        created.resource_version
    ]


async def test_a_change_made_by_someone_else_arrives_through_the_watch(
    api: ApiServer, records: KubernetesRecords
) -> None:
    await records.create_remediation(state())
    approved = api.store.patch(
        "remediations",
        "n1-1",
        {"metadata": {"annotations": {"remediation.gpuops.io/approve": "Replace"}}},
    )
    records.observe("MODIFIED", approved)
    (listed,) = await records.list_remediations("gpu")
    assert listed.annotations["remediation.gpuops.io/approve"] == "Replace"
    records.observe("DELETED", approved)
    assert await records.list_remediations("gpu") == []


async def test_a_conflict_rereads_the_object_so_the_replan_is_current(
    api: ApiServer, records: KubernetesRecords
) -> None:
    created = await records.create_remediation(state())
    api.store.patch("remediations", "n1-1", {"metadata": {"labels": {"touched": "yes"}}})
    with pytest.raises(Conflict):
        await records.update_remediation(state(phase=Phase.Waiting), created.resource_version)
    (fresh,) = await records.list_remediations("gpu")
    assert (
        fresh.resource_version
        == api.store.get("remediations", "n1-1")["metadata"]["resourceVersion"]
    )
    updated = await records.update_remediation(state(phase=Phase.Waiting), fresh.resource_version)
    assert updated.state.phase is Phase.Waiting


async def test_breakers_are_read_once_then_from_our_own_writes_until_someone_else_writes(
    api: ApiServer, records: KubernetesRecords
) -> None:
    body = api.store.create("remediationpolicies", CORDON_POLICY)
    records.observe_policy("ADDED", body)
    first = await records.read_policy_state("gpu")
    await records.write_policy_state("gpu", 1, first, NOW)
    gets = reads(api, "remediationpolicies")
    assert await records.read_policy_state("gpu") == first
    assert reads(api, "remediationpolicies") == gets  # served from our own write
    # Someone else writes the status (a newer version on the watch): read it again.
    changed = api.store.patch(
        "remediationpolicies", "gpu", {"status": {"observedGeneration": 7}}, subresource="status"
    )
    records.observe_policy("MODIFIED", changed)
    await records.read_policy_state("gpu")
    assert reads(api, "remediationpolicies") == gets + 1


async def test_a_status_write_starts_from_our_last_write_and_survives_a_concurrent_one(
    api: ApiServer, records: KubernetesRecords
) -> None:
    body = api.store.create("remediationpolicies", CORDON_POLICY)
    records.observe_policy("ADDED", body)
    await records.write_policy_state("gpu", 1, PolicyState(), NOW)
    gets = reads(api, "remediationpolicies")
    await records.write_policy_state("gpu", 2, PolicyState(), NOW)
    assert reads(api, "remediationpolicies") == gets  # one PUT, no read
    assert api.store.get("remediationpolicies", "gpu")["status"]["observedGeneration"] == 2
    # Someone else writes before the watch tells us: our PUT gets 409, then read and retry.
    api.store.patch(
        "remediationpolicies",
        "gpu",
        {"status": {"lastAcceptedSpec": {"x": 1}}},
        subresource="status",
    )
    await records.write_policy_state("gpu", 3, PolicyState(), NOW)
    status = api.store.get("remediationpolicies", "gpu")["status"]
    assert status["observedGeneration"] == 3
    assert status["lastAcceptedSpec"] == {"x": 1}  # the other writer's part is kept
