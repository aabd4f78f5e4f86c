"""One supervisor for every background task (issue 24, item 2): a task that ends is logged,
counted and restarted with backoff; `/healthz` problems name a task that stays down and a
watch that delivered nothing for longer than its quiet limit. The pure rules run on a manual
clock; the supervisor on a real event loop with an instant sleep."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from remediation_operator.handlers.supervision import (
    DOWN_LIMIT,
    STABLE,
    Health,
    Supervisor,
    family,
)
from remediation_operator.observability.metrics import Metrics

T0 = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def test_backoff_doubles_to_a_minute_and_starts_over_after_a_stable_run() -> None:
    health = Health()
    health.register("node-watch", T0)
    now = T0
    delays = []
    for _ in range(9):
        health.started("node-watch", now)
        delays.append(health.failed("node-watch", now).total_seconds())
        now += S
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    health.started("node-watch", now)
    now += STABLE
    assert health.failed("node-watch", now) == S


def test_a_task_failing_for_longer_than_the_limit_is_a_problem_until_it_stays_up() -> None:
    health = Health()
    health.register("policy/gpu", T0)
    health.started("policy/gpu", T0)
    health.failed("policy/gpu", T0)  # down since T0; every later run ends within seconds
    now = T0
    while now < T0 + DOWN_LIMIT:
        now += 4 * S
        health.started("policy/gpu", now)
        assert health.problems(now) == [], now - T0
        now += S
        health.failed("policy/gpu", now)
    assert health.problems(T0 + DOWN_LIMIT) == []
    late = T0 + DOWN_LIMIT + S
    assert len(health.problems(late)) == 1
    assert health.problems(late)[0].startswith("task policy/gpu has failed 13 times in 61s")
    health.started("policy/gpu", late)
    assert len(health.problems(late + STABLE - S)) == 1  # not up long enough yet
    assert health.problems(late + STABLE) == []


def test_a_quiet_watch_is_a_problem_and_a_beat_clears_it() -> None:
    health = Health()
    health.register("node-watch", T0, quiet=timedelta(seconds=600))
    health.started("node-watch", T0)
    assert health.problems(T0 + 600 * S) == []
    assert health.problems(T0 + 601 * S) == [
        "watch node-watch delivered nothing for 601s (limit 600s)"
    ]
    health.beat("node-watch", T0 + 601 * S)
    assert health.problems(T0 + 1200 * S) == []
    health.forget("node-watch")
    assert health.problems(T0 + 9999 * S) == []


def test_family_is_the_metric_label() -> None:
    assert family("policy/gpu-a100") == "policy"
    assert family("drain/node-7") == "drain"
    assert family("node-watch") == "node-watch"


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, object]]] = []

    def error(self, event: str, **fields: object) -> None:
        self.lines.append((event, fields))


async def test_a_task_that_raises_or_returns_is_logged_counted_and_restarted() -> None:
    metrics, log, slept = Metrics(), Log(), []
    runs = 0
    done = asyncio.Event()

    async def instant(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise ValueError("line too long")
        if runs == 2:
            return  # a watch loop that returned: also an end to report
        done.set()
        await asyncio.Event().wait()

    supervisor = Supervisor(metrics.task_restarted, log, sleep=instant)
    supervisor.spawn("node-watch", flaky)
    await asyncio.wait_for(done.wait(), 5)
    assert runs == 3
    assert slept == [1.0, 2.0]
    assert [(e, f["task"], f["error"]) for e, f in log.lines] == [
        ("task_failed", "node-watch", "ValueError: line too long"),
        ("task_failed", "node-watch", "returned"),
    ]
    assert 'gpuops_remediation_task_restarts_total{task="node-watch"} 2.0' in (
        metrics.render().decode()
    )
    await supervisor.stop()
    assert not supervisor.running("node-watch")


async def test_a_one_shot_task_that_succeeds_is_not_restarted_and_cancel_stops_a_task() -> None:
    supervisor = Supervisor()
    ran = []

    async def once() -> None:
        ran.append(1)

    supervisor.spawn("initial-sync", once, once=True)

    async def forever() -> None:
        await asyncio.Event().wait()

    supervisor.spawn("policy/gpu", forever)
    for _ in range(5):
        await asyncio.sleep(0)
    assert ran == [1]
    assert not supervisor.running("initial-sync")
    task = supervisor.cancel("policy/gpu")
    assert task is not None
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert supervisor.problems() == []
