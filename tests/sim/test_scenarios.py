"""Whole simulations: determinism, the operator's promises at every decision, and outcomes.

Each scenario runs the real engine and planner over a small simulated fleet for weeks of
simulated time; the invariant checker is called after every reconcile and fails the run at the
first broken promise (budget, breaker, ladder order).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    OnExhausted,
    Policy,
    Rate,
    Step,
)
from remediation_operator.engine.reconciler import Reconciled
from remediation_operator.sim import invariants
from remediation_operator.sim.faultmix import FaultMix, Symptom
from remediation_operator.sim.fleetspec import FleetSpec, JobSpec, StormSpec
from remediation_operator.sim.simulator import Result, Simulation

SMALL = FleetSpec(nodes=128, jobs=JobSpec(nodes_per_job=8))


def simulate(
    policy: Policy,
    mix: FaultMix,
    fleet: FleetSpec = SMALL,
    days: float = 30,
    seed: int = 1,
    checker: invariants.Checker | None = None,
) -> Result:
    simulation = Simulation(policy, mix=mix, fleet=fleet, days=days, seed=seed, observer=checker)
    return asyncio.run(simulation.run())


def test_the_same_seed_gives_the_same_report_and_series(mix: FaultMix, graduated: Policy) -> None:
    first = simulate(graduated, mix, seed=3)
    second = simulate(graduated, mix, seed=3)
    assert first == second
    assert first.report.remediations > 0  # something happened worth reproducing


def test_another_seed_gives_another_history(mix: FaultMix, graduated: Policy) -> None:
    assert simulate(graduated, mix, seed=3).report != simulate(graduated, mix, seed=4).report


def test_every_policy_sees_the_same_faults(
    mix: FaultMix, graduated: Policy, replace_first: Policy
) -> None:
    a = simulate(graduated, mix, seed=5).report
    b = simulate(replace_first, mix, seed=5).report
    assert a.faults == b.faults


def test_promises_hold_at_every_decision_under_a_heavy_fault_load(
    mix: FaultMix, graduated: Policy
) -> None:
    # 40x Llama 3's fault rate on 96 nodes, plus weekly storms: budgets, the rate limit, the
    # breaker and the history rule all get exercised.
    fleet = FleetSpec(
        nodes=96,
        fault_rate_scale=40.0,
        jobs=JobSpec(nodes_per_job=4),
        storms=StormSpec(mean_interval=timedelta(days=5), fraction=0.4),
    )
    checker = invariants.Checker()
    # The default policy's rate (10 steps an hour, D80) leaves this small fleet unthrottled: a
    # tighter one makes sure the rate gate is exercised too.
    policy = replace(graduated, rate=Rate(max=3, per=timedelta(hours=1)))
    result = simulate(policy, mix, fleet, days=20, checker=checker)
    report = result.report
    assert checker.checks > 500
    assert report.actions[Action.Replace.value] > 0
    assert report.blocked_hours  # something was held back by a budget, rate or breaker
    assert report.storms > 0


def test_promises_hold_for_the_baselines(
    mix: FaultMix, replace_first: Policy, wait_not_ready: Policy
) -> None:
    fleet = replace(SMALL, fault_rate_scale=10.0)
    for policy in (replace_first, wait_not_ready):
        checker = invariants.Checker()
        simulate(policy, mix, fleet, days=10, checker=checker)
        assert checker.checks > 50


def test_the_breaker_prevents_mass_drains_in_a_false_positive_storm(
    mix: FaultMix, graduated: Policy
) -> None:
    # A broken checker reports a reset-class XID on 60% of one zone for 40-60 minutes; no real
    # fault happens at all. Without the breaker (and without the rate limit, the other guard,
    # which alone would cap it at 5 per hour) the ladder drains healthy nodes up to the 10%
    # budget and interrupts their jobs; with the breaker nothing is drained.
    storm = StormSpec(
        mean_interval=timedelta(days=365),
        fraction=0.6,
        lasts=replace(StormSpec().lasts, low=timedelta(minutes=40), high=timedelta(minutes=60)),
        symptom=Symptom("AcceleratedHardwareReady", "False", "NvidiaXID62Error"),
        first_at=timedelta(hours=3),
    )
    fleet = FleetSpec(nodes=256, fault_rate_scale=0.0, jobs=JobSpec(nodes_per_job=8), storms=storm)
    assert graduated.circuit_breaker is not None
    unguarded = replace(graduated, name="unguarded", circuit_breaker=None, rate=None)
    opened: set[str] = set()
    checker = invariants.Checker()

    def watch(sim: Simulation, result: Reconciled) -> None:
        checker(sim, result)
        if result.summary is not None:
            opened.update(result.summary.circuit_open)

    run = Simulation(graduated, mix=mix, fleet=fleet, days=1, seed=1, observer=watch)
    with_breaker = asyncio.run(run.run()).report
    without = simulate(unguarded, mix, fleet, days=1).report
    assert len(opened) == 1  # the struck zone's breaker opened
    assert with_breaker.storms == without.storms == 1
    assert with_breaker.remediations == 0
    assert with_breaker.actions[Action.Drain.value] == 0
    assert with_breaker.interruptions_by_remediation == 0
    assert with_breaker.blocked_hours.get("CircuitOpen", 0) == 0  # nothing was even opened
    assert without.actions[Action.Drain.value] >= 20
    assert without.interruptions_by_remediation > 0
    assert with_breaker.availability > without.availability


HOST_FAULTS = ("host-unreachable", "node-storage")


def test_graduated_repair_replaces_fewer_nodes_at_equal_or_better_availability(
    mix: FaultMix, graduated: Policy, replace_first: Policy
) -> None:
    fleet = FleetSpec(nodes=256, jobs=JobSpec(nodes_per_job=8))
    full = simulate(graduated, mix, fleet, days=30, seed=1).report
    # The claim is about the GPU ladders: without the rules for unreachable hosts and failed
    # drives (which replace what the baseline leaves to a human), the same faults.
    gpu_only = replace(
        graduated,
        faults=tuple(f for f in graduated.faults if f.name not in HOST_FAULTS),
    )
    ours = simulate(gpu_only, mix, fleet, days=30, seed=1).report
    naive = simulate(replace_first, mix, fleet, days=30, seed=1).report
    assert naive.replacements >= 10
    assert ours.replacements * 2 <= naive.replacements
    assert full.availability >= ours.availability
    # "Equal": within 0.005 percentage points of node-time (9 node-hours of 184,320 here);
    # over eight seeds the difference stays within +-0.003 pp in either direction.
    assert ours.availability >= naive.availability - 0.00005
    assert ours.job_success_rate >= naive.job_success_rate - 0.01


def test_ignoring_gpu_health_costs_availability_and_jobs(
    mix: FaultMix, graduated: Policy, wait_not_ready: Policy
) -> None:
    ours = simulate(graduated, mix, seed=2).report
    blind = simulate(wait_not_ready, mix, seed=2).report
    assert blind.schedulable_faulty > ours.schedulable_faulty * 3
    assert blind.job_interruptions > ours.job_interruptions
    assert blind.availability < ours.availability


def test_a_node_left_cordoned_for_a_human_comes_back_after_repair(mix: FaultMix) -> None:
    # A ladder that only cordons and then fails leaves the node to a human; the fault mix's
    # manual repair fixes it and the human uncordons it: no healthy node stays out for good.
    cordon_only = Policy(
        name="cordon-then-human",
        faults=(
            Fault(
                name="gpu",
                match=(ConditionMatch("AcceleratedHardwareReady", status="False"),),
                ladder=(Step(Action.Cordon),),
                on_exhausted=OnExhausted.Fail,
            ),
        ),
    )
    fleet = FleetSpec(nodes=32, fault_rate_scale=30.0, jobs=JobSpec(nodes_per_job=4))
    simulation = Simulation(cordon_only, mix=mix, fleet=fleet, days=20, seed=1)
    report = asyncio.run(simulation.run()).report
    assert report.outcomes.get("Failed", 0) > 0
    assert report.manual_repairs > 0
    assert all(h.fault is not None for h in simulation.hosts if h.unschedulable)


def test_a_fleet_without_jobs_still_reports_nodes(mix: FaultMix, graduated: Policy) -> None:
    report = simulate(graduated, mix, replace(SMALL, jobs=None), days=10).report
    assert report.job_attempts == 0
    assert report.job_success_rate == 1.0
    assert 0.9 < report.availability <= 1.0
