"""A source going silent is noticed at the instant it goes stale, by the plan's own wake.

No event says a condition went silent. The operator's runtime has a timer for it, but the
engine and the simulator wake only at `next_wake`: without the staleness instant in it, a
silent agent was never noticed there (issue 12)."""

from __future__ import annotations

from datetime import timedelta

from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    OnExhausted,
    Policy,
    Step,
)
from tests.engine.conftest import Driver, Harness

HEARTBEAT = "GPUHealthy"
SILENT = Fault(
    name="agent-silent",
    match=(ConditionMatch(HEARTBEAT, stale_after=timedelta(minutes=15)),),
    ladder=(Step(Action.Cordon),),
    on_exhausted=OnExhausted.Hold,
)


async def test_a_silent_agent_is_cordoned_at_the_wake_its_staleness_sets(
    harness: Harness,
) -> None:
    cluster, clock = harness.cluster, harness.clock
    for i in range(4):
        cluster.set_condition(f"gpu-{i}", HEARTBEAT, "True", "Healthy")
    drive = Driver(harness, Policy(name="gpu", faults=(SILENT,), startup_grace=timedelta(0)))
    await drive.settle()
    cluster.silent.add("gpu-2")  # its agent stops; the others keep beating every 5 minutes
    silent_since = cluster.views()["gpu-2"].condition(HEARTBEAT)
    assert silent_since is not None
    assert silent_since.observed_at is not None
    stale_at = silent_since.observed_at + timedelta(minutes=15)

    await drive.run_until(lambda: cluster.views()["gpu-2"].unschedulable)

    state = drive.remediation("gpu-2")
    assert (state.fault, state.steps[0].action) == ("agent-silent", Action.Cordon)
    assert stale_at < state.started_at <= stale_at + timedelta(seconds=1), "noticed at once"
    assert clock.now <= stale_at + timedelta(minutes=1)
    assert [n for n in ("gpu-0", "gpu-1", "gpu-3") if cluster.views()[n].unschedulable] == []


async def test_a_plan_never_wakes_at_or_before_now_for_staleness(harness: Harness) -> None:
    """A wake at an instant that changes nothing would plan the same answer at once, forever."""
    cluster = harness.cluster
    for i in range(4):
        cluster.set_condition(f"gpu-{i}", HEARTBEAT, "True", "Healthy")
    cluster.silent.update({"gpu-0", "gpu-1", "gpu-2", "gpu-3"})
    policy = Policy(name="gpu", faults=(SILENT,), startup_grace=timedelta(0), paused=True)
    for _ in range(4):
        result = await harness.reconcile(policy)
        assert result.next_wake is None or result.next_wake > harness.clock.now
        harness.clock.to(result.next_wake or harness.clock.now + timedelta(hours=1))
    assert all(
        (c := v.condition(HEARTBEAT)) is not None
        and c.observed_at is not None
        and harness.clock.now - c.observed_at > timedelta(minutes=15)
        for v in cluster.views().values()
    ), "every agent went stale and the plan stopped waking for them"
    result = await harness.reconcile(policy)
    assert result.next_wake is None
