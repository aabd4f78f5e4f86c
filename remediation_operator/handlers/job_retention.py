"""Delete executor Jobs once their step has ended, whatever the outcome (issue 24, item 4).

A Job's `ttlSecondsAfterFinished` only removes a Job that finished. A Validate or Diagnose
Job that timed out, or a reset Job whose incident was cancelled, or one pinned to a node that
went away, never finishes: it stayed for good (eight in one afternoon, issue 24). So the
operator deletes them itself: a Job is kept `--job-retention` (default 1 h) after its step
ended, for `kubectl logs`, then deleted with its pods (propagationPolicy Background).

When the step ended, in order:
1. the Job finished (Complete or Failed): its completion time;
2. its Remediation is finished: the Remediation's `finishedAt`;
3. its Remediation records the Job's attempt as finished: that record's `finishedAt`;
4. its Remediation is gone: when this replica first saw the Job without it (after a restart,
   the retention starts again: a Job is kept longer, never deleted early).
Otherwise the step still runs and the Job stays. Only the leader deletes, once the caches
are synced (before that every Remediation would look gone).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.api import timestamps
from remediation_operator.domain.policy import Action
from remediation_operator.k8s import names
from remediation_operator.k8s.executors import job_name

TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled"})
SWEEP = timedelta(seconds=30)
"""How often the Jobs are looked at (also at once when one finishes or a Remediation ends)."""


@dataclass(frozen=True)
class JobKey:
    namespace: str
    name: str


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return timestamps.parse_time(value)
    except ValueError:
        return None


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def finished_at(job: Mapping[str, Any]) -> datetime | None:
    """When the Job finished (Complete or Failed condition), None while it has not."""
    status = _dict(job.get("status"))
    for condition in status.get("conditions") or []:
        condition = _dict(condition)
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime")) or _time(status.get("completionTime"))
    return None


def step_ended_at(
    job: Mapping[str, Any],
    remediation: Mapping[str, Any] | None,
    orphaned_since: datetime | None,
) -> datetime | None:
    """When the Job's step ended (module docstring); None: it still runs."""
    done = finished_at(job)
    if done is not None:
        return done
    if remediation is None:
        return orphaned_since
    status = _dict(remediation.get("status"))
    if status.get("phase") in TERMINAL:
        return _time(status.get("finishedAt")) or orphaned_since
    metadata = _dict(job.get("metadata"))
    name = str(metadata.get("name") or "")
    action = str(_dict(metadata.get("labels")).get(names.ACTION_LABEL) or "")
    owner = str(_dict(remediation.get("metadata")).get("name") or "")
    for record in status.get("steps") or []:
        record = _dict(record)
        attempt = record.get("attempt")
        if record.get("action") != action or not isinstance(attempt, int):
            continue
        try:
            ours = job_name(owner, Action(action), attempt) == name
        except ValueError:
            continue
        if ours:
            return _time(record.get("finishedAt"))
    return None


class JobJanitor:
    """Keeps the executor Jobs and Remediations it is told about; deletes expired Jobs."""

    def __init__(
        self,
        retention: timedelta,
        delete: Callable[[JobKey], Awaitable[None]],
        may_act: Callable[[], bool],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        log: Any = None,
    ) -> None:
        self._retention = retention
        self._delete = delete
        self._may_act = may_act
        self._clock = clock
        self._log = log
        self._jobs: dict[JobKey, Mapping[str, Any]] = {}
        self._remediations: dict[str, Mapping[str, Any]] = {}
        self._orphaned: dict[JobKey, datetime] = {}
        self._poke = asyncio.Event()

    def job(self, kind: str | None, body: Mapping[str, Any]) -> None:
        metadata = _dict(body.get("metadata"))
        key = JobKey(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if not key.name:
            return
        if kind == "DELETED":
            self._jobs.pop(key, None)
            self._orphaned.pop(key, None)
            return
        self._jobs[key] = body
        if finished_at(body) is not None:
            self._poke.set()

    def remediation(self, kind: str | None, body: Mapping[str, Any]) -> None:
        name = str(_dict(body.get("metadata")).get("name") or "")
        if not name:
            return
        if kind == "DELETED":
            self._remediations.pop(name, None)
        else:
            self._remediations[name] = body
        self._poke.set()

    def due(self, now: datetime) -> list[JobKey]:
        """The Jobs whose step ended at least `retention` before `now`."""
        return [key for key, when in self._expiries(now).items() if when <= now]

    def next_expiry(self, now: datetime) -> datetime | None:
        """The earliest expiry after `now` (None: no Job's step has ended)."""
        return min((w for w in self._expiries(now).values() if w > now), default=None)

    def _expiries(self, now: datetime) -> dict[JobKey, datetime]:
        found = {}
        for key, job in self._jobs.items():
            annotations = _dict(_dict(job.get("metadata")).get("annotations"))
            owner = self._remediations.get(str(annotations.get(names.REMEDIATION_ANNOTATION)))
            if owner is None:
                self._orphaned.setdefault(key, now)
            else:
                self._orphaned.pop(key, None)
            ended = step_ended_at(job, owner, self._orphaned.get(key))
            if ended is not None:
                found[key] = ended + self._retention
        return found

    async def sweep(self) -> None:
        """Delete every expired Job now (only while `may_act`)."""
        if not self._may_act():
            return
        for key in self.due(self._clock()):
            try:
                await self._delete(key)
            except Exception as error:  # retried at the next sweep
                if self._log is not None:
                    self._log.warning("executor_job_delete_failed", job=key.name, error=repr(error))
                continue
            self._jobs.pop(key, None)
            self._orphaned.pop(key, None)
            if self._log is not None:
                self._log.info("executor_job_deleted", job=key.name, namespace=key.namespace)

    async def run(self) -> None:
        while True:
            await self.sweep()
            self._poke.clear()
            now = self._clock()
            timeout = SWEEP
            upcoming = self.next_expiry(now) if self._may_act() else None
            if upcoming is not None:
                timeout = min(timeout, upcoming - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout=timeout.total_seconds())
