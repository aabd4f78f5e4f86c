"""API faults at a 10% rate: 500s, 409 conflicts on writes, 429 throttling, slow responses,
dropped watch streams and 410 Gone on watch resume, all at once and seeded. The two-node
ladder under a one-node budget must end in the same final state as without faults: both
nodes replaced once, every step once, no Job or NodeClaim deletion repeated, the budget never
exceeded, nothing of ours left behind.

The rules hit every client (the fleet's kubelet, Job runner and Karpenter too), as a flaky
apiserver would."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.conftest import Cluster, eventually
from tests.reliability import invariants
from tests.reliability.conftest import RUNS, record_figures
from tests.reliability.test_crash import fast_ladder

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

RATE = 0.1


def flaky(cluster: Cluster, seed: int) -> None:
    faults = cluster.api.faults
    faults._random.seed(seed)  # replayable: the emulator's own seeded draw
    faults.error(500, rate=RATE, times=None)
    for verb in ("create", "update", "patch"):
        faults.error(409, rate=RATE, times=None, verb=verb)
    faults.error(429, rate=RATE, times=None)
    faults.delay(0.3, rate=RATE)
    # A watch is one long request, so 10% of watch requests would drop almost none: half the
    # streams end after a few events instead, and every resume may meet 410 (see compacting).
    faults.drop_watch(rate=0.5, times=None, after_events=3)
    # 410 Gone is injected the way kube-apiserver says it, by compaction (see `compacting`),
    # not as an HTTP 410 answer to the watch request: kopf treats that (and any non-410
    # watch ERROR) as fatal and exits the process (kopf/_cogs/clients/watching.py).


async def compacting(cluster: Cluster, every: float) -> None:
    """etcd compaction: resuming a watch from an older resourceVersion now gets 410 Gone, as
    the real server says it (HTTP 200 and an ERROR event), so clients must list again."""
    while True:
        await asyncio.sleep(every)
        cluster.api.store.raw.compact()


@pytest.mark.parametrize("seed", range(1, 2 + RUNS // 10))
async def test_every_fault_at_ten_percent_converges_to_the_fault_free_end(
    cluster: Cluster, seed: int
) -> None:
    faulty = cluster.node_names()[:2]
    started = time.monotonic()
    compactor = asyncio.create_task(compacting(cluster, every=2.0))
    async with invariants.replaying(cluster) as replay:
        flaky(cluster, seed)
        cluster.apply(fast_ladder())
        await cluster.start_operator("operator-a")
        for node in faulty:
            cluster.fleet.inject(node, "xid-62")
        await eventually(
            lambda: all(cluster.phase(n) == "Succeeded" for n in faulty),
            within=120,
            what="both incidents closed under API faults",
        )
        await eventually(lambda: len(cluster.node_names()) == 3, within=60, what="replacements")
        await eventually(
            lambda: not invariants.leftovers(cluster), within=20, what="nothing of ours left"
        )
    compactor.cancel()
    fired = {
        f"{r.verb or '*'}:{r.code or ('delay' if r.delay else 'drop')}": r.fired
        for r in cluster.api.faults.rules
    }
    cluster.api.faults.clear()
    problems = invariants.check_ladder_run(cluster, {"operator-a"}, faulty, replay, budget=1)
    record_figures(
        {
            "suite": "api-faults",
            "seed": seed,
            "seconds": round(time.monotonic() - started, 2),
            "requests": len(cluster.api.request_log),
            "faults_fired": fired,
            "problems": problems,
        }
    )
    assert sum(fired.values()) > 20, f"too few faults fired to mean anything: {fired}"
    assert problems == [], f"seed {seed}: {problems}"
