"""Mass false positives: half of a 200-node fleet shows a GPU fault at once (a bad driver
roll-out, a monitoring bug). Zero drains and zero executor Jobs; the circuit breaker opens and
says so three ways (the policy's CircuitOpen condition, an Event on the policy, the
`gpuops_remediation_circuit_open` gauge). When the fleet recovers, except for ten nodes with
real faults, the breaker closes after its cooldown and remediation resumes without a
stampede: drains start no faster than the policy's rate limit."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from remediation_emulator.fleet.manifests import Shape
from remediation_operator.api import timestamps
from tests.integration.conftest import CONFIG, Cluster, eventually, policy
from tests.reliability import invariants
from tests.reliability.conftest import record_figures

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

NODES = 200
RATE_MAX, RATE_PER = 3, 3.0
REAL = 10


def guarded_policy() -> dict[str, object]:
    return policy(
        circuitBreaker={"maxUnhealthy": "20%", "minNodes": 10, "cooldown": "2s"},
        rate={"max": RATE_MAX, "per": f"{int(RATE_PER)}s"},
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
                "tolerate": "3s",
                "ladder": [
                    {"action": "Cordon", "escalateAfter": "0s"},
                    {"action": "Drain", "timeout": "60s"},
                ],
                "onExhausted": "Hold",
            }
        ],
    )


def circuit_gauge(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("gpuops_remediation_circuit_open{") and 'policy="gpu"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def most_in_a_window(starts: list[datetime], per: timedelta) -> int:
    """The most starts in any window (t - per, t], the rate limiter's own sliding window."""
    return max((sum(1 for u in starts if t - per < u <= t) for t in starts), default=0)


def drain_starts(cluster: Cluster) -> dict[str, datetime]:
    """When each node's Drain started, as its Remediation records it."""
    out = {}
    for remediation in cluster.remediations():
        for step in (remediation.get("status") or {}).get("steps") or []:
            if step.get("action") == "Drain":
                out[remediation["spec"]["nodeName"]] = timestamps.parse_time(step["startedAt"])
    return out


@pytest.mark.fleet(
    shape=Shape(nodes=NODES, nodes_per_training_job=4, pdb_every=0),
    # the kind agent: the cleared faults' conditions clear with them (the real ones stay, D74)
    config=CONFIG.with_(heartbeat_period=10.0, agent="kind"),
)
async def test_half_the_fleet_faulting_at_once_opens_the_breaker_and_drains_nothing(
    cluster: Cluster,
) -> None:
    nodes = cluster.node_names()
    assert len(nodes) == NODES
    started = time.monotonic()
    async with invariants.replaying(cluster) as replay:
        cluster.apply(guarded_policy())
        operator = await cluster.start_operator("operator-a")
        flipped = nodes[: NODES // 2]
        for node in flipped:
            cluster.fleet.inject(node, "xid-62")

        await eventually(
            lambda: (cluster.condition("gpu", "CircuitOpen") or {}).get("status") == "True",
            within=30,
            what="the CircuitOpen condition",
        )
        await eventually(
            lambda: "CircuitOpen" in cluster.event_reasons("gpu", "RemediationPolicy"),
            what="a CircuitOpen Event on the policy",
        )

        async def gauge_open() -> bool:
            return circuit_gauge(await operator.metrics()) == 1.0

        await eventually(gauge_open, what="gpuops_remediation_circuit_open = 1")
        opened_after = round(time.monotonic() - started, 2)
        # Longer than `tolerate`: a node the breaker let through would have been drained now.
        await eventually(lambda: time.monotonic() - started > opened_after + 4, interval=0.2)
        writes = cluster.writes_by("operator-a")
        evictions = [e for e in writes if e.subresource == "eviction"]
        assert evictions == [], "a drain ran while half the fleet looked faulty"
        assert not replay.jobs_created
        assert not replay.first_started("Drain")
        cordons_during_storm = len(replay.first_started("Cordon"))

        # The fleet recovers, except for a few real faults.
        for node in flipped[REAL:]:
            cluster.fleet.clear(node)
        real = flipped[:REAL]
        await eventually(
            lambda: (cluster.condition("gpu", "CircuitOpen") or {}).get("status") == "False",
            within=30,
            what="the breaker closes after its cooldown",
        )
        closed_at = time.monotonic()
        await eventually(
            lambda: all(
                any(
                    s.get("action") == "Drain"
                    for s in (cluster.remediation(n) or {}).get("status", {}).get("steps", [])
                )
                for n in real
            ),
            within=60,
            what="every real fault drained",
        )
    drains = drain_starts(cluster)
    peak = most_in_a_window(list(drains.values()), timedelta(seconds=RATE_PER))
    record_figures(
        {
            "suite": "mass-false-positives",
            "nodes": NODES,
            "flipped": len(flipped),
            "breaker_open_after_seconds": opened_after,
            "cordons_during_storm": cordons_during_storm,
            "drains_during_storm": 0,
            "drains_after_recovery": len(drains),
            "resume_seconds": round(time.monotonic() - closed_at, 2),
            "peak_drains_per_window": peak,
            "rate": f"{RATE_MAX}/{RATE_PER}s",
            "seconds": round(time.monotonic() - started, 2),
        }
    )
    assert set(drains) == set(real), "only the real faults are drained"
    assert peak <= RATE_MAX, f"drains started faster than {RATE_MAX} per {RATE_PER}s: {drains}"
