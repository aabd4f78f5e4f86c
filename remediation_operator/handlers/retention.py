"""Delete finished Remediations once they are older than `--retention`.

Terminal Remediations are the per-node history the policy's `history:` counts and what
`kubectl get remediations` shows afterwards, so they are kept for the retention period (30
days by default) and then deleted. The janitor sleeps until the earliest expiry it knows of
and is poked when a Remediation finishes: no periodic listing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.api import timestamps

TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled"})


def expiry(body: Mapping[str, Any], retention: timedelta) -> datetime | None:
    status = body.get("status") or {}
    if status.get("phase") not in TERMINAL:
        return None
    finished = status.get("finishedAt")
    try:
        moment = timestamps.parse_time(finished) if isinstance(finished, str) else None
    except ValueError:
        moment = None
    if moment is None:
        return None
    return moment + retention


class Janitor:
    def __init__(
        self,
        retention: timedelta,
        delete: Callable[[str, str], Awaitable[None]],
        may_act: Callable[[], bool],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        log: Any = None,
    ) -> None:
        self._retention = retention
        self._delete = delete
        self._may_act = may_act
        self._clock = clock
        self._log = log
        self._expiries: dict[str, tuple[datetime, str]] = {}
        self._poke = asyncio.Event()

    def observe(self, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name") or "")
        when = expiry(body, self._retention)
        if when is None:
            self._expiries.pop(name, None)
            return
        self._expiries[name] = (when, str(metadata.get("resourceVersion") or ""))
        self._poke.set()

    def forget(self, name: str) -> None:
        self._expiries.pop(name, None)

    def poke(self) -> None:
        self._poke.set()

    def due(self, now: datetime) -> list[tuple[str, str]]:
        return [(name, rv) for name, (when, rv) in self._expiries.items() if when <= now]

    async def run(self) -> None:
        while True:
            now = self._clock()
            if self._may_act():
                for name, rv in self.due(now):
                    try:
                        await self._delete(name, rv)
                        self._expiries.pop(name, None)
                        if self._log is not None:
                            self._log.info("remediation_expired", remediation=name)
                    except Exception as error:  # retried at the next wake
                        if self._log is not None:
                            self._log.warning(
                                "remediation_expiry_failed", remediation=name, error=repr(error)
                            )
            pending = [when for when, _ in self._expiries.values() if when > now]
            timeout = (min(pending) - now).total_seconds() if pending else None
            if self.due(now) and self._may_act():
                timeout = 5.0  # a delete failed: retry soon
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout=timeout)
