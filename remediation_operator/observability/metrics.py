"""Prometheus metrics named in the runtime contract, fed from what the engine carried out.

One `Metrics` object owns its own `CollectorRegistry`, so a test (or a second operator in the
same process) never sees another's numbers. Gauges that describe a policy's state are set
from the policy's latest plan as a whole (replacing the previous values), so a label that
no longer applies drops back to zero instead of lingering.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "gpuops_remediation_"

ACTION_RESULTS = (
    "started",
    "succeeded",
    "transient_failure",
    "permanent_failure",
    "timed_out",
    "cancelled",
)
"""The `result` label values of `actions_total`, as the contract fixes them."""

_STEP_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
_REACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(
        default_factory=lambda: CollectorRegistry(auto_describe=True)
    )

    def __post_init__(self) -> None:
        r = self.registry
        self.remediations = Gauge(
            PREFIX + "remediations",
            "Remediations by phase and fault (active and retained terminal ones).",
            ["phase", "fault"],
            registry=r,
        )
        self.actions = Counter(
            PREFIX + "actions",
            "Remediation actions by result.",
            ["action", "result"],
            registry=r,
        )
        self.step_duration = Histogram(
            PREFIX + "step_duration_seconds",
            "How long finished ladder steps took, by outcome.",
            ["action", "outcome"],
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            PREFIX + "decisions",
            "Announced decisions, by reason.",
            ["reason"],
            registry=r,
        )
        self.blocked = Gauge(
            PREFIX + "blocked",
            "Remediations blocked now, by policy and reason.",
            ["policy", "reason"],
            registry=r,
        )
        self.budget_headroom = Gauge(
            PREFIX + "budget_headroom",
            "How many more nodes each disruptive action may take now.",
            ["policy", "action"],
            registry=r,
        )
        self.circuit_open = Gauge(
            PREFIX + "circuit_open",
            "1 while the policy's circuit breaker for the group is open.",
            ["policy", "group"],
            registry=r,
        )
        self.nodes_quarantined = Gauge(
            PREFIX + "nodes_quarantined",
            "Nodes carrying the remediation.gpuops.io/quarantine taint.",
            registry=r,
        )
        self.reaction = Histogram(
            PREFIX + "reaction_seconds",
            "From a relevant node change seen to the operator's first write for it.",
            buckets=_REACTION_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            PREFIX + "leader", "1 on the replica holding the leader Lease.", registry=r
        )
        self.policy_accepted = Gauge(
            PREFIX + "policy_accepted",
            "1 when the policy's current spec is valid and in force.",
            ["policy"],
            registry=r,
        )
        self._by_policy: dict[str, Tally[tuple[str, str]]] = {}
        self._blocked_labels: dict[str, set[str]] = {}
        self._circuit_labels: dict[str, set[str]] = {}

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    # Actions and decisions -----------------------------------------------------------------

    def action(self, action: str, result: str) -> None:
        if result not in ACTION_RESULTS:
            raise ValueError(f"result: {result!r} is not one of {', '.join(ACTION_RESULTS)}")
        self.actions.labels(action=action, result=result).inc()

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:
        self.step_duration.labels(action=action, outcome=outcome).observe(max(seconds, 0.0))

    def decision(self, reason: str) -> None:
        self.decisions.labels(reason=reason).inc()

    def reacted(self, seconds: float) -> None:
        self.reaction.observe(max(seconds, 0.0))

    # Whole-state gauges --------------------------------------------------------------------

    def policy_census(self, policy: str, census: Mapping[tuple[str, str], int]) -> None:
        """Replace `policy`'s share of the remediations gauge ((phase, fault) -> count)."""
        old = self._by_policy.get(policy, Tally())
        self._by_policy[policy] = Tally(dict(census))
        for phase, fault in set(old) | set(census):
            total = sum(t.get((phase, fault), 0) for t in self._by_policy.values())
            self.remediations.labels(phase=phase, fault=fault).set(total)

    def policy_blocked(self, policy: str, blocked: Mapping[str, int]) -> None:
        """Replace `policy`'s blocked-by-reason gauge; reasons no longer seen drop to 0."""
        for reason in self._blocked_labels.get(policy, set()) - set(blocked):
            self.blocked.labels(policy=policy, reason=reason).set(0)
        for reason, count in blocked.items():
            self.blocked.labels(policy=policy, reason=reason).set(count)
        self._blocked_labels[policy] = set(blocked)

    def policy_summary(
        self, policy: str, headroom: Mapping[str, int], circuit_open: Iterable[str]
    ) -> None:
        for action, value in headroom.items():
            self.budget_headroom.labels(policy=policy, action=action).set(value)
        opened = set(circuit_open)
        for group in self._circuit_labels.get(policy, set()) - opened:
            self.circuit_open.labels(policy=policy, group=group).set(0)
        for group in opened:
            self.circuit_open.labels(policy=policy, group=group).set(1)
        self._circuit_labels[policy] = self._circuit_labels.get(policy, set()) | opened

    def policy_forgotten(self, policy: str) -> None:
        """The policy was deleted: its gauges drop to zero."""
        self.policy_census(policy, {})
        self.policy_blocked(policy, {})
        self.policy_summary(policy, {}, ())
        self.policy_accepted.labels(policy=policy).set(0)

    def accepted(self, policy: str, ok: bool) -> None:
        self.policy_accepted.labels(policy=policy).set(1 if ok else 0)

    def quarantined(self, count: int) -> None:
        self.nodes_quarantined.set(count)

    def leadership(self, leading: bool) -> None:
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
        self.registry.register(_LostEvents(events_lost))


class _LostEvents(Collector):
    """`events_lost_total{why}` from the queue's own counters (a Counter cannot be set)."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            PREFIX + "events_lost",
            "Events never posted: dropped from a full queue, or refused by the API.",
            labels=["why"],
        )
        lost = self._read()
        for why in ("queue_full", "refused"):
            family.add_metric([why], float(lost.get(why, 0)))
        yield family
