"""Every background task of the process runs under one supervisor: none dies unnoticed.

A task that ends for any reason other than being stopped (an exception nobody expected, or
returning from a loop that should never return) is logged with its exception
(`task_failed`), counted in `gpuops_remediation_task_restarts_total{task}` and started
again after a backoff (1 s doubling to 60 s; a run that lasted `STABLE` starts the backoff
over). Found by issue 24: aiohttp's `LineTooLong` on one large Node ended the Node watch
and nothing noticed; detection stopped while `/healthz` said ok.

`/healthz` fails (so the kubelet restarts the process) when `Health.problems` names one:
- a task has been failing for longer than `DOWN_LIMIT` (it never stayed up for `STABLE`
  since its first failure), or
- a watch has delivered nothing (no event, no bookmark, no list, no end of a stream) for
  longer than its `quiet` limit: twice its server-side timeout, by which time the server
  has ended every healthy stream and the watcher has opened the next one.

`Health` is pure (it takes `now`); `Supervisor` runs the tasks on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

FIRST_DELAY = timedelta(seconds=1)
MAX_DELAY = timedelta(seconds=60)
STABLE = timedelta(seconds=30)
"""A task that ran this long since its last failure counts as up again (its backoff and its
down time start over)."""
DOWN_LIMIT = timedelta(seconds=60)
"""A task failing for longer than this fails `/healthz`."""


def family(name: str) -> str:
    """The task's kind, the metric's label: `policy/gpu` -> `policy` (no per-object series)."""
    return name.split("/", 1)[0]


@dataclass
class _Task:
    quiet: timedelta | None
    registered_at: datetime
    running_since: datetime | None = None
    down_since: datetime | None = None
    failures: int = 0
    last_beat: datetime | None = None


class Health:
    """What the supervised tasks did, and whether the process is still able to work."""

    def __init__(self, down_limit: timedelta = DOWN_LIMIT, stable: timedelta = STABLE) -> None:
        self._down_limit = down_limit
        self._stable = stable
        self._tasks: dict[str, _Task] = {}

    def register(self, name: str, now: datetime, quiet: timedelta | None = None) -> None:
        self._tasks[name] = _Task(quiet=quiet, registered_at=now)

    def forget(self, name: str) -> None:
        self._tasks.pop(name, None)

    def started(self, name: str, now: datetime) -> None:
        task = self._tasks.get(name)
        if task is not None:
            task.running_since = now

    def beat(self, name: str, now: datetime) -> None:
        """The task delivered something (a watch event, a bookmark, a list): it works."""
        task = self._tasks.get(name)
        if task is not None:
            task.last_beat = now
            task.down_since, task.failures = None, 0

    def failed(self, name: str, now: datetime) -> timedelta:
        """The task ended; returns how long to wait before starting it again."""
        task = self._tasks.get(name)
        if task is None:
            return FIRST_DELAY
        if task.running_since is not None and now - task.running_since >= self._stable:
            task.down_since, task.failures = None, 0
        task.running_since = None
        task.failures += 1
        if task.down_since is None:
            task.down_since = now
        return min(FIRST_DELAY * (1 << min(task.failures - 1, 16)), MAX_DELAY)

    def problems(self, now: datetime) -> list[str]:
        """One sentence per task that keeps the process from working; empty: healthy."""
        found = []
        for name, task in sorted(self._tasks.items()):
            recovered = task.running_since is not None and now - task.running_since >= self._stable
            if task.down_since is not None and not recovered:
                down = now - task.down_since
                if down > self._down_limit:
                    found.append(
                        f"task {name} has failed {task.failures} times in"
                        f" {down.total_seconds():.0f}s"
                    )
            if task.quiet is not None:
                since = task.last_beat or task.registered_at
                if now - since > task.quiet:
                    found.append(
                        f"watch {name} delivered nothing for {(now - since).total_seconds():.0f}s"
                        f" (limit {task.quiet.total_seconds():.0f}s)"
                    )
        return found


def _now() -> datetime:
    return datetime.now(UTC)


class Supervisor:
    """Starts background tasks, restarts the ones that end, and reports their health."""

    def __init__(
        self,
        on_restart: Callable[[str], None] = lambda _: None,
        log: Any = None,
        clock: Callable[[], datetime] = _now,
        health: Health | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.health = health or Health()
        self._sleep = sleep
        self._on_restart = on_restart
        self._log = log
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.stopped = False

    def spawn(
        self,
        name: str,
        factory: Callable[[], Coroutine[Any, Any, None]],
        *,
        quiet: timedelta | None = None,
        once: bool = False,
    ) -> asyncio.Task[None] | None:
        """Run `factory()` as task `name` (replacing one of that name); restart it whenever it
        ends, unless `once` (then only a failure restarts it; returning is success). None
        once stopped."""
        if self.stopped:
            return None
        self.cancel(name)
        self.health.register(name, self._clock(), quiet)
        task = asyncio.create_task(self._supervise(name, factory, once), name=name)
        self._tasks[name] = task
        return task

    def beat(self, name: str) -> None:
        self.health.beat(name, self._clock())

    def beater(self, name: str) -> Callable[[], None]:
        return lambda: self.health.beat(name, self._clock())

    def cancel(self, name: str) -> asyncio.Task[None] | None:
        """Stop task `name` (if any) and forget it; returns it, to await if wanted."""
        task = self._tasks.pop(name, None)
        self.health.forget(name)
        if task is not None:
            task.cancel()  # (a task cancelling itself ends at its next await)
        return task

    def running(self, name: str) -> bool:
        return name in self._tasks

    def problems(self) -> list[str]:
        return self.health.problems(self._clock())

    async def stop(self, keep: frozenset[str] = frozenset()) -> None:
        """Stop every task but those named in `keep` (stopped by a later call); nothing new
        starts after this."""
        self.stopped = True
        tasks = [t for name, t in self._tasks.items() if name not in keep]
        self._tasks = {name: t for name, t in self._tasks.items() if name in keep}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _supervise(
        self, name: str, factory: Callable[[], Coroutine[Any, Any, None]], once: bool
    ) -> None:
        while True:
            self.health.started(name, self._clock())
            try:
                await factory()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any end is reported, then restarted
                failure: Exception | None = error
            else:
                if once:
                    self._tasks.pop(name, None)
                    self.health.forget(name)
                    return
                failure = None
            delay = self.health.failed(name, self._clock())
            self._on_restart(family(name))
            if self._log is not None:
                self._log.error(
                    "task_failed",
                    task=name,
                    error="returned" if failure is None else f"{type(failure).__name__}: {failure}",
                    restart_in=delay.total_seconds(),
                    exc_info=failure,
                )
            await self._sleep(delay.total_seconds())
