"""One serialized worker per policy: events narrow its focus, deadlines wake it exactly.

Reconciles of one policy never overlap (budgets and the breaker are counted over the whole
policy, so two concurrent plans could both spend the last unit of budget). Node events only
add names to a pending focus set and poke the worker; the worker then plans just those
nodes. When nothing happens it sleeps until the earliest `next_wake` any plan returned (a
timer in the event loop's own deadline heap), then plans every node. No polling.

A round that raises is retried after a backoff (1 s doubling to 60 s, per policy, reset by a
round that succeeds), and pokes meanwhile only add to the focus: they do not start a round
early. Otherwise a persistent error (a 403, a bug) is retried on every node event, which in
issue 12 logged about 200 `reconcile_failed` a second and spun a core.

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
    waited: timedelta | None = None
    """From the oldest change queued for this round to its start (None: a timer woke it)."""


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
        self._retry_at: datetime | None = None
        """After a failed round: no round before this instant, whatever pokes arrive."""
        self._queued_at: datetime | None = None
        self._waited: timedelta | None = None

    @property
    def queued(self) -> int:
        """Nodes waiting for the next round (the queue-depth metric)."""
        return len(self._pending)

    @property
    def wake_at(self) -> datetime | None:
        return self._wake_at

    def set_policy(self, policy: Policy | None) -> None:
        self.policy = policy
        self.touch_all()

    def touch(self, nodes: Collection[str]) -> None:
        """These nodes changed: plan them soon."""
        self._pending.update(nodes)
        if self._queued_at is None:
            self._queued_at = self._clock()
        self._poke.set()

    def touch_all(self) -> None:
        self._everything = True
        if self._queued_at is None:
            self._queued_at = self._clock()
        self._poke.set()

    def abort(self) -> None:
        """Stop a reconcile in flight (leadership lost); it is redone in full when we lead."""
        if self._current is not None and not self._current.done():
            self._current.cancel()
        self._everything = True

    def _due(self, now: datetime) -> bool:
        return self._wake_at is not None and self._wake_at <= now

    @property
    def retry_at(self) -> datetime | None:
        """When a failed round is retried (None: the last round did not fail)."""
        return self._retry_at

    async def _sleep(self) -> None:
        now = self._clock()
        while self._retry_at is not None and now < self._retry_at:
            # Backing off: a poke is remembered in the focus, but wakes us only to look again
            # at the clock (a manual one in tests may have jumped past the retry).
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._poke.wait(), timeout=(self._retry_at - now).total_seconds()
                )
            now = self._clock()
        self._retry_at = None
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
            queued, self._queued_at = self._queued_at, None
            self._waited = None if queued is None else now - queued
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
            self._retry_at = retry
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
            self._on_round(Round(focus, now, None, error, self._waited))
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
        self._on_round(Round(focus, now, result, waited=self._waited))


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
