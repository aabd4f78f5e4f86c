"""The planner's FleetTally changes how fast the simulator runs, never what it decides.

The engine hands the planner a tally kept over the in-memory cluster's live node index, so a
plan re-matches only the nodes that changed. Here one heavy simulation (faults at 40x the
Llama 3 rate, storms that open the breaker, startup graces of replacement nodes) runs twice:
with the tally, and with the engine told to count every node from scratch at every plan. Every
reconcile's decisions and the final report must be identical.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from remediation_operator.domain.policy import Policy
from remediation_operator.engine import reconciler
from remediation_operator.engine.reconciler import Reconciled
from remediation_operator.sim.faultmix import FaultMix
from remediation_operator.sim.fleetspec import FleetSpec, JobSpec, StormSpec
from remediation_operator.sim.simulator import Result, Simulation

FLEET = FleetSpec(
    nodes=96,
    fault_rate_scale=40.0,
    jobs=JobSpec(nodes_per_job=4),
    storms=StormSpec(mean_interval=timedelta(days=3), fraction=0.4),
)

_Decision = tuple[object, ...]


def _run(policy: Policy, mix: FaultMix) -> tuple[Result, list[_Decision]]:
    decisions: list[_Decision] = []

    def watch(sim: Simulation, result: Reconciled) -> None:
        decisions.append(
            (
                sim.now,
                result.next_wake,
                result.written,
                tuple(a.effect for a in result.applied),
                tuple(sorted(result.reasons.items())),
                result.summary,
            )
        )

    simulation = Simulation(policy, mix=mix, fleet=FLEET, days=10, seed=2, observer=watch)
    return asyncio.run(simulation.run()), decisions


def test_a_simulation_decides_the_same_with_and_without_the_tally(
    mix: FaultMix, graduated: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    tallied, tallied_decisions = _run(graduated, mix)
    monkeypatch.setattr(reconciler, "_tally", lambda nodes, policy, version: None)
    scratch, scratch_decisions = _run(graduated, mix)

    assert len(tallied_decisions) > 300
    assert tallied_decisions == scratch_decisions
    assert tallied == scratch
    assert tallied.report.storms > 0
