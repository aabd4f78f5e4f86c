"""Two replicas, the leader killed again and again: two operator processes share one emulator;
every few seconds (seeded) the Lease holder is SIGKILLed and a fresh replica started, so two
are always running. Exactly one acts at any time (the acting writes in the request log form
one unbroken block per replica, never interleaved), a new holder takes the Lease within the
lease duration plus one retry period, and the work (the two-node ladder) finishes with every
exactly-once invariant of the crash suite."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from remediation_emulator.requestlog import Entry
from tests.integration.conftest import NAMESPACE, Cluster, Operator, eventually
from tests.reliability import invariants
from tests.reliability.conftest import record_figures
from tests.reliability.test_crash import fast_ladder

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

LEASE_SECONDS = 3.0
RETRY_SECONDS = 0.5
"""As `Cluster.start_operator` passes them (--lease-duration 3s, --retry-period 0.5s)."""
KILLS = 3


def holder(cluster: Cluster) -> str | None:
    lease = cluster.api.store.find("leases", "remediation-operator", NAMESPACE) or {}
    value = (lease.get("spec") or {}).get("holderIdentity")
    return str(value) if value else None


def acting(cluster: Cluster, users: set[str]) -> list[Entry]:
    """Writes that act on the fleet or record decisions (everything but the Lease itself)."""
    return [
        e
        for e in cluster.api.request_log
        if e.is_write and e.user in users and e.resource != "leases"
    ]


def blocks(entries: list[Entry]) -> list[str]:
    """The writers in order, consecutive writes by one writer folded into one block."""
    out: list[str] = []
    for entry in entries:
        if not out or out[-1] != entry.user:
            out.append(entry.user)
    return out


async def test_killing_the_leader_repeatedly_keeps_one_actor_and_the_work_going(
    cluster: Cluster,
) -> None:
    rng = random.Random(7)
    faulty = cluster.node_names()[:2]
    running: dict[str, Operator] = {}
    takeovers: list[float] = []
    started = time.monotonic()
    async with invariants.replaying(cluster) as replay:
        cluster.apply(fast_ladder())
        for identity in ("replica-0", "replica-1"):
            running[identity] = await cluster.start_operator(identity)
        await eventually(lambda: holder(cluster) in running, what="a first leader")
        for node in faulty:
            cluster.fleet.inject(node, "xid-62")
        for kill in range(KILLS):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            leader = holder(cluster)
            assert leader in running, f"the Lease is held by {leader}, not a live replica"
            await running.pop(leader).kill()
            killed_at = time.monotonic()
            await eventually(
                lambda old=leader: holder(cluster) not in (None, old),
                within=LEASE_SECONDS + RETRY_SECONDS + 3,
                interval=0.05,
                what="a standby takes the Lease",
            )
            takeovers.append(round(time.monotonic() - killed_at, 2))
            fresh = f"replica-{kill + 2}"
            running[fresh] = await cluster.start_operator(fresh)
        await eventually(
            lambda: all(cluster.phase(n) == "Succeeded" for n in faulty),
            within=90,
            what="both incidents closed across the failovers",
        )
        await eventually(lambda: len(cluster.node_names()) == 3, within=30, what="replacements")
        await eventually(
            lambda: not invariants.leftovers(cluster), within=10, what="nothing of ours left"
        )
    users = {o.identity for o in cluster.operators}
    writers = blocks(acting(cluster, users))
    problems = invariants.check_ladder_run(cluster, users, faulty, replay, budget=1)
    record_figures(
        {
            "suite": "two-replicas",
            "kills": KILLS,
            "takeover_seconds": takeovers,
            "writer_blocks": writers,
            "seconds": round(time.monotonic() - started, 2),
            "problems": problems,
        }
    )
    assert len(writers) == len(set(writers)), f"interleaved writers: {writers}"
    assert len(writers) >= 2, f"the work did not survive a failover: {writers}"
    # Lease expiry (3 s) plus one retry period, measured from the kill with some slack for
    # process scheduling on a 2-core machine.
    assert max(takeovers) <= LEASE_SECONDS + RETRY_SECONDS + 1.5, takeovers
    assert problems == [], problems
