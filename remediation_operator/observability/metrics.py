"""Prometheus metrics named in the runtime contract, fed from what the engine carried out.

Conventions (Prometheus' naming guide and controller-runtime's metrics, docs/operations.md):
one label vocabulary shared with status and Events (`outcome` takes the step Outcome values,
`reason` the Reason words), a `policy` label on every series that belongs to a policy, no
`_created` series, and the process/platform/GC collectors for the operator's own CPU and
memory. Gauges that describe the fleet (incidents, blocked, headroom, breaker, quarantined
nodes, queue depth) are exported by the leader only: a standby holds no current picture,
and `sum()` over replicas must not count the fleet twice.

One `Metrics` object owns its own `CollectorRegistry`, so a test (or a second operator in the
same process) never sees another's numbers. A policy's gauges are replaced as a whole by its
latest plan, so a label that no longer applies drops back to zero instead of lingering, and a
deleted policy's series are removed.
"""

from __future__ import annotations

import contextlib
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import prometheus_client
from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from remediation_operator.domain.remediation import Outcome

# `_created` series double every counter and histogram for a timestamp nobody graphs
# (prometheus_client docs, "Disabling _created metrics"); the setting is process-wide.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

PREFIX = "gpuops_remediation_"

OUTCOMES = tuple(str(o) for o in Outcome)
"""The `outcome` label values: the step Outcome vocabulary of status and Events."""

_STEP_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
_FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TASKS = (
    "node-watch",
    "drain",
    "policy",
    "events",
    "policy-status-writes",
    "leader-election",
    "retention",
    "job-retention",
    "staleness",
    "initial-sync",
    "accept",
)
"""The kinds of supervised background task (`task` label; handlers.supervision.family)."""
_UNREACHABLE = "<error>"
"""The `code` of a request that got no HTTP answer (client-go's rest_client label value)."""


class _LeaderOnly(Collector):
    """Yields its gauges only while `leading()`; a standby exports none of them."""

    def __init__(self, leading: Callable[[], bool], *collectors: Collector) -> None:
        self._leading = leading
        self._collectors = collectors

    def describe(self) -> Iterator[Metric]:
        for collector in self._collectors:
            describe = getattr(collector, "describe", None)
            yield from describe() if describe is not None else collector.collect()

    def collect(self) -> Iterator[Metric]:
        if self._leading():
            for collector in self._collectors:
                yield from collector.collect()


