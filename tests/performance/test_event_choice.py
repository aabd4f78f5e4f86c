"""Each decision is posted once, on the object a human looks at; a Cordon's start is not posted.

Real: the API emulator over HTTP, the operator's client, `KubernetesRecords.emit` and its
Event queue. Faked: nothing (the explanations are the ones the planner announces for a
cordon-only fault, written by hand).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_operator.domain.effects import Severity
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.engine.ports import Explanation
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def decision(
    reason: Reason,
    action: Action | None = Action.Cordon,
    *,
    node: str = "gpu-1",
    remediation: str | None = "gpu-1-gpu-xid-1",
    severity: Severity = Severity.Normal,
) -> Explanation:
    return Explanation(
        policy="fleet",
        node=node,
        remediation=remediation,
        reason=reason,
        message=f"{reason} ({action}).",
        severity=severity,
        action=action,
        at=NOW,
    )


@pytest.fixture
async def records(client: Client) -> AsyncIterator[KubernetesRecords]:
    port = KubernetesRecords(
        client, EventRecorder(client, "operator"), node_uid={"gpu-1": "uid-1"}.get
    )
    port.start()
    yield port
    await port.stop()


def posted(api: ApiServer) -> list[tuple[str, str, str]]:
    return sorted(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"])
        for e in api.store.list("events")
    )


def event_writes(api: ApiServer) -> list[Any]:
    return [e for e in api.request_log if e.resource == "events" and e.is_write]


async def test_a_cordon_only_fault_costs_three_events_all_on_the_node(
    api: ApiServer, records: KubernetesRecords
) -> None:
    for explanation in (
        decision(Reason.FaultDetected, None),
        decision(Reason.StepStarted),
        decision(Reason.StepSucceeded),
        decision(Reason.LadderExhausted, None, severity=Severity.Warning),
    ):
        await records.emit(explanation)
    await records.events.drain()

    assert posted(api) == [
        ("Node", "gpu-1", "FaultDetected"),
        ("Node", "gpu-1", "LadderExhausted"),
        ("Node", "gpu-1", "StepSucceeded"),
    ]
    assert len(event_writes(api)) == 3  # was 8: four reasons on the Node and the Remediation


async def test_the_start_of_a_long_step_is_posted(
    api: ApiServer, records: KubernetesRecords
) -> None:
    await records.emit(decision(Reason.StepStarted, Action.Drain))
    await records.emit(decision(Reason.StepStarted, Action.Reboot))
    await records.events.drain()
    assert posted(api) == [("Node", "gpu-1", "StepStarted")] * 2


async def test_without_a_node_the_remediation_or_the_policy_gets_it(
    api: ApiServer, records: KubernetesRecords
) -> None:
    await records.emit(decision(Reason.Recovered, None, node=""))
    await records.emit(
        decision(Reason.CircuitOpen, None, node="", remediation=None, severity=Severity.Warning)
    )
    await records.events.drain()
    assert posted(api) == [
        ("Remediation", "gpu-1-gpu-xid-1", "Recovered"),
        ("RemediationPolicy", "fleet", "CircuitOpen"),
    ]
