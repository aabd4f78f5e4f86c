"""The engine's RecordPort over the Kubernetes API: Remediations, policy status, Events.

Remediation status dicts are converted to and from `RemediationState` by the api package
(`api.remediation_status`, `api.breaker_status`), with the Ready/Reconciling/Stalled conditions
tools wait on (their observedGeneration is the object's generation as last seen). The policy
status also gets `mode` (of the last accepted spec, default applied) and `paused`, which the
MODE and PAUSED columns show. The policy status parts the engine owns
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

Nothing cosmetic is written inside a reconcile (the p99 tail in docs/performance.md): `emit`
only queues its Events (`event_queue`), and a policy status write that changes only the
summary (counts, headroom) is coalesced to one per second per policy (`coalesced_writes`);
a write that changes decision state (breakers, the CircuitOpen or Paused condition, the
observed generation) is made at once, as before. `read_policy_state` returns the newest
state the engine gave, pending summary included, so the engine does not send it again.
The runtime runs both background tasks between `start` and `stop`; `stop` flushes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remediation_operator.api import breaker_status, remediation_status, timestamps
from remediation_operator.api.policy import MAX_OVERLAPPED_BY
from remediation_operator.domain.fleet import BreakerState
from remediation_operator.domain.planner import PolicySummary
from remediation_operator.domain.policy import Policy
from remediation_operator.domain.remediation import RemediationState
from remediation_operator.engine.ports import (
    Conflict,
    Explanation,
    NotFound,
    PolicyState,
    PortError,
    RemediationRecord,
)
from remediation_operator.handlers import coalesced_writes, event_queue
from remediation_operator.handlers.coalesced_writes import CoalescedWrites
from remediation_operator.handlers.conditions import set_condition
from remediation_operator.handlers.event_queue import EventQueue, QueuedEvent
from remediation_operator.handlers.port_errors import mapped
from remediation_operator.k8s import names, records
from remediation_operator.k8s.client import ApiError, Client
from remediation_operator.k8s.events import EventRecorder, ObjectRef
from remediation_operator.observability import logs

Spawn = Callable[[str, Callable[[], Coroutine[Any, Any, None]]], "asyncio.Task[None] | None"]
"""Starts a named background task from its coroutine function (`Supervisor.spawn`)."""


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


def _policy_of(body: Mapping[str, Any]) -> str:
    return str((body.get("spec") or {}).get("policyName") or "")


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def _time(moment: datetime) -> str:
    return timestamps.format_time(moment)


STOP_DEADLINE = 2.0
"""Seconds a clean stop waits for queued Events and pending status writes."""


@dataclass(frozen=True)
class _Decisive:
    """The parts of a policy status that are written at once: the breakers (read back by the
    next plan and after a restart), the conditions derived from them and from `paused`, and
    the generation they were computed for."""

    generation: int | None
    breakers: Mapping[str, BreakerState]
    paused: bool


def _decisive(generation: int | None, state: PolicyState) -> _Decisive:
    paused = state.summary is not None and state.summary.paused
    return _Decisive(generation, dict(state.breakers), paused)


def _paused_condition(status: Mapping[str, Any]) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == "Paused" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _observed_generation(status: Mapping[str, Any]) -> int | None:
    value = status.get("observedGeneration")
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class _StatusWrite:
    """A policy status write left for later (only its summary differs from the API's)."""

    generation: int
    state: PolicyState
    now: datetime


def _summary_status(summary: PolicySummary) -> dict[str, Any]:
    return {
        "observed": summary.observed,
        "unhealthy": summary.unhealthy,
        "inFlight": summary.in_flight,
        "headroom": {str(k): v for k, v in summary.headroom.items()},
        "paused": summary.paused,
        "overlappedNodes": len(summary.overlapped),
        "overlappedBy": sorted(set(summary.overlapped.values()))[:MAX_OVERLAPPED_BY],
    }


def _overlap_message(overlapped: Mapping[str, str]) -> str:
    """Issue 12, defect 3: the losing policy says which nodes it leaves to whom."""
    if not overlapped:
        return "No node this policy selects is owned by another policy."
    owners = sorted(set(overlapped.values()))
    named = ", ".join(owners[:MAX_OVERLAPPED_BY])
    if len(owners) > MAX_OVERLAPPED_BY:
        named += f" and {len(owners) - MAX_OVERLAPPED_BY} more"
    nodes = len(overlapped)
    return (
        f"{nodes} selected node{'s' if nodes != 1 else ''} "
        f"{'are' if nodes != 1 else 'is'} owned by {named} (higher weight, an older policy or"
        " an open incident there); this policy opens no incident on "
        f"{'them' if nodes != 1 else 'it'}."
    )


def _effective_mode(status: Mapping[str, Any]) -> str:
    """The mode the operator runs: that of the last accepted spec, its default applied (the
    MODE column; a printer column's JSONPath cannot apply a default itself)."""
    accepted = status.get("lastAcceptedSpec")
    mode = accepted.get("mode") if isinstance(accepted, Mapping) else None
    return str(mode or Policy.mode)


class KubernetesRecords:
    def __init__(
        self,
        client: Client,
        events: EventRecorder | EventQueue,
        node_uid: Callable[[str], str | None] = lambda _: None,
        log: Any = None,
        *,
        leading: Callable[[], bool] = lambda: True,
        status_interval: float = coalesced_writes.INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log if log is not None else logs.get("remediation_operator.records")
        self._client = client
        self.events = events if isinstance(events, EventQueue) else EventQueue(events)
        """Events waiting to be posted: `len()` is the queue length, `.dropped` a counter."""
        self.status_writes: CoalescedWrites[_StatusWrite] = CoalescedWrites(
            self._write_later, interval=status_interval, clock=clock, log=self._log
        )
        """Summary-only policy status writes waiting: `len()`, `.failures`."""
        self._leading = leading
        """Background status writes are dropped once this replica stops leading."""
        self._tasks: list[asyncio.Task[None]] = []
        self._node_uid = node_uid
        self._uids: dict[str, str] = {}
        self._summaries: dict[str, PolicySummary] = {}
        """The newest summary the engine gave per policy, written or still pending."""
        self._durable: dict[str, _Decisive] = {}
        """Per policy, the decisive parts of its status as last read or written."""
        self.synced = False
        """Set by the runtime once its first full list went through `observe`; until then
        every read goes to the API."""
        self._bodies: dict[str, Mapping[str, Any]] = {}
        self._written: dict[str, str] = {}
        """Remediations we wrote: the resourceVersion the watch has not delivered yet."""
        self._parsed: dict[str, tuple[str, RemediationRecord | None]] = {}
        self._listed: dict[str, dict[str, RemediationRecord]] = {}
        """Per policy, its Remediations by name as last listed. Every reconcile lists them;
        at hundreds of open incidents a rebuild per reconcile was a large part of a fault's
        time before its cordon (docs/performance.md), so only changed ones are re-read."""
        self._unlisted: dict[str, set[str]] = {}
        """Per listed policy, names changed (or gone) since its listing was last brought up
        to date."""
        self._policy_versions: dict[str, str] = {}
        """The newest resourceVersion of each policy seen on the watch."""
        self._policy_states: dict[str, tuple[str, PolicyState]] = {}
        self._policy_bodies: dict[str, dict[str, Any]] = {}
        """Each policy as our last status write returned it."""
        """Breakers as we last read or wrote them, with that write's resourceVersion."""

    # Background tasks ------------------------------------------------------------------------

    def start(self, spawn: Spawn | None = None) -> None:
        """Start posting queued Events and writing coalesced policy status (idempotent);
        `spawn(name, run)` starts each (the process's supervisor), else a bare task."""

        def bare(name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
            return asyncio.create_task(run(), name=name)

        if not self._tasks:
            start = spawn or bare
            started = [
                start("events", self.events.run),
                start("policy-status-writes", self.status_writes.run),
            ]
            self._tasks = [t for t in started if t is not None]

    async def flush(self) -> None:
        """Write every pending policy status now, and wait until the queued Events are posted
        (the latter only while started)."""
        await self.status_writes.flush()
        if self._tasks:
            await self.events.drain()

    async def stop(self, deadline: float = STOP_DEADLINE) -> None:
        """Flush within `deadline` seconds, then stop the background tasks."""
        try:
            await asyncio.wait_for(self.flush(), deadline)
        except TimeoutError:
            self._log.warning(
                "records_flush_incomplete",
                events=len(self.events),
                policy_status_writes=len(self.status_writes),
            )
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # Watched state ---------------------------------------------------------------------------

    def observe(self, kind: str | None, body: Mapping[str, Any]) -> None:
        """A Remediation watch event (also the initial list, as ADDED)."""
        name = _name(body)
        if not name:
            return
        if kind == "DELETED":
            self._forget_listing(self._bodies.pop(name, None))
            self._written.pop(name, None)
            self._parsed.pop(name, None)
            return
        version, ours = _version(body), self._written.get(name)
        if ours is not None:
            if _older(version, ours):
                return  # the watch has not caught up with our own write yet
            del self._written[name]
        self._store(name, body)

    def _store(self, name: str, body: Mapping[str, Any]) -> None:
        self._forget_listing(self._bodies.get(name))
        self._forget_listing(body)
        self._bodies[name] = body

    def _forget_listing(self, body: Mapping[str, Any] | None) -> None:
        """Mark `body`'s entry in its policy's listing as needing a re-read."""
        if body is not None:
            policy = _policy_of(body)
            if policy in self._listed:
                self._unlisted.setdefault(policy, set()).add(_name(body))

    def observe_policy(self, kind: str | None, body: Mapping[str, Any]) -> None:
        name = _name(body)
        if kind == "DELETED":
            self._policy_versions.pop(name, None)
            self._policy_states.pop(name, None)
            self._policy_bodies.pop(name, None)
            self._durable.pop(name, None)
            self._summaries.pop(name, None)
            self.status_writes.discard(name)
        elif name:
            self._policy_versions[name] = _version(body)

    def _wrote(self, body: dict[str, Any]) -> None:
        name = _name(body)
        if name:
            self._store(name, body)
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
                bodies = await records.list_remediations(self._client)
            mine = (b for b in bodies if (b.get("spec") or {}).get("policyName") == policy)
            return [r for r in map(self._read, mine) if r is not None]
        listing = self._listed.get(policy)
        if listing is None:
            listing = self._listed[policy] = {}
            changed: Iterable[str] = [n for n, b in self._bodies.items() if _policy_of(b) == policy]
        else:
            changed = self._unlisted.pop(policy, ())
        for name in changed:
            body = self._bodies.get(name)
            record = None if body is None or _policy_of(body) != policy else self._parse(name, body)
            if record is None:
                listing.pop(name, None)
            else:
                listing[name] = record
        return list(listing.values())

    def _parse(self, name: str, body: Mapping[str, Any]) -> RemediationRecord | None:
        """The record of a stored body, parsed once per resourceVersion."""
        version = _version(body)
        parsed = self._parsed.get(name)
        if parsed is None or parsed[0] != version:
            parsed = self._parsed[name] = (version, self._read(dict(body)))
        return parsed[1]

    async def get_remediation(self, name: str) -> RemediationRecord:
        async with mapped():
            body = await records.get_remediation(self._client, name)
        self._wrote(body)
        return self._remember(body)

    def _generation(self, name: str) -> int:
        """The Remediation's `metadata.generation` as last seen (a new object's is 1: the API
        server starts custom resources at 1, and the spec never changes afterwards)."""
        metadata = (self._bodies.get(name) or {}).get("metadata") or {}
        generation = metadata.get("generation")
        return generation if isinstance(generation, int) and generation > 0 else 1

    async def create_remediation(self, state: RemediationState) -> RemediationRecord:
        status = remediation_status.to_status(state, generation=1)
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
        status = remediation_status.to_status(state, generation=self._generation(state.name))
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
            status = body.get("status") or {}
            self._durable[policy] = _Decisive(
                _observed_generation(status), breakers, _paused_condition(status)
            )
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
        """At once when a decisive part changes (errors propagate); else left for later."""
        if self._durable.get(policy) == _decisive(generation, state):
            if state.summary is not None:
                self._summaries[policy] = state.summary
            self.status_writes.later(policy, _StatusWrite(generation, state, now))
            return
        await self.status_writes.at_once(
            policy, lambda: self._write_state(policy, generation, state, now)
        )
        if state.summary is not None:
            self._summaries[policy] = state.summary

    async def _write_later(self, policy: str, write: _StatusWrite) -> None:
        """A coalesced write: dropped when no longer leading (the new leader writes its own)
        or when the policy is gone; other errors propagate and it is retried."""
        if not self._leading():
            self._summaries.pop(policy, None)  # not written: send it again if we lead again
            return
        with contextlib.suppress(NotFound):
            await self._write_state(policy, write.generation, write.state, write.now)

    async def _write_state(
        self, policy: str, generation: int, state: PolicyState, now: datetime
    ) -> None:
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            new = dict(status)
            new["observedGeneration"] = generation
            if state.summary is not None:
                new.update(_summary_status(state.summary))
            new["mode"] = _effective_mode(new)
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
            if state.summary is not None:
                overlapped = state.summary.overlapped
                conditions = set_condition(
                    conditions,
                    "Overlapping",
                    "True" if overlapped else "False",
                    "OwnedByOtherPolicy" if overlapped else "NoOverlap",
                    _overlap_message(overlapped),
                    generation,
                    now,
                )
            new["conditions"] = conditions
            return None if new == status else new

        async with mapped():
            written = await self._write_policy_status(policy, change)
        self._policy_bodies[policy] = written
        self._policy_states[policy] = (_version(written), state)
        self._durable[policy] = _decisive(generation, state)

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
        """Queue the Events; returns at once (`event_queue` posts them in order).

        The involved objects' uids are taken now, not when posted: a Node deleted and
        re-created under the same name in between must not get the old node's Event, and the
        Remediation's uid is known here already (from its create response, which precedes
        the announcement).
        """
        if not event_queue.worth_an_event(explanation):
            return  # (logged and counted by the engine's recorder all the same)
        kind = "Warning" if str(explanation.severity) == "Warning" else "Normal"
        targets: list[ObjectRef] = []
        if explanation.node:
            targets.append(
                ObjectRef("Node", explanation.node, "v1", uid=self._node_uid(explanation.node))
            )
        if explanation.remediation and not event_queue.on_the_node_only(explanation):
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
            self.events.put(
                QueuedEvent(
                    target,
                    str(explanation.reason),
                    explanation.message,
                    kind,
                    explanation.at,
                    policy=explanation.policy,
                    node=explanation.node,
                )
            )
