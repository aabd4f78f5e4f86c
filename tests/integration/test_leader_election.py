"""Leader election: the pure decision, and two electors racing for one Lease on the emulator
with a manual clock (no sleeping: each test drives `try_once` itself)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediation_operator.emulator import apiserver
from remediation_operator.emulator.apiserver import ApiServer
from remediation_operator.k8s import leader
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.leader import Elector, LeaseRecord, Move, Timings

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
FAST = Timings(
    lease_duration=timedelta(seconds=15),
    renew_deadline=timedelta(seconds=10),
    retry_period=timedelta(seconds=2),
)


def record(holder: str | None, renewed: datetime | None) -> LeaseRecord:
    return LeaseRecord(holder, timedelta(seconds=15), T0, renewed, 0, "1")


@pytest.mark.parametrize(
    ("current", "now", "move"),
    [
        (None, T0, Move.Create),
        (record("me", T0), T0 + timedelta(seconds=30), Move.Renew),
        (record("peer", T0), T0 + timedelta(seconds=14), Move.Wait),
        (record("peer", T0), T0 + timedelta(seconds=15), Move.Acquire),
        (record(None, T0), T0, Move.Acquire),
        (record("peer", None), T0, Move.Acquire),
    ],
)
def test_decide(current: LeaseRecord | None, now: datetime, move: Move) -> None:
    assert leader.decide(current, "me", now) is move


def test_timings_must_be_ordered_like_client_go() -> None:
    with pytest.raises(ValueError, match="--retry-period < --renew-deadline < --lease-duration"):
        Timings(timedelta(seconds=10), timedelta(seconds=10), timedelta(seconds=2))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with apiserver.serve() as server:
        server.store.create("namespaces", {"metadata": {"name": "ops"}})
        yield server


async def client_for(api: ApiServer, tmp_path: Path, user: str) -> Client:
    path = api.write_kubeconfig(tmp_path / f"kc-{user}", user=user)
    return await Client.from_environment(str(path))


async def test_one_leader_takeover_after_expiry_and_prompt_release(
    api: ApiServer, tmp_path: Path
) -> None:
    clock = Clock()
    changes: list[tuple[str, bool]] = []
    a_client = await client_for(api, tmp_path, "a")
    b_client = await client_for(api, tmp_path, "b")
    a = Elector(
        a_client,
        namespace="ops",
        name="lock",
        identity="a",
        timings=FAST,
        clock=clock,
        on_change=lambda lead: changes.append(("a", lead)),
    )
    b = Elector(
        b_client,
        namespace="ops",
        name="lock",
        identity="b",
        timings=FAST,
        clock=clock,
        on_change=lambda lead: changes.append(("b", lead)),
    )
    try:
        assert await a.try_once() is True
        assert await b.try_once() is False
        clock.now += timedelta(seconds=5)
        assert await a.try_once() is True  # renewed
        clock.now += timedelta(seconds=14)
        assert await b.try_once() is False  # a renewed 14 s ago: still valid

        clock.now += timedelta(seconds=2)  # a has not renewed for 16 s: expired
        assert await b.try_once() is True
        lease = api.store.get("leases", "lock", "ops")
        assert lease["spec"]["holderIdentity"] == "b"
        assert lease["spec"]["leaseTransitions"] == 1
        assert lease["spec"]["leaseDurationSeconds"] == 15
        assert await a.try_once() is False
        assert changes == [("a", True), ("b", True), ("a", False)]

        await b.release()
        assert not api.store.get("leases", "lock", "ops")["spec"].get("holderIdentity")
        assert await a.try_once() is True  # no need to wait out the lease
    finally:
        await a_client.close()
        await b_client.close()


async def test_a_leader_that_cannot_renew_steps_down_before_its_lease_expires(
    api: ApiServer, tmp_path: Path
) -> None:
    clock = Clock()
    a_client = await client_for(api, tmp_path, "a")
    a = Elector(a_client, namespace="ops", name="lock", identity="a", timings=FAST, clock=clock)
    try:
        assert await a.try_once() is True
        api.faults.error(500, times=None, resource="leases")
        clock.now += timedelta(seconds=9)
        assert await a.try_once() is True  # within renewDeadline: still leading
        clock.now += timedelta(seconds=1)
        assert await a.try_once() is False  # 10 s without a renewal: stop acting
        assert a.leading is False
    finally:
        await a_client.close()


async def test_a_leader_renews_with_one_write_and_reads_only_when_someone_else_wrote(
    api: ApiServer, tmp_path: Path
) -> None:
    """client-go's optimistic renewal (kubernetes/kubernetes#122069): no GET per renewal."""
    clock = Clock()
    a_client = await client_for(api, tmp_path, "a")
    a = Elector(a_client, namespace="ops", name="lock", identity="a", timings=FAST, clock=clock)

    def lease_calls(verb: str) -> int:
        return sum(1 for e in api.request_log if e.resource == "leases" and e.verb == verb)

    try:
        assert await a.try_once() is True
        gets, updates = lease_calls("get"), lease_calls("update")
        for _ in range(5):
            clock.now += FAST.retry_period
            assert await a.try_once() is True
        assert lease_calls("get") == gets, "renewals read nothing"
        assert lease_calls("update") == updates + 5
        renewed = api.store.get("leases", "lock", "ops")["spec"]["renewTime"]
        assert renewed == leader.micro_time(clock.now)

        # Someone else writes the Lease (a peer taking over an expired one, say): our
        # optimistic write gets 409, and we read and decide, which here means stepping down.
        lease = api.store.get("leases", "lock", "ops")
        lease["spec"]["holderIdentity"] = "b"
        lease["spec"]["renewTime"] = leader.micro_time(clock.now)
        api.store.replace("leases", "lock", lease, "ops")
        clock.now += FAST.retry_period
        assert await a.try_once() is False
        assert a.leading is False
        assert lease_calls("get") == gets + 1, "the conflict took the slow path once"
        assert a.slow_paths == 2  # the first acquisition, and this one
    finally:
        await a_client.close()
