"""Kill the operator at every single port call of a full ladder: the story still ends right.

Each case replays the same incident (a RESET_GPU fault that outlives reset and reboot) and
kills the process just before its k-th write to the cluster or the record store, then starts a fresh
one on the same cluster. Whatever k is, the node is cordoned once, each rung runs once, each
executor is started once, and the incident ends with the node replaced.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, cast

import pytest

from remediation_operator.domain.policy import LADDER_ORDER, Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase
from remediation_operator.engine.ports import ClusterPort, Ports, RecordPort
from remediation_operator.sim.memory_cluster import ExecutorScript, MemoryCluster, MemoryRecorder
from tests.engine.conftest import T0, Clock, Driver, Harness
from tests.engine.test_ladder import fault, policy


class ProcessKilledError(BaseException):
    """The operator process died (BaseException: nothing in the engine may swallow it)."""


WRITES = frozenset(
    {
        "cordon",
        "release",
        "protect_from_consolidation",
        "evict",
        "run_executor",
        "replace",
        "create_remediation",
        "update_remediation",
        "write_policy_state",
        "emit",
    }
)
"""Calls that change something: a death just before each is a distinct crash point."""


class Mortal:
    """Wraps a port; the `limit`-th write across all wrapped ports kills the process."""

    def __init__(self, target: object, counter: list[int], limit: int | None) -> None:
        self._target = target
        self._counter = counter
        self._limit = limit

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._target, name)
        if name not in WRITES:
            return member

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._counter[0] += 1
            if self._counter[0] == self._limit:
                raise ProcessKilledError(f"killed at call {self._limit} ({name})")
            result: Awaitable[Any] = member(*args, **kwargs)
            return await result

        return call


def incident() -> tuple[Harness, Driver]:
    # Agents heart-beat (EKS: every 5 minutes): each disruptive step needs evidence seen after
    # the previous one.
    cluster = MemoryCluster(T0 - timedelta(days=1), heartbeat=timedelta(minutes=5))
    clock = Clock(cluster, T0 - timedelta(days=1))
    for i in range(3):
        cluster.add_node(f"gpu-{i}", labels={"pool": "a"})
    clock.to(T0)
    cluster.scripts[Action.GPUReset] = ExecutorScript(timedelta(minutes=2))
    cluster.scripts[Action.Reboot] = ExecutorScript(timedelta(minutes=8))
    cluster.replace_duration = timedelta(minutes=15)
    cluster.add_pod("gpu-0", "trainer", protected_until=T0 + timedelta(minutes=9))
    cluster.add_pod("gpu-0", "notebook")
    harness = Harness(cluster, clock)
    return harness, Driver(harness, policy())


async def run(kill_at: int | None) -> tuple[Harness, Driver, int]:
    harness, drive = incident()
    counter = [0]
    cluster = harness.cluster
    harness.ports = Ports(
        cluster=cast(ClusterPort, Mortal(cluster, counter, kill_at)),
        records=cast(RecordPort, Mortal(cluster, counter, kill_at)),
        recorder=cluster.ports(MemoryRecorder()).recorder,
    )
    fault(harness, "gpu-0")
    try:
        await drive.run_until(lambda: _replaced(drive))
    except ProcessKilledError:
        cluster.restart_operator()
        harness.ports = None  # a fresh process, which lives
        drive.wake = harness.clock.now
        await drive.run_until(lambda: _replaced(drive))
    return harness, drive, counter[0]


def _replaced(drive: Driver) -> bool:
    return drive.remediation("gpu-0").terminal


async def test_the_uninterrupted_story_makes_enough_calls_to_cover() -> None:
    _, drive, calls = await run(None)
    assert drive.remediation("gpu-0").reason is Reason.NodeReplaced
    assert 30 < calls <= KILL_POINTS, "the test below must cover every write of the story"


KILL_POINTS = 110
"""At least the number of writes in the uninterrupted story (63 when written)."""


@pytest.mark.parametrize("kill_at", range(1, KILL_POINTS + 1))
async def test_killed_at_any_call_the_incident_ends_the_same_way(kill_at: int) -> None:
    harness, drive, _ = await run(kill_at)
    cluster = harness.cluster

    final = drive.remediation("gpu-0")
    assert (final.phase, final.reason) == (Phase.Succeeded, Reason.NodeReplaced)
    rungs = [s.action for s in final.steps if s.outcome is not Outcome.TransientFailure]
    assert rungs == [*LADDER_ORDER], "no rung repeated or skipped"
    assert cluster.calls[("cordon", "gpu-0")] == 1
    started = [(e.action, e.attempt) for e in cluster.executions("gpu-0")]
    assert started == [(Action.GPUReset, 1), (Action.Reboot, 1)]
    assert len(cluster.remediations("gpu")) == 1, "one incident, one Remediation"
