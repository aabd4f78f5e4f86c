"""Policy status: decisions are written inside the reconcile, counts at most once a second."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_operator.domain.fleet import BreakerState
from remediation_operator.domain.planner import PolicySummary
from remediation_operator.domain.policy import Action
from remediation_operator.engine.ports import PolicyState
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder
from tests.background_writes.conftest import ManualClock, RecordedLog
from tests.emulated_api import CORDON_POLICY

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

OPEN = {"": BreakerState(open=True, opened_at=NOW)}


def summary(unhealthy: int, paused: bool = False) -> PolicySummary:
    return PolicySummary(
        observed=10,
        unhealthy=unhealthy,
        in_flight=unhealthy,
        headroom={Action.Drain: 3 - min(unhealthy, 3)},
        paused=paused,
    )


def puts(api: ApiServer) -> int:
    return sum(
        1
        for e in api.request_log
        if e.resource == "remediationpolicies" and e.subresource == "status" and e.verb == "update"
    )


def status(api: ApiServer) -> dict[str, Any]:
    return dict(api.store.get("remediationpolicies", "gpu").get("status") or {})


def condition(api: ApiServer, type_: str) -> str:
    (found,) = [c for c in status(api)["conditions"] if c["type"] == type_]
    return str(found["status"])


class Leading:
    def __init__(self) -> None:
        self.value = True

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
def leading() -> Leading:
    return Leading()


@pytest.fixture
async def records(
    api: ApiServer, client: Client, clock: ManualClock, leading: Leading, log: RecordedLog
) -> KubernetesRecords:
    port = KubernetesRecords(
        client, EventRecorder(client, "operator"), log=log, leading=leading, clock=clock
    )
    port.synced = True
    port.observe_policy("ADDED", api.store.create("remediationpolicies", CORDON_POLICY))
    # As a reconcile does: read, then write what the first plan found (a new generation).
    stored = await port.read_policy_state("gpu")
    await port.write_policy_state("gpu", 1, PolicyState(stored.breakers, summary(0)), NOW)
    return port


async def test_summary_changes_within_a_second_make_one_write_with_the_newest_counts(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock
) -> None:
    before = puts(api)
    for n in range(1, 6):
        clock.advance(0.125)
        await records.write_policy_state("gpu", 1, PolicyState(summary=summary(n)), NOW)
        await records.status_writes.tick()
    assert puts(api) == before  # nothing inside the reconciles, nothing before the second
    assert status(api)["unhealthy"] == 0
    # The engine reads the newest state back, so it does not send the same summary again.
    assert await records.read_policy_state("gpu") == PolicyState(summary=summary(5))
    clock.advance(0.375)
    await records.status_writes.tick()
    assert puts(api) == before + 1
    assert (status(api)["unhealthy"], status(api)["inFlight"]) == (5, 5)
    assert status(api)["headroom"] == {"Drain": 0}
    assert status(api)["observedGeneration"] == 1


async def test_after_a_quiet_second_a_summary_change_goes_out_at_the_next_tick(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock
) -> None:
    clock.advance(5)
    before = puts(api)
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(2)), NOW)
    assert puts(api) == before
    await records.status_writes.tick()
    assert puts(api) == before + 1
    assert status(api)["unhealthy"] == 2


async def test_a_breaker_change_is_written_at_once_with_the_newest_summary(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock
) -> None:
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(1)), NOW)
    before = puts(api)
    await records.write_policy_state("gpu", 1, PolicyState(OPEN, summary(2)), NOW)
    assert puts(api) == before + 1
    assert status(api)["circuitState"] == "Open"
    assert condition(api, "CircuitOpen") == "True"
    assert status(api)["unhealthy"] == 2
    assert len(records.status_writes) == 0  # the pending summary went with it
    clock.advance(5)
    await records.status_writes.tick()
    assert puts(api) == before + 1
    assert await records.read_policy_state("gpu") == PolicyState(OPEN, summary(2))


async def test_pausing_and_a_new_generation_are_written_at_once(
    api: ApiServer, records: KubernetesRecords
) -> None:
    before = puts(api)
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(0, paused=True)), NOW)
    assert puts(api) == before + 1
    assert condition(api, "Paused") == "True"
    await records.write_policy_state("gpu", 2, PolicyState(summary=summary(0, paused=True)), NOW)
    assert puts(api) == before + 2
    assert status(api)["observedGeneration"] == 2


async def test_a_restarted_operator_writes_at_once_only_what_the_api_does_not_hold(
    api: ApiServer, client: Client, records: KubernetesRecords, clock: ManualClock
) -> None:
    await records.write_policy_state("gpu", 1, PolicyState(OPEN, summary(1, paused=True)), NOW)
    restarted = KubernetesRecords(client, EventRecorder(client, "operator"), clock=clock)
    restarted.synced = True
    stored = await restarted.read_policy_state("gpu")
    assert stored.breakers == OPEN
    before = puts(api)
    # Same decisions as the API holds (breakers, Paused, generation): counts can wait.
    await restarted.write_policy_state("gpu", 1, PolicyState(OPEN, summary(3, paused=True)), NOW)
    assert puts(api) == before
    # Unpaused while it was down: written at once.
    await restarted.write_policy_state("gpu", 1, PolicyState(OPEN, summary(3)), NOW)
    assert puts(api) == before + 1
    assert condition(api, "Paused") == "False"


async def test_stop_flushes_the_pending_write(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock
) -> None:
    records.start()
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(4)), NOW)
    assert status(api)["unhealthy"] == 0  # not due for a second on the (manual) clock
    await records.stop()
    assert status(api)["unhealthy"] == 4
    assert len(records.status_writes) == 0


async def test_a_deleted_policy_loses_its_pending_write(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock
) -> None:
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(4)), NOW)
    body = api.store.get("remediationpolicies", "gpu")
    api.store.delete("remediationpolicies", "gpu")
    records.observe_policy("DELETED", body)
    before = len(api.request_log)
    clock.advance(5)
    await records.status_writes.flush()
    assert len(api.request_log) == before  # not even tried


async def test_a_policy_deleted_before_the_watch_says_so_is_not_an_error(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock, log: RecordedLog
) -> None:
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(4)), NOW)
    api.store.delete("remediationpolicies", "gpu")
    clock.advance(5)
    await records.status_writes.tick()
    assert len(records.status_writes) == 0
    assert records.status_writes.failures == 0
    assert log.events("policy_status_write_failed") == []


async def test_a_concurrent_writer_is_kept_after_the_conflict(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock
) -> None:
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(4)), NOW)
    api.store.patch(  # the runtime's Accepted write, not yet seen on the watch
        "remediationpolicies",
        "gpu",
        {"status": {"lastAcceptedSpec": {"x": 1}}},
        subresource="status",
    )
    clock.advance(1)
    before = puts(api)
    await records.status_writes.tick()
    assert puts(api) == before + 2  # 409 on the cached version, then read and write again
    assert status(api)["unhealthy"] == 4
    assert status(api)["lastAcceptedSpec"] == {"x": 1}


async def test_a_failed_write_is_retried_a_second_later(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock, log: RecordedLog
) -> None:
    api.faults.error(503, verb="update", resource="remediationpolicies")
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(4)), NOW)
    clock.advance(1)
    await records.status_writes.tick()
    assert status(api)["unhealthy"] == 0
    assert [f["policy"] for f in log.events("policy_status_write_failed")] == ["gpu"]
    await records.status_writes.tick()  # not before the next second
    assert status(api)["unhealthy"] == 0
    clock.advance(1)
    await records.status_writes.tick()
    assert status(api)["unhealthy"] == 4


async def test_a_replica_that_lost_the_lease_drops_its_pending_write(
    api: ApiServer, records: KubernetesRecords, clock: ManualClock, leading: Leading
) -> None:
    await records.write_policy_state("gpu", 1, PolicyState(summary=summary(4)), NOW)
    leading.value = False
    before = puts(api)
    await records.stop()
    assert puts(api) == before
    # If it leads again, the next plan's summary differs from what it read: sent again.
    assert (await records.read_policy_state("gpu")).summary is None
