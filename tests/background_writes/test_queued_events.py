"""`emit` only queues: Events reach the API afterwards, in order, counted, and bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_operator.domain.effects import Severity
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.engine.ports import Explanation
from remediation_operator.handlers.event_queue import EventQueue, QueuedEvent
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder, ObjectRef
from tests.background_writes.conftest import RecordedLog

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def explanation(
    node: str = "n1", reason: Reason = Reason.StepStarted, message: str = "Started Drain."
) -> Explanation:
    return Explanation(
        policy="gpu",
        node=node,
        remediation=None,
        reason=reason,
        message=message,
        severity=Severity.Normal,
        action=Action.Drain,  # (a Cordon's start is not posted: see event_queue)
        at=NOW,
    )


def events(api: ApiServer) -> list[dict[str, Any]]:
    """The Events in the order they were created (resourceVersions increase)."""
    listed = api.store.list("events", "default")
    return sorted(listed, key=lambda e: int(e["metadata"]["resourceVersion"]))


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
async def records(client: Client) -> AsyncIterator[KubernetesRecords]:
    uids = {"n1": "uid-1", "n2": "uid-2"}
    port = KubernetesRecords(client, EventRecorder(client, "operator"), node_uid=uids.get)
    port.start()
    yield port
    await port.stop()


async def test_emit_returns_before_the_event_exists_and_it_appears_afterwards(
    api: ApiServer, records: KubernetesRecords
) -> None:
    await records.emit(explanation())
    assert events(api) == []  # nothing was sent inside the call
    assert len(records.events) == 1
    await records.events.drain()
    (event,) = events(api)
    assert event["reason"] == "StepStarted"
    assert event["message"] == "Started Drain."
    assert event["type"] == "Normal"
    assert event["involvedObject"] == {
        "kind": "Node",
        "name": "n1",
        "apiVersion": "v1",
        "uid": "uid-1",
    }
    assert event["reportingInstance"] == "operator"
    assert len(records.events) == 0


async def test_order_is_kept(api: ApiServer, records: KubernetesRecords) -> None:
    for n in range(5):
        await records.emit(explanation(f"n{n}", Reason.StepStarted, f"Started step {n}."))
    await records.events.drain()
    assert [e["message"] for e in events(api)] == [f"Started step {n}." for n in range(5)]


async def test_repeats_are_counted(api: ApiServer, records: KubernetesRecords) -> None:
    await records.emit(explanation("n1", Reason.DrainBlockedByPDB, "blocked by guard"))
    await records.emit(explanation("n2", Reason.StepStarted, "Started Drain."))
    await records.emit(explanation("n1", Reason.DrainBlockedByPDB, "blocked by guard"))
    await records.events.drain()
    counts = {e["involvedObject"]["name"]: e["count"] for e in events(api)}
    assert counts == {"n1": 2, "n2": 1}
    verbs = [e.verb for e in api.request_log if e.resource == "events"]
    assert verbs == ["create", "create", "patch"]  # the repeat patched, in emit order


async def test_the_node_uid_is_the_one_seen_when_the_decision_was_made(
    api: ApiServer, client: Client
) -> None:
    uids = {"n1": "old-uid"}
    port = KubernetesRecords(client, EventRecorder(client, "operator"), node_uid=uids.get)
    await port.emit(explanation())
    uids["n1"] = "new-uid"  # the node was deleted and re-created under the same name
    port.start()
    await port.stop()
    (event,) = events(api)
    assert event["involvedObject"]["uid"] == "old-uid"


async def test_a_full_queue_drops_the_oldest_and_counts_it(
    api: ApiServer, client: Client, log: RecordedLog
) -> None:
    queue = EventQueue(EventRecorder(client, "operator"), capacity=2, log=log)
    for node in ("n1", "n2", "n3"):
        queue.put(QueuedEvent(ObjectRef("Node", node, "v1"), "StepStarted", "m", "Normal", NOW))
    assert queue.dropped == 1
    assert len(queue) == 2
    task = asyncio.create_task(queue.run())
    try:
        await queue.drain()
    finally:
        task.cancel()
    assert [e["involvedObject"]["name"] for e in events(api)] == ["n2", "n3"]
    assert [f["dropped"] for f in log.events("events_dropped")] == [1]


async def test_a_failed_post_is_retried_with_backoff_in_order(
    api: ApiServer, client: Client, log: RecordedLog
) -> None:
    api.faults.error(503, times=2, verb="create", resource="events")
    sleeps = Sleeps()
    queue = EventQueue(EventRecorder(client, "operator"), sleep=sleeps, backoff=0.25, log=log)
    queue.put(
        QueuedEvent(ObjectRef("Node", "n1", "v1"), "StepStarted", "first", "Normal", NOW, node="n1")
    )
    queue.put(QueuedEvent(ObjectRef("Node", "n1", "v1"), "StepStarted", "second", "Normal", NOW))
    task = asyncio.create_task(queue.run())
    try:
        await queue.drain()
    finally:
        task.cancel()
    assert [e["message"] for e in events(api)] == ["first", "second"]
    assert sleeps.waits == [0.25, 0.5]
    assert queue.given_up == 0
    failures = log.events("event_post_failed")
    assert [(f["reason"], f["node"], f["status"], f["retrying"]) for f in failures] == [
        ("StepStarted", "n1", 503, True),
        ("StepStarted", "n1", 503, True),
    ]


async def test_a_post_that_cannot_succeed_is_given_up_and_the_queue_goes_on(
    api: ApiServer, client: Client
) -> None:
    api.faults.error(403, times=1, verb="create", resource="events")
    sleeps = Sleeps()
    queue = EventQueue(EventRecorder(client, "operator"), sleep=sleeps)
    queue.put(QueuedEvent(ObjectRef("Node", "n1", "v1"), "StepStarted", "refused", "Normal", NOW))
    queue.put(QueuedEvent(ObjectRef("Node", "n1", "v1"), "StepStarted", "next", "Normal", NOW))
    task = asyncio.create_task(queue.run())
    try:
        await queue.drain()
    finally:
        task.cancel()
    assert [e["message"] for e in events(api)] == ["next"]
    assert sleeps.waits == []  # a 403 is not retried
    assert queue.given_up == 1


async def test_retries_are_bounded(api: ApiServer, client: Client) -> None:
    api.faults.error(500, times=None, verb="create", resource="events")
    sleeps = Sleeps()
    queue = EventQueue(EventRecorder(client, "operator"), sleep=sleeps, attempts=3)
    queue.put(QueuedEvent(ObjectRef("Node", "n1", "v1"), "StepStarted", "m", "Normal", NOW))
    task = asyncio.create_task(queue.run())
    try:
        await queue.drain()
    finally:
        task.cancel()
    creates = [e for e in api.request_log if e.resource == "events" and e.verb == "create"]
    assert len(creates) == 3
    assert len(sleeps.waits) == 2
    assert queue.given_up == 1


async def test_stop_posts_what_is_still_queued(api: ApiServer, client: Client) -> None:
    port = KubernetesRecords(client, EventRecorder(client, "operator"))
    port.start()
    for n in range(20):
        await port.emit(explanation(f"n{n}"))
    await port.stop()
    assert len(events(api)) == 20
