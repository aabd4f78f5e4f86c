"""Gang-scheduled training jobs: what a fault (or a drain) costs the people using the fleet.

Node availability alone hides the real cost of a fault: a job spanning K nodes stops when any
one of them fails, and loses the work since its last checkpoint. This module keeps the jobs,
places them on free schedulable nodes (all K at once), interrupts them, and counts the outcome.
It knows nothing about faults or policies; the simulator tells it which nodes are usable.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from remediation_operator.sim.events import Agenda, Kind
from remediation_operator.sim.fleetspec import JobSpec


@dataclass
class Job:
    """One job's mutable progress (internal state of `Jobs`, not a value passed around)."""

    id: int
    attempt: int = 0
    nodes: tuple[int, ...] = ()
    checkpointed: float = 0.0
    """Seconds of work saved by checkpoints so far."""
    started_at: float | None = None
    """Start of the running attempt; None while the job waits for nodes."""
    waiting_since: float = 0.0


@dataclass(frozen=True)
class JobStats:
    attempts: int
    completed: int
    interrupted: int
    lost_gpu_hours: float
    """Work redone after interruptions (since the last checkpoint), in GPU-hours."""
    waiting_job_hours: float
    """Time jobs spent waiting for K schedulable nodes (restart overhead included)."""
    effective_training: float = 1.0
    """Share of the job slots' elapsed time spent on training that was kept: elapsed time less
    waiting for nodes (restart overhead included) and work redone after an interruption. This is
    Llama 3's "effective training time" (arXiv 2407.21783, section 3.3.4: >90% over 54 days);
    checkpoint writes are not modelled, so it is an upper bound for a given checkpoint period."""

    @property
    def success_rate(self) -> float:
        ended = self.completed + self.interrupted
        return self.completed / ended if ended else 1.0


class Jobs:
    """Job slots filling `utilization` of the fleet, each restarted or replaced forever."""

    def __init__(
        self,
        spec: JobSpec,
        node_count: int,
        gpus_per_node: int,
        agenda: Agenda,
        schedulable: Callable[[int], bool],
    ) -> None:
        self.spec = spec
        self._schedulable = schedulable
        self._agenda = agenda
        self._gpus = gpus_per_node
        self._length = spec.length.total_seconds()
        self._checkpoint = spec.checkpoint_every.total_seconds()
        self._overhead = spec.restart_overhead.total_seconds()
        count = int(node_count * spec.utilization) // spec.nodes_per_job
        self.jobs = [Job(id=i) for i in range(count)]
        self.usable: set[int] = set()
        """Schedulable nodes that run no job (ints: iteration order is deterministic)."""
        self.on_node: dict[int, int] = {}
        """Node slot -> id of the job running there."""
        self._waiting: deque[int] = deque(j.id for j in self.jobs)
        self._attempts = 0
        self._completed = 0
        self._interrupted = 0
        self._lost = 0.0
        self._lost_job_seconds = 0.0
        """Work redone after interruptions, in job-seconds (not multiplied by nodes or GPUs)."""
        self._waiting_seconds = 0.0

    # Node usability, told by the simulator --------------------------------------------------

    def set_usable(self, node: int, usable: bool) -> None:
        if usable and node not in self.on_node:
            self.usable.add(node)
        else:
            self.usable.discard(node)

    # Lifecycle -------------------------------------------------------------------------------

    def dispatch(self, now: float) -> list[Job]:
        """Start waiting jobs, oldest first, while K usable nodes are free; return them."""
        started: list[Job] = []
        k = self.spec.nodes_per_job
        while self._waiting and len(self.usable) >= k:
            job = self.jobs[self._waiting.popleft()]
            job.nodes = tuple(self.usable.pop() for _ in range(k))
            for node in job.nodes:
                self.on_node[node] = job.id
            job.attempt += 1
            job.started_at = now
            self._attempts += 1
            self._waiting_seconds += now - job.waiting_since
            self._agenda.push(
                now + self._length - job.checkpointed, Kind.JobDone, job.id, job.attempt
            )
            started.append(job)
        return started

    def interrupt_on(self, node: int, now: float) -> Job | None:
        """The job on `node` (if any) stops; its nodes are freed; it restarts after overhead."""
        job_id = self.on_node.get(node)
        if job_id is None:
            return None
        job = self.jobs[job_id]
        assert job.started_at is not None
        ran = now - job.started_at
        saved = math.floor(ran / self._checkpoint) * self._checkpoint
        job.checkpointed = min(self._length, job.checkpointed + saved)
        self._lost += (ran - saved) * len(job.nodes) * self._gpus
        self._lost_job_seconds += ran - saved
        self._interrupted += 1
        self._release(job)
        job.waiting_since = now
        job.attempt += 1  # invalidates the pending JobDone/JobCrash of the stopped attempt
        self._agenda.push(now + self._overhead, Kind.JobRestart, job.id, job.attempt)
        return job

    def done(self, job_id: int, attempt: int, now: float) -> None:
        """A JobDone event; a stale one (of an interrupted attempt) is ignored."""
        job = self.jobs[job_id]
        if job.attempt != attempt or job.started_at is None:
            return
        self._completed += 1
        self._release(job)
        job.checkpointed = 0.0  # the slot's next job starts from scratch
        self._queue(job, now)

    def restart(self, job_id: int, attempt: int, now: float) -> None:
        """A JobRestart event: the interrupted job (after its overhead) waits for nodes."""
        job = self.jobs[job_id]
        if job.attempt == attempt and job.started_at is None:
            self._waiting.append(job.id)  # waiting since the interruption

    def running(self, job_id: int, attempt: int) -> bool:
        job = self.jobs[job_id]
        return job.attempt == attempt and job.started_at is not None

    def stats(self, now: float) -> JobStats:
        waiting = sum(now - self.jobs[j].waiting_since for j in self._waiting)
        elapsed = len(self.jobs) * now
        wasted = self._waiting_seconds + waiting + self._lost_job_seconds
        return JobStats(
            attempts=self._attempts,
            completed=self._completed,
            interrupted=self._interrupted,
            lost_gpu_hours=self._lost / 3600.0,
            waiting_job_hours=(self._waiting_seconds + waiting) / 3600.0,
            effective_training=max(0.0, 1.0 - wasted / elapsed) if elapsed > 0 else 1.0,
        )

    # -----------------------------------------------------------------------------------------

    def _release(self, job: Job) -> None:
        for node in job.nodes:
            del self.on_node[node]
            if self._schedulable(node):
                self.usable.add(node)
        job.nodes = ()
        job.started_at = None

    def _queue(self, job: Job, now: float) -> None:
        job.waiting_since = now
        self._waiting.append(job.id)
