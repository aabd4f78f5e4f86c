"""Crash at every step: run the whole ladder on two faulty nodes under a one-node budget,
SIGKILL the operator at a seeded random moment (after its k-th write to the API, k drawn over
the whole run), restart it, and check the run from the request log and the final objects: no
executor Job or NodeClaim deletion repeated, no step skipped or repeated, history complete,
the budget never exceeded at any committed moment, nothing of ours left on any node.

`RELIABILITY_RUNS` (default 3) sets the number of seeded runs; `make reliability` uses 50."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.integration.conftest import Cluster, eventually, policy
from tests.reliability import invariants
from tests.reliability.conftest import RUNS, record_figures

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

WRITES_PER_RUN = 100
"""About how many writes the operator makes in a clean run (measured); k is drawn below it."""


def fast_ladder() -> dict[str, object]:
    return policy(
        budgets=[{"nodes": "1"}],
        faults=[
            {
                "name": "gpu-xid",
                "match": [
                    {
                        "type": "AcceleratedHardwareReady",
                        "status": "False",
                        "reason": "NvidiaXID62Error",
                    }
                ],
                "tolerate": "0s",
                "ladder": [
                    {"action": "Cordon", "escalateAfter": "0s"},
                    {"action": "Drain", "timeout": "30s", "escalateAfter": "0s"},
                    {"action": "GPUReset", "timeout": "20s", "escalateAfter": "0s"},
                    {"action": "Reboot", "timeout": "20s", "escalateAfter": "0s"},
                    {"action": "Replace", "timeout": "30s"},
                ],
            }
        ],
    )


def _own_writes(cluster: Cluster) -> int:
    return len(cluster.writes_by("operator-a"))


@pytest.mark.parametrize("seed", range(RUNS))
async def test_sigkill_at_a_random_moment_then_restart(cluster: Cluster, seed: int) -> None:
    rng = random.Random(seed)
    kill_after = rng.randint(1, WRITES_PER_RUN)
    jitter = rng.uniform(0.0, 0.05)
    faulty = cluster.node_names()[:2]
    started = time.monotonic()
    async with invariants.replaying(cluster) as replay:
        cluster.apply(fast_ladder())
        operator = await cluster.start_operator("operator-a")
        for node in faulty:
            cluster.fleet.inject(node, "xid-62")
        killed_at: int | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            cluster.phase(n) == "Succeeded" for n in faulty
        ):
            if _own_writes(cluster) >= kill_after:
                await asyncio.sleep(jitter)
                killed_at = _own_writes(cluster)
                await operator.kill()
                await cluster.start_operator("operator-a")
                break
            await asyncio.sleep(0.005)
        await eventually(
            lambda: all(cluster.phase(n) == "Succeeded" for n in faulty),
            within=90,
            what="both incidents closed after the restart",
        )
        await eventually(lambda: len(cluster.node_names()) == 3, within=30, what="replacements")
        await eventually(
            lambda: not invariants.leftovers(cluster), within=10, what="nothing of ours left"
        )
    problems = invariants.check_ladder_run(cluster, {"operator-a"}, faulty, replay, budget=1)
    record_figures(
        {
            "suite": "crash",
            "seed": seed,
            "kill_after_writes": kill_after,
            "killed_at_write": killed_at,
            "writes": _own_writes(cluster),
            "seconds": round(time.monotonic() - started, 2),
            "peak_disrupted": replay.peak_disrupted,
            "problems": problems,
        }
    )
    assert problems == [], f"seed {seed}, killed after write {killed_at}: {problems}"
