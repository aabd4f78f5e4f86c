"""Where availability goes: node-hours lost by stage and by fault class, breaker visibility,
and the oracle that shows how far a policy is from the best any policy could do.

Small fleets and short runs: each simulation here takes well under a second.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from remediation_operator.domain.policy import Action, Diagnostics, Policy, Validation
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.sim import losses, report, study
from remediation_operator.sim.faultmix import FaultMix, Symptom
from remediation_operator.sim.fleetspec import FleetSpec, JobSpec, StormSpec
from remediation_operator.sim.hosts import Host, HostFault
from remediation_operator.sim.losses import Stage
from remediation_operator.sim.oracle import Oracle
from remediation_operator.sim.simulator import Simulation
from remediation_operator.sim.spec import Range

SMALL = FleetSpec(nodes=128, fault_rate_scale=5.0, jobs=JobSpec(nodes_per_job=8))
T0 = datetime(2026, 1, 5, tzinfo=UTC)


def run(policy: Policy, mix: FaultMix, fleet: FleetSpec = SMALL, days: float = 10) -> report.Report:
    return asyncio.run(Simulation(policy, mix=mix, fleet=fleet, days=days, seed=1).run()).report


def oracle(mix: FaultMix, fleet: FleetSpec = SMALL, days: float = 10) -> report.Report:
    return asyncio.run(Oracle(mix=mix, fleet=fleet, days=days, seed=1).run()).report


def test_lost_node_hours_add_up_by_stage_and_by_class(mix: FaultMix, graduated: Policy) -> None:
    r = run(graduated, mix)
    node_hours = r.nodes * r.days * 24
    assert r.lost_node_hours == pytest.approx((1 - r.availability) * node_hours, abs=0.2)
    assert r.lost_node_hours > 10  # something was lost, worth attributing
    # Every lost node-hour is charged to exactly one stage and one fault class (rounding).
    assert sum(r.lost_by_stage.values()) == pytest.approx(r.lost_node_hours, abs=1.0)
    assert sum(r.lost_by_class.values()) == pytest.approx(r.lost_node_hours, abs=1.0)
    # Classes are the fault mix's causes; stages are the accounting's.
    assert set(r.lost_by_class) <= {c.name for c in mix.causes} | {losses.STORM, losses.NO_FAULT}
    assert set(r.lost_by_stage) <= {s.value for s in Stage}
    # The graduated ladder spends time in its repair steps, and silent faults are lost to
    # "undetected" until a human finds them.
    assert r.lost_by_stage.get(Stage.Reset.value, 0) > 0
    assert r.lost_by_stage.get(Stage.Replacement.value, 0) > 0


def test_a_policy_that_replaces_at_once_loses_nothing_to_reset_or_probation(
    mix: FaultMix, replace_first: Policy
) -> None:
    r = run(replace_first, mix)
    assert r.lost_by_stage.get(Stage.Reset.value, 0) == 0
    assert r.lost_by_stage.get(Stage.Reboot.value, 0) == 0
    assert r.lost_by_stage.get(Stage.Replacement.value, 0) > 0


def test_the_oracle_loses_less_than_any_policy_on_the_same_faults(
    mix: FaultMix, graduated: Policy, replace_first: Policy, wait_not_ready: Policy
) -> None:
    best = oracle(mix)
    assert best.oracle
    for policy in (graduated, replace_first, wait_not_ready):
        r = run(policy, mix)
        assert r.faults == best.faults  # the same fault history
        assert best.lost_node_hours < r.lost_node_hours, policy.name
    # Perfect knowledge: no window, no probation, no rule missing, nothing left to a human
    # but what nobody can see (silent faults cost the oracle what they cost any policy).
    for stage in (Stage.Tolerating, Stage.Probation, Stage.Unmatched, Stage.Human):
        assert best.lost_by_stage.get(stage.value, 0) == 0, stage
    silent = run(graduated, mix).lost_by_stage.get(Stage.Undetected.value, 0)
    assert silent > 0
    assert best.lost_by_stage.get(Stage.Undetected.value, 0) == pytest.approx(silent, rel=0.05)
    assert best.outcomes == {}


def test_the_oracle_uses_the_cheapest_repair_that_fixes_the_fault(mix: FaultMix) -> None:
    simulation = Oracle(mix=mix, fleet=SMALL, days=1, seed=1)
    cause = next(c for c in mix.causes if c.name == "faulty-gpu")
    host = Host(slot=0, name="gpu-00000", zone="zone-a", created_at=0.0)

    def fault(reset: float, reboot: float) -> HostFault:
        luck = ((Action.GPUReset, reset), (Action.Reboot, reboot), (Action.Replace, 0.99))
        return HostFault(id=1, cause=cause, symptom=None, started_at=0.0, luck=luck)

    p_reset = cause.fixed_by[Action.GPUReset]
    p_reboot = cause.fixed_by[Action.Reboot]
    host.fault = fault(p_reset / 2, 0.0)
    assert simulation.right_action(host) is Action.GPUReset
    host.fault = fault((1 + p_reset) / 2, p_reboot / 2)
    assert simulation.right_action(host) is Action.Reboot
    host.fault = fault((1 + p_reset) / 2, (1 + p_reboot) / 2)
    assert simulation.right_action(host) is Action.Replace
    # A transient fault that clears before the repair would finish is waited out.
    assert simulation.expected_seconds(Action.GPUReset) < simulation.expected_seconds(
        Action.Replace
    )


def storm_fleet(fraction: float = 0.6) -> FleetSpec:
    storm = StormSpec(
        mean_interval=timedelta(days=365),
        fraction=fraction,
        lasts=Range(timedelta(minutes=40), timedelta(minutes=60)),
        symptom=Symptom("AcceleratedHardwareReady", "False", "NvidiaXID62Error"),
        first_at=timedelta(hours=3),
    )
    return FleetSpec(nodes=128, fault_rate_scale=0.0, jobs=JobSpec(nodes_per_job=8), storms=storm)


def test_a_storm_shows_in_the_report_with_and_without_the_breaker(
    mix: FaultMix, graduated: Policy
) -> None:
    # Before: the breaker kept every Remediation from opening, so the storm run's report was
    # identical to a run without storm (only the storm count differed). Now the breaker's
    # opening and the node-hours a storm costs a policy without one are on the report.
    fleet = storm_fleet()
    quiet = run(graduated, mix, replace(fleet, storms=None), days=1)
    guarded = run(graduated, mix, fleet, days=1)
    unguarded = run(
        replace(graduated, name="unguarded", circuit_breaker=None, rate=None), mix, fleet, days=1
    )
    assert quiet.breaker_openings == 0
    assert guarded.breaker_openings >= 1
    assert guarded.breaker_open_hours > 0.5  # open at least for the 40-60 min storm
    assert guarded.lost_by_class.get(losses.STORM, 0) == 0  # the breaker saved every node
    assert unguarded.breaker_openings == 0
    assert unguarded.lost_by_class.get(losses.STORM, 0) > 1.0  # healthy nodes taken out
    table = report.format_table([quiet, guarded]).splitlines()
    assert any(line.startswith("breaker openings") and line.split()[-2:] == ["0", "1"]
               for line in table)  # fmt: skip


def test_a_real_fault_held_by_an_open_breaker_is_charged_to_the_breaker(
    mix: FaultMix, graduated: Policy
) -> None:
    # A storm opens the breaker of a one-zone fleet for hours while real faults keep coming:
    # their wait is the price of the breaker, and the report says so.
    storms = storm_fleet().storms
    assert storms is not None
    storm = replace(storms, lasts=Range(timedelta(hours=6), timedelta(hours=6)))
    fleet = FleetSpec(nodes=64, zones=("zone-a",), fault_rate_scale=60.0, jobs=None, storms=storm)
    r = run(graduated, mix, fleet, days=1)
    assert r.breaker_openings >= 1
    assert r.lost_by_stage.get(Stage.BlockedBreaker.value, 0) > 0


def test_the_table_shows_the_stages_a_user_tunes_and_the_gap_to_the_oracle(
    mix: FaultMix, graduated: Policy
) -> None:
    the_study = study.Study(
        policies=(graduated,), mix=mix, fleet=replace(SMALL, nodes=64), days=3, seed=2
    )
    results = study.run(the_study)
    assert [r.report.policy for r in results] == [graduated.name, "oracle"]
    table = report.format_table([r.report for r in results])
    for stage in losses.REPORTED:
        assert f"lost in: {stage.value}" in table
    assert "more than the oracle" in table
    assert "breaker openings" in table


def test_a_policy_named_like_the_oracle_is_refused(mix: FaultMix, graduated: Policy) -> None:
    with pytest.raises(Exception, match="oracle"):
        study.Study(
            policies=(replace(graduated, name="oracle"),), mix=mix, fleet=SMALL, days=1, seed=1
        )


def remediation(phase: Phase, reason: Reason, step: Action | None = None) -> RemediationState:
    return RemediationState(
        name="r", node="n", policy="p", fault="f", phase=phase, reason=reason, message="",
        started_at=T0, step=step, step_index=None if step is None else 0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"present": False}, Stage.Replacement),
        ({"replacing": True}, Stage.Replacement),
        ({"remediation": remediation(Phase.Pending, Reason.Tolerating)}, Stage.Tolerating),
        (
            {"remediation": remediation(Phase.Blocked, Reason.BudgetExhausted, Action.Cordon)},
            Stage.BlockedBudget,
        ),
        (
            {"remediation": remediation(Phase.Blocked, Reason.RateLimited, Action.Cordon)},
            Stage.BlockedBudget,
        ),
        (
            {"remediation": remediation(Phase.Blocked, Reason.CircuitOpen, Action.Cordon)},
            Stage.BlockedBreaker,
        ),
        (
            {"remediation": remediation(Phase.Running, Reason.StepStarted, Action.GPUReset)},
            Stage.Reset,
        ),
        (
            {"remediation": remediation(Phase.Waiting, Reason.StepSucceeded, Action.Reboot)},
            Stage.Reboot,
        ),
        (
            {"remediation": remediation(Phase.Running, Reason.StepStarted, Action.Drain)},
            Stage.Draining,
        ),
        (
            {"remediation": remediation(Phase.Recovering, Reason.FaultGone, Action.Reboot)},
            Stage.Probation,
        ),
        (
            {"remediation": remediation(Phase.Waiting, Reason.LadderExhausted, Action.Cordon)},
            Stage.Held,
        ),
        ({"planner_reason": Reason.CircuitOpen, "signalled": True}, Stage.BlockedBreaker),
        ({"planner_reason": Reason.NodeStarting, "signalled": True}, Stage.StartupGrace),
        ({"faulty": True, "signalled": False}, Stage.Undetected),
        ({"faulty": True, "signalled": True}, Stage.Unmatched),
        ({"unschedulable": True, "faulty": True}, Stage.Human),
    ],
)
def test_each_lost_instant_has_one_stage(facts: dict[str, object], expected: Stage) -> None:
    base: dict[str, object] = {
        "present": True,
        "replacing": False,
        "rebooting": False,
        "unschedulable": False,
        "faulty": True,
        "signalled": True,
        "remediation": None,
        "planner_reason": None,
    }
    assert losses.classify(**{**base, **facts}) is expected  # type: ignore[arg-type]


def test_validation_after_repairs_is_charged_to_its_own_stage_and_catches_unfixed_faults(
    mix: FaultMix, graduated: Policy
) -> None:
    """D37: with `validation`, every repair is followed by a validation Job whose time is lost
    to the validation stage; a failing one sends the host on up the ladder at once."""
    checked = replace(graduated, validation=Validation())
    # (The example policy validates since D71: the comparison needs it without.)
    without = run(replace(graduated, validation=None), mix)
    r = run(checked, mix)
    assert without.lost_by_stage.get(Stage.Validation.value, 0) == 0
    validated = r.lost_by_stage.get(Stage.Validation.value, 0)
    assert validated > 0
    # The mix's durations bound the charge: at most 5 minutes per validation run.
    low = mix.validation.duration.low.total_seconds() / 3600
    assert validated >= low  # at least one validation ran its minimum
    sure = replace(mix, validation=replace(mix.validation, catches=1.0))
    never = replace(mix, validation=replace(mix.validation, catches=0.0))
    caught, missed = run(checked, sure), run(checked, never)
    # A validation that catches an unfixed fault climbs at once; one that misses it leaves the
    # node waiting out the repair's `escalateAfter` (charged to validation, its last step).
    assert (
        caught.lost_by_stage[Stage.Validation.value] < missed.lost_by_stage[Stage.Validation.value]
    )
    assert caught.lost_node_hours < missed.lost_node_hours


def test_diagnostics_before_reboot_and_replace_are_charged_to_their_own_stage(
    mix: FaultMix, graduated: Policy
) -> None:
    """D39: the Diagnose Job before a destructive step runs for the mix's `diagnostics` time,
    charged to the diagnostics stage; without `diagnostics` nothing is."""
    without = run(graduated, mix)
    r = run(replace(graduated, diagnostics=Diagnostics("s3://bucket/gpu")), mix)
    assert without.lost_by_stage.get(Stage.Diagnostics.value, 0) == 0
    assert r.lost_by_stage.get(Stage.Diagnostics.value, 0) > 0
