"""Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

Only the replica holding the Lease acts; the others keep their caches warm and stay ready,
so a takeover needs no warm-up. The decision (`decide`) is pure and takes `now`; the loop
(`Elector`) reads and writes the Lease with resourceVersion preconditions, so two replicas
racing for an expired Lease cannot both win (one gets 409). A leader that cannot renew for
`renew_deadline` stops acting at once, before its Lease can expire and a peer take over: the
same ordering client-go relies on (renewDeadline < leaseDuration).

A leader renews optimistically: one PUT of the Lease as it last wrote it (its resourceVersion
is the precondition), with no GET first; only a failure (409: someone else wrote the Lease)
takes the slow path of a read and a decision. client-go does the same since
kubernetes/kubernetes#122069 ("Optimistically update leader lock"). It halves the renewals'
round trips, which are most of an idle operator's CPU (docs/performance.md).

A held Lease is judged expired by the time WE observed its record change, on our own clock,
never by comparing the holder's renewTime with our clock: client-go's leaderelection records
`observedTime` when the record it reads differs from the last one and treats the Lease as
valid until `observedTime + leaseDuration` ("tolerant to arbitrary clock skew",
client-go/tools/leaderelection/doc.go). A candidate whose clock runs 16 s ahead must not take
a Lease its holder renewed a second ago.

A round that cannot read or write the Lease (its namespace does not exist, RBAC forbids it,
the API is unreachable) is not silent: the elector keeps the problem (`problem`, cleared by
the next good round) and counts it by reason (`errors`), and logs it as an error, again when
the reason changes and otherwise at most every `ERROR_LOG_INTERVAL`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from remediation_operator.k8s.client import ApiError, Client, path

GROUP_VERSION = "coordination.k8s.io/v1"
ERROR_LOG_INTERVAL = timedelta(seconds=30)
"""A persisting Lease problem is logged again at most this often (the count goes with it)."""


class LeaseProblem(StrEnum):
    """Why a leader election round could not read or write the Lease (the metric's label)."""

    NamespaceNotFound = "NamespaceNotFound"
    Forbidden = "Forbidden"
    Unauthorized = "Unauthorized"
    Unreachable = "Unreachable"
    ServerError = "ServerError"


@dataclass(frozen=True)
class LeaseError:
    reason: LeaseProblem
    message: str
    """One sentence saying what is wrong and what to do about it."""


def classify(error: ApiError, namespace: str, name: str, verb: str) -> LeaseError:
    """What a failed Lease request means to the person running the operator."""
    lease = f"Lease {namespace}/{name}"
    said = f" (the API server said: {error.message})" if error.message else ""
    if error.status == 404:
        return LeaseError(
            LeaseProblem.NamespaceNotFound,
            f"cannot {verb} {lease}: namespace {namespace!r} does not exist; create it"
            f" (kubectl create namespace {namespace}) or pass --namespace naming one that does",
        )
    if error.status == 403:
        return LeaseError(
            LeaseProblem.Forbidden,
            f"not allowed to {verb} {lease}: grant get, create and update on"
            f" coordination.k8s.io leases in {namespace!r} (the chart's Role does){said}",
        )
    if error.status == 401:
        return LeaseError(
            LeaseProblem.Unauthorized,
            f"cannot {verb} {lease}: the API server rejected the credentials{said}",
        )
    if error.status == 0:
        return LeaseError(
            LeaseProblem.Unreachable,
            f"cannot {verb} {lease}: the API server is unreachable ({error.message})",
        )
    return LeaseError(
        LeaseProblem.ServerError,
        f"cannot {verb} {lease}: {error.status} {error.reason}{said}",
    )


class Move(StrEnum):
    Create = "Create"
    """No Lease exists: create it holding it."""
    Renew = "Renew"
    """We hold it: refresh renewTime."""
    Acquire = "Acquire"
    """It expired (or was released): take it over, counting a transition."""
    Wait = "Wait"
    """Someone else holds a live Lease."""


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None
    duration: timedelta
    acquired_at: datetime | None
    renewed_at: datetime | None
    transitions: int
    resource_version: str

    @classmethod
    def from_object(cls, lease: dict[str, Any], default_duration: timedelta) -> LeaseRecord:
        spec = lease.get("spec") or {}
        seconds = spec.get("leaseDurationSeconds")
        return cls(
            holder=spec.get("holderIdentity") or None,
            duration=timedelta(seconds=seconds) if isinstance(seconds, int) else default_duration,
            acquired_at=parse_micro_time(spec.get("acquireTime")),
            renewed_at=parse_micro_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion", "")),
        )

    def expired(self, observed_at: datetime, now: datetime) -> bool:
        """`leaseDuration` has passed on OUR clock since we saw this record change
        (client-go's observedTime rule; the holder's renewTime is never compared with our
        clock, so clock skew between replicas cannot end a live Lease early)."""
        return observed_at + self.duration <= now


def decide(
    record: LeaseRecord | None, identity: str, now: datetime, observed_at: datetime | None = None
) -> Move:
    """The move for this round; `observed_at`: when we first saw `record` as it is now (by
    our clock; None: just now)."""
    if record is None:
        return Move.Create
    if record.holder == identity:
        return Move.Renew
    if record.holder is None or record.expired(observed_at or now, now):
        return Move.Acquire
    return Move.Wait


def parse_micro_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(
    move: Move, record: LeaseRecord | None, identity: str, duration: timedelta, now: datetime
) -> dict[str, Any]:
    """The Lease spec to write for `move` (not called for Wait)."""
    renewing = move is Move.Renew and record is not None
    acquired = record.acquired_at if renewing and record is not None else now
    transitions = record.transitions if record is not None else 0
    if move is Move.Acquire:
        transitions += 1
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(int(duration.total_seconds()), 1),
        "acquireTime": micro_time(acquired or now),
        "renewTime": micro_time(now),
        "leaseTransitions": transitions,
    }