class _Read(Collector):
    """A family computed at scrape time from a callback (queue depths, lost Events)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        read: Callable[[], Mapping[str, float]],
        *,
        counter: bool = False,
        always: Iterable[str] = (),
    ) -> None:
        self._name, self._doc, self._label = name, documentation, label
        self._read, self._counter, self._always = read, counter, tuple(always)

    def _family(self) -> CounterMetricFamily | GaugeMetricFamily:
        kind = CounterMetricFamily if self._counter else GaugeMetricFamily
        return kind(self._name, self._doc, labels=[self._label])

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        values = dict.fromkeys(self._always, 0.0) | {k: float(v) for k, v in self._read().items()}
        for key in sorted(values):
            family.add_metric([key], values[key])
        yield family


@dataclass
class Metrics:
    registry: CollectorRegistry = field(
        default_factory=lambda: CollectorRegistry(auto_describe=True)
    )

    def __post_init__(self) -> None:
        r = self.registry
        self._leading = False
        # process_* (CPU, memory, open fds), python_info and python_gc_*, which a private
        # registry does not get by itself.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        if GC_COLLECTOR is not None:
            GCCollector(registry=r)
        # Counters and histograms: what this replica did (a standby does nothing).
        self.steps_started = Counter(
            PREFIX + "steps_started",
            "Ladder steps started, by policy and action.",
            ["policy", "action"],
            registry=r,
        )
        self.steps_finished = Counter(
            PREFIX + "steps_finished",
            "Ladder steps finished, by policy, action, outcome and reason"
            " (a timeout is PermanentFailure with reason StepTimedOut).",
            ["policy", "action", "outcome", "reason"],
            registry=r,
        )
        self.step_duration = Histogram(
            PREFIX + "step_duration_seconds",
            "How long finished ladder steps took, by policy, action and outcome.",
            ["policy", "action", "outcome"],
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            PREFIX + "decisions",
            "Announced decisions, by policy and reason.",
            ["policy", "reason"],
            registry=r,
        )
        self.reaction = Histogram(
            PREFIX + "reaction_seconds",
            "From a relevant node change seen (or the end of the fault's tolerate window) to"
            " the cordon written for it, by policy.",
            ["policy"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.reconciles = Counter(
            PREFIX + "reconcile",
            "Reconcile rounds of a policy's worker (whole or focused on changed nodes).",
            ["policy"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            PREFIX + "reconcile_errors",
            "Reconcile rounds that failed or left writes undone (retried with backoff).",
            ["policy"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            PREFIX + "reconcile_duration_seconds",
            "How long one reconcile round of a policy took.",
            ["policy"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            PREFIX + "queue_wait_seconds",
            "From a node change queued for a policy's worker to the round that plans it.",
            ["policy"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.api_requests = Counter(
            PREFIX + "api_requests",
            "Requests to the Kubernetes API by verb (HTTP method, WATCH for watches) and"
            " status code (<error> when no answer came).",
            ["verb", "code"],
            registry=r,
        )
        self.api_duration = Histogram(
            PREFIX + "api_request_duration_seconds",
            "Latency of Kubernetes API requests (a watch: until its response headers).",
            ["verb"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.watch_restarts = Counter(
            PREFIX + "watch_restarts",
            "Watches opened again after the first (server timeout, 410 Gone, lost"
            " connection), by resource.",
            ["resource"],
            registry=r,
        )
        self.task_restarts = Counter(
            PREFIX + "task_restarts",
            "Background tasks (watches, workers, writers) that ended unexpectedly and were"
            " started again, by kind of task (docs/operations.md).",
            ["task"],
            registry=r,
        )
        for task in TASKS:
            self.task_restarts.labels(task=task)
        self.leader = Gauge(
            PREFIX + "leader", "1 on the replica holding the leader Lease.", registry=r
        )
        # Fleet gauges: the leader's picture only.
        self.incidents = Gauge(
            PREFIX + "incidents",
            "Remediations (active and retained finished ones) by policy, phase and fault.",
            ["policy", "phase", "fault"],
            registry=None,
        )
        self.blocked = Gauge(
            PREFIX + "blocked",
            "Remediations blocked now, by policy and reason.",
            ["policy", "reason"],
            registry=None,
        )
        self.budget_headroom = Gauge(
            PREFIX + "budget_headroom",
            "How many more nodes each disruptive action may take now, by policy.",
            ["policy", "action"],
            registry=None,
        )
        self.circuit_open = Gauge(
            PREFIX + "circuit_open",
            "1 while the policy's circuit breaker for the group is open.",
            ["policy", "group"],
            registry=None,
        )
        self.policy_accepted = Gauge(
            PREFIX + "policy_accepted",
            "1 when the policy's current spec is valid and in force, 0 while it is invalid.",
            ["policy"],
            registry=None,
        )
        self.nodes_quarantined = Gauge(
            PREFIX + "nodes_quarantined",
            "Nodes carrying the remediation.gpuops.io/quarantine taint.",
            registry=None,
        )
        self._queues: Callable[[], Mapping[str, int]] = dict
        self._fleet: list[Collector] = [
            self.incidents,
            self.blocked,
            self.budget_headroom,
            self.circuit_open,
            self.policy_accepted,
            self.nodes_quarantined,
            _Read(
                PREFIX + "queue_depth",
                "Nodes waiting for the next reconcile round of a policy's worker.",
                "policy",
                lambda: {k: float(v) for k, v in self._queues().items()},
            ),
        ]
        r.register(_LeaderOnly(lambda: self._leading, *self._fleet))
        self._census: dict[str, Tally[tuple[str, str]]] = {}
        self._blocked_labels: dict[str, set[str]] = {}
        self._circuit_labels: dict[str, set[str]] = {}
        self._headroom_labels: dict[str, set[str]] = {}
        self._watches: set[str] = set()

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    # Steps and decisions ---------------------------------------------------------------------

    def step_started(self, policy: str, action: str) -> None:
        self.steps_started.labels(policy=policy, action=action).inc()

    def step_finished(
        self, policy: str, action: str, outcome: str, reason: str, seconds: float | None
    ) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome: {outcome!r} is not one of {', '.join(OUTCOMES)}")
        labels = {"policy": policy, "action": action, "outcome": outcome}
        self.steps_finished.labels(reason=reason, **labels).inc()
        if seconds is not None:
            self.step_duration.labels(**labels).observe(max(seconds, 0.0))

    def decision(self, policy: str, reason: str) -> None:
        self.decisions.labels(policy=policy, reason=reason).inc()

    def reacted(self, policy: str, seconds: float) -> None:
        self.reaction.labels(policy=policy).observe(max(seconds, 0.0))

    # Controller health -----------------------------------------------------------------------

    def reconciled(
        self, policy: str, seconds: float, *, failed: bool, waited: float | None = None
    ) -> None:
        """One reconcile round ended (`failed`: raised, or left writes undone)."""
        self.reconciles.labels(policy=policy).inc()
        if failed:
            self.reconcile_errors.labels(policy=policy).inc()
        else:
            self.reconcile_errors.labels(policy=policy)  # the series exists at 0
        self.reconcile_duration.labels(policy=policy).observe(max(seconds, 0.0))
        if waited is not None:
            self.queue_wait.labels(policy=policy).observe(max(waited, 0.0))

    def task_restarted(self, task: str) -> None:
        """A supervised background task of kind `task` ended and is started again."""
        self.task_restarts.labels(task=task).inc()

    def queues(self, read: Callable[[], Mapping[str, int]]) -> None:
        """Where `queue_depth{policy}` is read at scrape time (nodes pending per worker)."""
        self._queues = read

    def api_request(self, verb: str, target: str, code: int, seconds: float) -> None:
        """One API request; `target` is the path (with its selector, for watches).

        The first watch of a target is a start, every later one a restart.
        """
        self.api_requests.labels(verb=verb, code=str(code) if code else _UNREACHABLE).inc()
        self.api_duration.labels(verb=verb).observe(max(seconds, 0.0))
        if verb == "WATCH":
            if target in self._watches:
                resource = target.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                self.watch_restarts.labels(resource=resource).inc()
            else:
                self._watches.add(target)

    # Fleet gauges (the leader's) -------------------------------------------------------------

    def policy_census(self, policy: str, census: Mapping[tuple[str, str], int]) -> None:
        """Replace `policy`'s incidents gauge ((phase, fault) -> count)."""
        old = self._census.get(policy, Tally())
        self._census[policy] = Tally(dict(census))
        for phase, fault in set(old) | set(census):
            value = census.get((phase, fault), 0)
            self.incidents.labels(policy=policy, phase=phase, fault=fault).set(value)

    def policy_blocked(self, policy: str, blocked: Mapping[str, int]) -> None:
        """Replace `policy`'s blocked-by-reason gauge; reasons no longer seen drop to 0."""
        for reason in self._blocked_labels.get(policy, set()) - set(blocked):
            self.blocked.labels(policy=policy, reason=reason).set(0)
        for reason, count in blocked.items():
            self.blocked.labels(policy=policy, reason=reason).set(count)
        self._blocked_labels[policy] = self._blocked_labels.get(policy, set()) | set(blocked)

    def policy_summary(
        self, policy: str, headroom: Mapping[str, int], circuit_open: Iterable[str]
    ) -> None:
        for action, value in headroom.items():
            self.budget_headroom.labels(policy=policy, action=action).set(value)
        self._headroom_labels[policy] = self._headroom_labels.get(policy, set()) | set(headroom)
        opened = set(circuit_open)
        for group in self._circuit_labels.get(policy, set()) - opened:
            self.circuit_open.labels(policy=policy, group=group).set(0)
        for group in opened:
            self.circuit_open.labels(policy=policy, group=group).set(1)
        self._circuit_labels[policy] = self._circuit_labels.get(policy, set()) | opened

    def policy_forgotten(self, policy: str) -> None:
        """The policy was deleted: its series go (nothing is left to alert or graph)."""
        for phase, fault in self._census.pop(policy, Tally()):
            self.incidents.remove(policy, phase, fault)
        for reason in self._blocked_labels.pop(policy, set()):
            self.blocked.remove(policy, reason)
        for action in self._headroom_labels.pop(policy, set()):
            self.budget_headroom.remove(policy, action)
        for group in self._circuit_labels.pop(policy, set()):
            self.circuit_open.remove(policy, group)
        with contextlib.suppress(KeyError):
            self.policy_accepted.remove(policy)

    def accepted(self, policy: str, ok: bool) -> None:
        self.policy_accepted.labels(policy=policy).set(1 if ok else 0)

    def quarantined(self, count: int) -> None:
        self.nodes_quarantined.set(count)

    def leadership(self, leading: bool) -> None:
        """Only the leader exports the fleet gauges (a standby's copy would be stale)."""
        self._leading = leading
        self.leader.set(1 if leading else 0)

    # Background writers (read when scraped) ------------------------------------------------

    def background_writes(
        self,
        events_queued: Callable[[], int],
        events_lost: Callable[[], Mapping[str, int]],
        status_pending: Callable[[], int],
    ) -> None:
        """Expose the Event queue and the coalesced policy-status writes, read at scrape time.

        `events_lost`: cumulative counts by why (`queue_full`, `refused`), kept by the queue.
        """
        Gauge(
            PREFIX + "events_queued",
            "Kubernetes Events decided but not posted yet.",
            registry=self.registry,
        ).set_function(lambda: float(events_queued()))
        Gauge(
            PREFIX + "policy_status_writes_pending",
            "Policies whose summary-only status write waits for its once-a-second slot.",
            registry=self.registry,
        ).set_function(lambda: float(status_pending()))
        self.registry.register(
            _Read(
                PREFIX + "events_lost",
                "Events never posted: dropped from a full queue, or refused by the API.",
                "why",
                lambda: {k: float(v) for k, v in events_lost().items()},
                counter=True,
                always=("queue_full", "refused"),
            )
        )

    def leader_election_errors(
        self, read: Callable[[], Mapping[str, int]], reasons: Iterable[str]
    ) -> None:
        """Rounds of leader election that could not read or write the Lease, by reason
        (`NamespaceNotFound`, `Forbidden`, `Unauthorized`, `Unreachable`, `ServerError`): the
        elector keeps the cumulative counts; each reason is exported from zero."""
        self.registry.register(
            _Read(
                PREFIX + "leader_election_errors",
                "Leader election rounds that failed to read, create or renew the Lease.",
                "reason",
                lambda: {k: float(v) for k, v in read().items()},
                counter=True,
                always=reasons,
            )
        )
