"""The engine's RecordPort over the Kubernetes API: Remediations, policy status, Events.

Remediation status dicts are converted to and from `RemediationState` by the api package
(`api.remediation_status`, `api.breaker_status`). The policy status parts the engine owns
(counts, headroom, breakers, CircuitOpen and Paused conditions) are merged into the status
the runtime also writes (Accepted, lastAcceptedSpec), never replacing those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from remediation_operator.api import breaker_status, remediation_status, timestamps
from remediation_operator.domain.planner import PolicySummary
from remediation_operator.domain.remediation import RemediationState
from remediation_operator.engine.ports import (
    Explanation,
    NotFound,
    PolicyState,
    RemediationRecord,
)
from remediation_operator.handlers.conditions import set_condition
from remediation_operator.handlers.port_errors import mapped
from remediation_operator.k8s import names, records
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder, ObjectRef
from remediation_operator.observability import logs


def to_record(body: dict[str, Any]) -> RemediationRecord | None:
    """None for an object without a status yet (a create interrupted before its status)."""
    metadata = body.get("metadata") or {}
    state = remediation_status.from_object(body)
    if state is None:
        return None
    return RemediationRecord(
        state=state,
        resource_version=str(metadata.get("resourceVersion", "")),
        annotations=dict(metadata.get("annotations") or {}),
    )


def _time(moment: datetime) -> str:
    return timestamps.format_time(moment)


def _summary_status(summary: PolicySummary) -> dict[str, Any]:
    return {
        "observed": summary.observed,
        "unhealthy": summary.unhealthy,
        "inFlight": summary.in_flight,
        "headroom": {str(k): v for k, v in summary.headroom.items()},
    }


class KubernetesRecords:
    def __init__(
        self,
        client: Client,
        events: EventRecorder,
        node_uid: Callable[[str], str | None] = lambda _: None,
        log: Any = None,
    ) -> None:
        self._log = log if log is not None else logs.get("remediation_operator.records")
        self._client = client
        self._events = events
        self._node_uid = node_uid
        self._uids: dict[str, str] = {}
        self._summaries: dict[str, PolicySummary] = {}

    def _remember(self, body: dict[str, Any]) -> RemediationRecord:
        record = self._read(body)
        if record is None:
            name = (body.get("metadata") or {}).get("name")
            raise NotFound(f"Remediation {name} has no status yet")
        return record

    def _read(self, body: dict[str, Any]) -> RemediationRecord | None:
        metadata = body.get("metadata") or {}
        if metadata.get("uid"):
            self._uids[str(metadata.get("name"))] = str(metadata["uid"])
        try:
            return to_record(body)
        except remediation_status.InvalidStatusError as error:
            self._log.warning("remediation_unreadable", remediation=error.name, error=str(error))
            return None

    async def list_remediations(self, policy: str) -> Sequence[RemediationRecord]:
        async with mapped():
            listed = await records.list_remediations(self._client)
        mine = (b for b in listed if (b.get("spec") or {}).get("policyName") == policy)
        return [r for r in map(self._read, mine) if r is not None]

    async def get_remediation(self, name: str) -> RemediationRecord:
        async with mapped():
            return self._remember(await records.get_remediation(self._client, name))

    async def create_remediation(self, state: RemediationState) -> RemediationRecord:
        status = remediation_status.to_status(state)
        async with mapped():
            body = await records.create_remediation(
                self._client, state.name, state.node, state.policy, status
            )
        return self._remember(body)

    async def update_remediation(
        self, state: RemediationState, resource_version: str
    ) -> RemediationRecord:
        status = remediation_status.to_status(state)
        async with mapped():
            body = await records.write_remediation_status(
                self._client, state.name, status, resource_version
            )
        return self._remember(body)

    async def read_policy_state(self, policy: str) -> PolicyState:
        async with mapped():
            body = await records.get_policy(self._client, policy)
        try:
            breakers = breaker_status.from_status(body.get("status") or {})
        except breaker_status.InvalidBreakerStatusError as error:
            self._log.warning("policy_breakers_unreadable", policy=policy, error=str(error))
            breakers = {}
        return PolicyState(breakers=breakers, summary=self._summaries.get(policy))

    async def write_policy_state(
        self, policy: str, generation: int, state: PolicyState, now: datetime
    ) -> None:
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            new = dict(status)
            new["observedGeneration"] = generation
            if state.summary is not None:
                new.update(_summary_status(state.summary))
            new.update(breaker_status.to_status(state.breakers))
            open_groups = sorted(g for g, b in state.breakers.items() if b.open)
            conditions = list(new.get("conditions") or [])
            conditions = set_condition(
                conditions,
                "CircuitOpen",
                "True" if open_groups else "False",
                "CircuitOpen" if open_groups else "CircuitClosed",
                (
                    "Too many nodes show a fault at once in "
                    + ", ".join(repr(g) for g in open_groups)
                    + "; no new remediation starts."
                )
                if open_groups
                else "The circuit breaker is closed.",
                generation,
                now,
            )
            paused = state.summary is not None and state.summary.paused
            conditions = set_condition(
                conditions,
                "Paused",
                "True" if paused else "False",
                "Paused" if paused else "Resumed",
                "The policy is paused; no new step starts."
                if paused
                else "The policy is not paused.",
                generation,
                now,
            )
            new["conditions"] = conditions
            return None if new == status else new

        async with mapped():
            await records.update_policy_status(self._client, policy, change)
        if state.summary is not None:
            self._summaries[policy] = state.summary

    async def emit(self, explanation: Explanation) -> None:
        kind = "Warning" if str(explanation.severity) == "Warning" else "Normal"
        targets: list[ObjectRef] = []
        if explanation.node:
            targets.append(
                ObjectRef("Node", explanation.node, "v1", uid=self._node_uid(explanation.node))
            )
        if explanation.remediation:
            targets.append(
                ObjectRef(
                    "Remediation",
                    explanation.remediation,
                    names.GROUP_VERSION,
                    uid=self._uids.get(explanation.remediation),
                )
            )
        if not explanation.node and not explanation.remediation:
            targets.append(ObjectRef("RemediationPolicy", explanation.policy, names.GROUP_VERSION))
        for target in targets:
            async with mapped():
                await self._events.record(
                    target, str(explanation.reason), explanation.message, kind, explanation.at
                )
