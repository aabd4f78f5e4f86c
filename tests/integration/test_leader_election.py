"""Leader election: the pure decision, and two electors racing for one Lease on the emulator
with a manual clock (no sleeping: each test drives `try_once` itself). Expiry is judged by
when a candidate observed the Lease change on its own clock (a candidate whose clock runs
ahead does not take a held Lease), and a Lease that cannot be written is reported with its
reason, rate-limited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediation_emulator import apiserver
from remediation_emulator import kubeconfig as emulator_kubeconfig
from remediation_emulator.apiserver import ApiServer
from remediation_operator.k8s import leader
from remediation_operator.k8s.client import ApiError, Client
from remediation_operator.k8s.leader import Elector, LeaseRecord, Move, Timings
from tests.integration.conftest import free_port

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
        # Expiry counts from when WE observed the record, not from its renewTime.
        (record("peer", None), T0, Move.Wait),
        (record("peer", T0 - timedelta(minutes=5)), T0 + timedelta(seconds=14), Move.Wait),
        (record("peer", T0 + timedelta(minutes=5)), T0 + timedelta(seconds=15), Move.Acquire),
    ],
)
def test_decide(current: LeaseRecord | None, now: datetime, move: Move) -> None:
    """`now` is on the candidate's clock, which observed `current` at T0."""
    assert leader.decide(current, "me", now, observed_at=T0) is move


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

        # b saw a's renewal (a changed record) only now: it waits a full lease duration from
        # this observation, on its own clock, whatever renewTime says.
        clock.now += timedelta(seconds=14)
        assert await b.try_once() is False
        clock.now += timedelta(seconds=1)  # 15 s since b observed a's last renewal: expired
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


async def test_a_candidate_whose_clock_runs_ahead_does_not_take_a_held_lease(
    api: ApiServer, tmp_path: Path
) -> None:
    """Issue 12, defect 5: b's clock is 16 s ahead of a's. Judged by `renewTime + 15 s <= now`
    b would take a Lease a renewed a moment ago; by the observed-time rule it waits until a
    stops renewing and 15 s pass on b's own clock."""
    a_clock, b_clock = Clock(), Clock()
    b_clock.now = T0 + timedelta(seconds=16)
    a_client = await client_for(api, tmp_path, "a")
    b_client = await client_for(api, tmp_path, "b")
    a = Elector(a_client, namespace="ops", name="lock", identity="a", timings=FAST, clock=a_clock)
    b = Elector(b_client, namespace="ops", name="lock", identity="b", timings=FAST, clock=b_clock)

    def tick(seconds: float) -> None:
        a_clock.now += timedelta(seconds=seconds)
        b_clock.now += timedelta(seconds=seconds)

    try:
        assert await a.try_once() is True
        assert await b.try_once() is False  # renewTime is "16 s old" by b's clock: still held
        for _ in range(10):  # a keeps renewing: b never takes over
            tick(2)
            assert await a.try_once() is True
            assert await b.try_once() is False
        assert api.store.get("leases", "lock", "ops")["spec"]["holderIdentity"] == "a"

        # a stops renewing (crashed): b takes over 15 s after it last saw the record change.
        tick(14)
        assert await b.try_once() is False
        tick(1)
        assert await b.try_once() is True
        assert api.store.get("leases", "lock", "ops")["spec"]["holderIdentity"] == "b"
    finally:
        await a_client.close()
        await b_client.close()


class RecordingLog:
    """A hand-written stand-in for the structlog logger: keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, object]]] = []

    def error(self, event: str, **fields: object) -> None:
        self.lines.append(("error", event, fields))

    def info(self, event: str, **fields: object) -> None:
        self.lines.append(("info", event, fields))

    def events(self, event: str) -> list[dict[str, object]]:
        return [fields for _, name, fields in self.lines if name == event]


async def test_a_lease_that_cannot_be_created_is_an_error_logged_rate_limited(
    api: ApiServer, tmp_path: Path
) -> None:
    clock = Clock()
    log = RecordingLog()
    client = await client_for(api, tmp_path, "a")
    a = Elector(
        client, namespace="absent", name="lock", identity="a", timings=FAST, clock=clock, log=log
    )
    try:
        assert await a.try_once() is False
        assert a.problem is not None
        assert a.problem.reason is leader.LeaseProblem.NamespaceNotFound
        assert "kubectl create namespace absent" in a.problem.message
        assert not a.healthy
        [first] = log.events("leader_election_failed")
        assert first["reason"] == "NamespaceNotFound"
        assert first["lease"] == "absent/lock"

        for _ in range(5):  # retried every 2 s: counted every time, not logged again
            clock.now += timedelta(seconds=2)
            assert await a.try_once() is False
        assert a.errors["NamespaceNotFound"] == 6
        assert len(log.events("leader_election_failed")) == 1

        clock.now += leader.ERROR_LOG_INTERVAL  # still failing 30 s later: said again
        assert await a.try_once() is False
        again = log.events("leader_election_failed")
        assert len(again) == 2
        assert again[1]["failures"] == 6  # the five held back, and this one

        api.store.create("namespaces", {"metadata": {"name": "absent"}})
        clock.now += timedelta(seconds=2)
        assert await a.try_once() is True
        assert a.healthy
        assert log.events("leader_election_recovered") == [
            {"lease": "absent/lock", "after": "NamespaceNotFound"}
        ]
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("status", "reason", "says"),
    [
        (404, leader.LeaseProblem.NamespaceNotFound, "namespace 'ops' does not exist"),
        (403, leader.LeaseProblem.Forbidden, "grant get, create and update"),
        (401, leader.LeaseProblem.Unauthorized, "rejected the credentials"),
        (0, leader.LeaseProblem.Unreachable, "unreachable"),
        (500, leader.LeaseProblem.ServerError, "500"),
    ],
)
def test_lease_errors_are_classified_with_what_to_do(
    status: int, reason: leader.LeaseProblem, says: str
) -> None:
    error = ApiError(status, "Whatever", "the server's words")
    problem = leader.classify(error, "ops", "lock", "create")
    assert problem.reason is reason
    assert says in problem.message
    assert "Lease ops/lock" in problem.message


async def test_an_unreachable_api_server_is_a_lease_problem_too(tmp_path: Path) -> None:
    path = emulator_kubeconfig.write(
        tmp_path / "kc", f"http://127.0.0.1:{free_port()}", "a"
    )  # nothing listens there
    client = await Client.from_environment(str(path))
    log = RecordingLog()
    a = Elector(client, namespace="ops", name="lock", identity="a", timings=FAST, log=log)
    try:
        assert await a.try_once() is False
        assert a.problem is not None
        assert a.problem.reason is leader.LeaseProblem.Unreachable
        assert a.errors == {"Unreachable": 1}
        assert log.events("leader_election_failed")[0]["reason"] == "Unreachable"
    finally:
        await client.close()
