"""The engine's RecordPort over the Kubernetes API: Remediations, policy status, Events.

Remediation status dicts are converted to and from `RemediationState` by the api package
(`api.remediation_status`, `api.breaker_status`). The policy status parts the engine owns
(counts, headroom, breakers, CircuitOpen and Paused conditions) are merged into the status
the runtime also writes (Accepted, lastAcceptedSpec), never replacing those.

Reads are served from memory once the runtime has synced: every reconcile needs all of its
policy's Remediations and its breaker state, and listing them over the API per reconcile cost
a round trip and a parse of every Remediation per node event (docs/performance.md). The
runtime feeds the watch events it gets from kopf into `observe` / `observe_policy`; our own
writes are cached from their responses at once, so the next reconcile never sees an older
version than the one it wrote. A watch event older than our own write of the same object is
ignored until the watch catches up. "Older" compares resourceVersions as integers, as
kube-apiserver's are (etcd revisions); an opaque, non-numeric one is always taken. A stale
read can only cause a 409 Conflict on the next write, after which the object is re-read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from remediation_operator.api import breaker_status, remediation_status, timestamps
from remediation_operator.domain.planner import PolicySummary
from remediation_operator.domain.remediation import RemediationState
from remediation_operator.engine.ports import (
    Conflict,
    Explanation,
    NotFound,
    PolicyState,
    PortError,
    RemediationRecord,
)
from remediation_operator.handlers.conditions import set_condition
from remediation_operator.handlers.port_errors import mapped
from remediation_operator.k8s import names, records
from remediation_operator.k8s.client import ApiError, Client
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


def _older(version: str, than: str) -> bool:
    """True when resourceVersion `version` is known to precede `than` (both numeric)."""
    return version.isdigit() and than.isdigit() and int(version) < int(than)


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


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
        self.synced = False
        """Set by the runtime once its first full list went through `observe`; until then
        every read goes to the API."""
        self._bodies: dict[str, Mapping[str, Any]] = {}
        self._written: dict[str, str] = {}
        """Remediations we wrote: the resourceVersion the watch has not delivered yet."""
        self._parsed: dict[str, tuple[str, RemediationRecord | None]] = {}
        self._policy_versions: dict[str, str] = {}
        """The newest resourceVersion of each policy seen on the watch."""
        self._policy_states: dict[str, tuple[str, PolicyState]] = {}
        self._policy_bodies: dict[str, dict[str, Any]] = {}
        """Each policy as our last status write returned it."""
        """Breakers as we last read or wrote them, with that write's resourceVersion."""

    # Watched state ---------------------------------------------------------------------------

    def observe(self, kind: str | None, body: Mapping[str, Any]) -> None:
        """A Remediation watch event (also the initial list, as ADDED)."""
        name = _name(body)
        if not name:
            return
        if kind == "DELETED":
            self._bodies.pop(name, None)
            self._written.pop(name, None)
            self._parsed.pop(name, None)
            return
        version, ours = _version(body), self._written.get(name)
        if ours is not None:
            if _older(version, ours):
                return  # the watch has not caught up with our own write yet
            del self._written[name]
        self._bodies[name] = body

    def observe_policy(self, kind: str | None, body: Mapping[str, Any]) -> None:
        name = _name(body)
        if kind == "DELETED":
            self._policy_versions.pop(name, None)
            self._policy_states.pop(name, None)
            self._policy_bodies.pop(name, None)
        elif name:
            self._policy_versions[name] = _version(body)

    def _wrote(self, body: dict[str, Any]) -> None:
        name = _name(body)
        if name:
            self._bodies[name] = body
            self._written[name] = _version(body)

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
        if not self.synced:
            async with mapped():
                listed = await records.list_remediations(self._client)
            mine = (b for b in listed if (b.get("spec") or {}).get("policyName") == policy)
            return [r for r in map(self._read, mine) if r is not None]
        out: list[RemediationRecord] = []
        for name, body in self._bodies.items():
            if (body.get("spec") or {}).get("policyName") != policy:
                continue
            version = _version(body)
            parsed = self._parsed.get(name)
            if parsed is None or parsed[0] != version:
                parsed = self._parsed[name] = (version, self._read(dict(body)))
            if parsed[1] is not None:
                out.append(parsed[1])
        return out

    async def get_remediation(self, name: str) -> RemediationRecord:
        async with mapped():
            body = await records.get_remediation(self._client, name)
        self._wrote(body)
        return self._remember(body)

    async def create_remediation(self, state: RemediationState) -> RemediationRecord:
        status = remediation_status.to_status(state)
        try:
            async with mapped():
                body = await records.create_remediation(
                    self._client, state.name, state.node, state.policy, status
                )
        except Conflict:
            await self._refresh(state.name)
            raise
        self._wrote(body)
        return self._remember(body)

    async def update_remediation(
        self, state: RemediationState, resource_version: str
    ) -> RemediationRecord:
        status = remediation_status.to_status(state)
        try:
            async with mapped():
                body = await records.write_remediation_status(
                    self._client, state.name, status, resource_version
                )
        except Conflict:
            await self._refresh(state.name)
            raise
        self._wrote(body)
        return self._remember(body)

    async def _refresh(self, name: str) -> None:
        """After a Conflict: our copy is stale, so the re-plan that follows reads it anew."""
        with contextlib.suppress(PortError):
            async with mapped():
                body = await records.get_remediation(self._client, name)
            self._wrote(body)

    async def read_policy_state(self, policy: str) -> PolicyState:
        cached = self._policy_states.get(policy)
        seen = self._policy_versions.get(policy, "")
        if self.synced and cached is not None and not _older(cached[0], seen):
            breakers = cached[1].breakers
        else:
            async with mapped():
                body = await records.get_policy(self._client, policy)
            breakers = self._breakers(policy, body)
            self._policy_states[policy] = (_version(body), PolicyState(breakers=breakers))
        return PolicyState(breakers=breakers, summary=self._summaries.get(policy))

    def _breakers(self, policy: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return dict(breaker_status.from_status(body.get("status") or {}))
        except breaker_status.InvalidBreakerStatusError as error:
            self._log.warning("policy_breakers_unreadable", policy=policy, error=str(error))
            return {}

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
            written = await self._write_policy_status(policy, change)
        self._policy_bodies[policy] = written
        self._policy_states[policy] = (_version(written), state)
        if state.summary is not None:
            self._summaries[policy] = state.summary

    async def _write_policy_status(
        self, policy: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any]:
        """From the policy as we last wrote it, when the watch shows nobody wrote since (one
        round trip instead of a read and a write); a 409 falls back to read-and-write."""
        cached = self._policy_bodies.get(policy)
        seen = self._policy_versions.get(policy, "")
        if self.synced and cached is not None and not _older(_version(cached), seen):
            status = change(dict(cached.get("status") or {}))
            if status is None:
                return cached
            try:
                return await self._client.replace(
                    records.policy_path(policy, "status"), dict(cached, status=status)
                )
            except ApiError as error:
                if error.status != 409:
                    raise
        return await records.update_policy_status(self._client, policy, change)

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