@dataclass(frozen=True)
class Timings:
    lease_duration: timedelta = timedelta(seconds=15)
    renew_deadline: timedelta = timedelta(seconds=10)
    retry_period: timedelta = timedelta(seconds=2)

    def __post_init__(self) -> None:
        if not timedelta(0) < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "--retry-period < --renew-deadline < --lease-duration must hold (got"
                f" {self.retry_period.total_seconds():g}s,"
                f" {self.renew_deadline.total_seconds():g}s,"
                f" {self.lease_duration.total_seconds():g}s)"
            )


class Elector:
    """Keeps trying to hold the Lease; `leading` flips the moment leadership is won or lost."""

    def __init__(
        self,
        client: Client,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: Timings,
        on_change: Callable[[bool], None] = lambda _: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        log: Any = None,
    ) -> None:
        self.log = log
        self._client = client
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._timings = timings
        self._on_change = on_change
        self._clock = clock
        self._leading = False
        self._last_renewal: datetime | None = None
        self._record: LeaseRecord | None = None
        self._written: dict[str, Any] | None = None
        """The Lease as our last successful write returned it (the optimistic renewal's base)."""
        self._observed: dict[str, Any] | None = None
        self._observed_at: datetime | None = None
        """The Lease spec we last saw and when, by our clock, we saw it change."""
        self.problem: LeaseError | None = None
        """Why the latest round could not read or write the Lease; None after a good round."""
        self.errors: Counter[str] = Counter()
        """Failed rounds by LeaseProblem (cumulative, for the metric)."""
        self._logged: tuple[LeaseProblem, datetime] | None = None
        self._unlogged = 0
        self.slow_paths = 0
        """Rounds that had to read the Lease (client-go's leader_election_slowpath_total)."""
        self.changed = asyncio.Event()

    @property
    def leading(self) -> bool:
        return self._leading

    def _set(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            self.changed.set()
            self._on_change(leading)

    def _path(self, name: str | None = None) -> str:
        return path(GROUP_VERSION, "leases", name, namespace=self._namespace)

    @property
    def healthy(self) -> bool:
        """The latest round could read (and if needed write) the Lease."""
        return self.problem is None

    async def try_once(self) -> bool:
        """One acquire-or-renew round; returns whether we lead afterwards."""
        now = self._clock()
        if self._leading and self._written is not None and await self._renew_optimistically(now):
            self._fine()
            return True
        self.slow_paths += 1
        verb = "read"
        try:
            try:
                lease: dict[str, Any] | None = await self._client.get(self._path(self._name))
            except ApiError as error:
                if error.status != 404:
                    raise
                lease = None
            record = LeaseRecord.from_object(lease, self._timings.lease_duration) if lease else None
            self._observe(lease, now)
            move = decide(record, self.identity, now, self._observed_at)
            if move is Move.Wait:
                self._record = record
                self._set(False)
                self._fine()
                return False
            spec = lease_spec(move, record, self.identity, self._timings.lease_duration, now)
            if move is Move.Create or lease is None:
                verb = "create"
                body = {
                    "apiVersion": GROUP_VERSION,
                    "kind": "Lease",
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "spec": spec,
                }
                written = await self._client.create(self._path(), body)
            else:
                verb = "update"
                lease["spec"] = spec
                written = await self._client.replace(self._path(self._name), lease)
        except ApiError as error:
            self._written = None
            if error.status != 409:  # 409: a peer wrote first, the race leader election expects
                self._failed(classify(error, self._namespace, self._name, verb), now)
            self._check_deadline(now)
            return self._leading
        self._wrote(written, now)
        self._fine()
        return True

    def _observe(self, lease: dict[str, Any] | None, now: datetime) -> None:
        spec = (lease or {}).get("spec")
        if spec != self._observed or self._observed_at is None:
            self._observed = spec
            self._observed_at = now

    def _failed(self, problem: LeaseError, now: datetime) -> None:
        self.problem = problem
        self.errors[problem.reason] += 1
        self._unlogged += 1
        last = self._logged
        if last is not None and last[0] is problem.reason and now - last[1] < ERROR_LOG_INTERVAL:
            return
        if self.log is not None:
            self.log.error(
                "leader_election_failed",
                reason=str(problem.reason),
                message=problem.message,
                lease=f"{self._namespace}/{self._name}",
                failures=self._unlogged,
            )
        self._logged = (problem.reason, now)
        self._unlogged = 0

    def _fine(self) -> None:
        if self.problem is not None and self.log is not None:
            self.log.info(
                "leader_election_recovered",
                lease=f"{self._namespace}/{self._name}",
                after=str(self.problem.reason),
            )
        self.problem = None
        self._logged = None
        self._unlogged = 0

    async def _renew_optimistically(self, now: datetime) -> bool:
        """Renew from our last write without reading first; False: take the slow path."""
        written, record = self._written, self._record
        if written is None or record is None or record.holder != self.identity:
            return False
        lease = dict(written)
        lease["spec"] = lease_spec(
            Move.Renew, record, self.identity, self._timings.lease_duration, now
        )
        try:
            renewed = await self._client.replace(self._path(self._name), lease)
        except ApiError:
            self._written = None  # someone else wrote it, or the API failed: read and decide
            return False
        self._wrote(renewed, now)
        return True

    def _wrote(self, lease: dict[str, Any], now: datetime) -> None:
        self._written = lease
        self._observed, self._observed_at = lease.get("spec"), now
        self._record = LeaseRecord.from_object(lease, self._timings.lease_duration)
        self._last_renewal = now
        self._set(True)

    def _check_deadline(self, now: datetime) -> None:
        if self._leading and (
            self._last_renewal is None or now - self._last_renewal >= self._timings.renew_deadline
        ):
            self._set(False)

    async def run(self) -> None:
        """Acquire and renew until cancelled, every retry period."""
        while True:
            try:
                await self.try_once()
            except Exception:  # a malformed Lease must not stop the renew-deadline check
                self._check_deadline(self._clock())
                if self.log is not None:
                    self.log.exception("leader_election_failed", lease=self._name)
            self._check_deadline(self._clock())
            await asyncio.sleep(self._timings.retry_period.total_seconds())

    async def release(self) -> None:
        """Give the Lease up on a clean stop so a peer takes over without waiting it out."""
        if not self._leading:
            return
        self._set(False)
        self._written = None
        try:
            lease = await self._client.get(self._path(self._name))
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            # client-go releases by writing an empty holder and a 1 s duration.
            spec.update({"holderIdentity": None, "leaseDurationSeconds": 1})
            spec["renewTime"] = micro_time(self._clock())
            lease["spec"] = spec
            await self._client.replace(self._path(self._name), lease)
        except ApiError:
            return
