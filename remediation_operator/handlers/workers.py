"""One serialized worker per policy: events narrow its focus, deadlines wake it exactly.

Reconciles of one policy never overlap (budgets and the breaker are counted over the whole
policy, so two concurrent plans could both spend the last unit of budget). Node events only
add names to a pending focus set and poke the worker; the worker then plans just those
nodes. When nothing happens it sleeps until the earliest `next_wake` any plan returned (a
timer in the event loop's own deadline heap), then plans every node. No polling.

A worker acts only while `may_act()` says so (this replica holds the Lease); `abort()`
cancels a reconcile in flight the moment leadership is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.policy import Policy
from remediation_operator.engine.reconciler import Reconciled

ReconcileFn = Callable[[Policy, frozenset[str] | None, datetime], Awaitable[Reconciled]]
INITIAL_BACKOFF = timedelta(seconds=1)
MAX_BACKOFF = timedelta(seconds=60)


@dataclass(frozen=True)
class Round:
    """What one wake-up did (for the runtime's metrics and logs)."""

    focus: frozenset[str] | None
    started: datetime
    """The `now` the reconcile ran with: it saw every change that arrived before."""
    result: Reconciled | None
    error: BaseException | None = None


class PolicyWorker:
    def __init__(
        self,
        name: str,
        reconcile: ReconcileFn,
        may_act: Callable[[], bool],
        *,
        on_round: Callable[[Round], None] = lambda _: None,
        log: Any = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.name = name
        self.policy: Policy | None = None
        self._reconcile = reconcile
        self._may_act = may_act
        self._on_round = on_round
        self._log = log
        self._clock = clock
        self._pending: set[str] = set()
        self._everything = True
        self._wake_at: datetime | None = None
        self._poke = asyncio.Event()
        self._current: asyncio.Task[Reconciled] | None = None
        self._backoff = INITIAL_BACKOFF

    @property
    def wake_at(self) -> datetime | None:
        return self._wake_at

    def set_policy(self, policy: Policy | None) -> None:
        self.policy = policy
        self.touch_all()

    def touch(self, nodes: Collection[str]) -> None:
        """These nodes changed: plan them soon."""
        self._pending.update(nodes)
        self._poke.set()

    def touch_all(self) -> None:
        self._everything = True
        self._poke.set()

    def abort(self) -> None:
        """Stop a reconcile in flight (leadership lost); it is redone in full when we lead."""
        if self._current is not None and not self._current.done():
            self._current.cancel()
        self._everything = True

    def _due(self, now: datetime) -> bool:
        return self._wake_at is not None and self._wake_at <= now

    async def _sleep(self) -> None:
        now = self._clock()
        if self._poke.is_set() or self._due(now):
            return
        timeout = None if self._wake_at is None else (self._wake_at - now).total_seconds()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._poke.wait(), timeout=timeout)

    async def run(self) -> None:
        while True:
            await self._sleep()
            self._poke.clear()
            now = self._clock()
            policy = self.policy
            if policy is None or not self._may_act():
                if self._due(now):
                    self._wake_at = None  # the next leader or policy update replans all
                    self._everything = True
                continue
            everything = self._everything or self._due(now)
            if not everything and not self._pending:
                continue
            focus = None if everything else frozenset(self._pending)
            self._pending.clear()
            self._everything = False
            await self._round(policy, focus, now)

    async def _round(
        self,
        policy: Policy,
        focus: frozenset[str] | None,
        now: datetime,
    ) -> None:
        self._current = asyncio.ensure_future(self._reconcile(policy, focus, now))
        try:
            result = await self._current
        except asyncio.CancelledError:
            if self._current.cancelled() and not _cancelling():
                self._everything = True
                return
            raise
        except Exception as error:  # a bug or a 4xx must not kill the worker
            retry = now + self._backoff
            self._backoff = min(self._backoff * 2, MAX_BACKOFF)
            self._wake_at = retry if self._wake_at is None else min(self._wake_at, retry)
            if focus is not None:
                self._pending.update(focus)
            else:
                self._everything = True
            if self._log is not None:
                self._log.error(
                    "reconcile_failed", policy=self.name, error=repr(error), retry_at=str(retry)
                )
            self._on_round(Round(focus, now, None, error))
            return
        finally:
            self._current = None
        self._backoff = INITIAL_BACKOFF
        wake = result.next_wake
        if focus is None or self._wake_at is None or self._wake_at <= now:
            self._wake_at = wake
        elif wake is not None:
            # A focused plan only knows its nodes' deadlines: keep the others'.
            self._wake_at = min(self._wake_at, wake)
        self._on_round(Round(focus, now, result))


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
