"""Gang-scheduled jobs: all K nodes or none, checkpoint restart, and what an interruption costs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediation_operator.sim.events import Agenda, Kind
from remediation_operator.sim.fleetspec import JobSpec
from remediation_operator.sim.jobs import Jobs

HOUR = 3600.0


def _jobs(nodes: int, spec: JobSpec, down: set[int] | None = None) -> tuple[Jobs, Agenda]:
    agenda = Agenda()
    dead = down if down is not None else set()
    jobs = Jobs(spec, nodes, 8, agenda, lambda slot: slot not in dead)
    for slot in range(nodes):
        jobs.set_usable(slot, slot not in dead)
    return jobs, agenda


SPEC = JobSpec(
    nodes_per_job=4,
    utilization=1.0,
    length=timedelta(hours=10),
    checkpoint_every=timedelta(hours=1),
    restart_overhead=timedelta(minutes=10),
)


def test_a_job_starts_only_with_all_its_nodes() -> None:
    jobs, _ = _jobs(8, SPEC, down={0, 1, 2})
    started = jobs.dispatch(0.0)
    assert len(jobs.jobs) == 2
    assert len(started) == 1  # 5 usable nodes: one gang of 4, not two
    assert len(set(started[0].nodes)) == 4
    assert not set(started[0].nodes) & {0, 1, 2}


def test_an_interruption_loses_the_work_since_the_last_checkpoint() -> None:
    jobs, agenda = _jobs(4, SPEC)
    (job,) = jobs.dispatch(0.0)
    stopped = jobs.interrupt_on(job.nodes[2], 2.5 * HOUR)
    assert stopped is job
    stats = jobs.stats(2.5 * HOUR)
    assert stats.interrupted == 1
    # 0.5 h of 4 nodes x 8 GPUs redone.
    assert stats.lost_gpu_hours == 0.5 * 4 * 8
    assert job.checkpointed == 2 * HOUR
    # Restarts after the overhead and then needs only the remaining 8 hours.
    pending = [agenda.pop() for _ in range(len(agenda))]
    restart = next(e for e in pending if e.kind is Kind.JobRestart)
    assert restart.at == 2.5 * HOUR + 600
    jobs.restart(job.id, restart.token, restart.at)
    (again,) = jobs.dispatch(restart.at)
    done = agenda.pop()
    assert (done.kind, done.at) == (Kind.JobDone, restart.at + 8 * HOUR)
    jobs.done(again.id, done.token, done.at)
    final = jobs.stats(done.at)
    assert (final.completed, final.interrupted) == (1, 1)
    assert final.success_rate == 0.5
    # Waiting: the 10-minute restart overhead after the interruption.
    assert final.waiting_job_hours * 3600 == 600


def test_effective_training_time_is_elapsed_time_less_waiting_and_redone_work() -> None:
    # One slot of 4 nodes: trains 2.5 h, is interrupted (0.5 h since the checkpoint redone),
    # waits the 10-minute restart overhead, then trains again until hour 5.
    jobs, agenda = _jobs(4, SPEC)
    (job,) = jobs.dispatch(0.0)
    assert jobs.stats(HOUR).effective_training == 1.0  # nothing lost yet
    jobs.interrupt_on(job.nodes[0], 2.5 * HOUR)
    pending = [agenda.pop() for _ in range(len(agenda))]
    restart = next(e for e in pending if e.kind is Kind.JobRestart)
    jobs.restart(job.id, restart.token, restart.at)
    jobs.dispatch(restart.at)
    stats = jobs.stats(5 * HOUR)
    # Kept: 5 h elapsed - 0.5 h redone - 1/6 h waiting.
    assert stats.effective_training == pytest.approx((5 - 0.5 - 1 / 6) / 5)


def test_the_completion_of_an_interrupted_attempt_is_ignored() -> None:
    jobs, agenda = _jobs(4, SPEC)
    (job,) = jobs.dispatch(0.0)
    stale = agenda.pop()
    jobs.interrupt_on(job.nodes[0], HOUR)
    jobs.done(job.id, stale.token, stale.at)
    assert jobs.stats(stale.at).completed == 0


def test_nodes_freed_by_a_job_return_to_the_pool_unless_unschedulable() -> None:
    down: set[int] = set()
    jobs, _ = _jobs(8, SPEC, down)
    first, _second = jobs.dispatch(0.0)
    assert not jobs.usable
    nodes = first.nodes
    down.add(nodes[0])  # cordoned while the job runs: the job keeps running on it
    assert jobs.running(first.id, first.attempt)
    jobs.interrupt_on(nodes[1], HOUR)
    assert jobs.usable == set(nodes) - {nodes[0]}
