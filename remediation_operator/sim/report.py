"""What a simulated policy did to the fleet, as one value and as the table `simulate` prints.

The report answers the questions a fleet owner asks before applying a policy: how much of the
fleet stays usable, how much GPU time and job progress is lost, how many nodes are cordoned,
drained, reset, rebooted and replaced, how fast nodes come back, how long repair waited on
a budget or the circuit breaker, and where the lost node-hours went (by stage and by fault
class), next to the oracle's: the least any policy could lose on the same faults. Several
reports print side by side for `--compare`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from remediation_operator.domain.policy import LADDER_ORDER, Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.sim import losses

BLOCKING_REASONS: tuple[Reason, ...] = (
    Reason.BudgetExhausted,
    Reason.BudgetInvalid,
    Reason.RateLimited,
    Reason.CircuitOpen,
    Reason.CircuitCooldown,
    Reason.AwaitingApproval,
    Reason.EvidenceInsufficient,
    Reason.Paused,
)
"""Reasons a Remediation can be Blocked for; the report sums the time spent in each."""


@dataclass(frozen=True)
class Report:
    policy: str
    seed: int
    days: float
    nodes: int
    gpus_per_node: int
    availability: float
    """Fraction of node-time a node was schedulable and had no fault present."""
    schedulable_faulty: float
    """Fraction of node-time a node was schedulable although a fault was present on it."""
    gpu_hours_unavailable: float
    """GPU-hours of nodes not schedulable-and-healthy (cordoned, repaired, faulty, replaced)."""
    faults: int
    """Fault occurrences (all causes), including those on idle nodes."""
    storms: int
    job_attempts: int
    jobs_completed: int
    job_interruptions: int
    interruptions_by_remediation: int
    """Job interruptions caused by a drain, reboot or replacement (not by the fault itself)."""
    job_success_rate: float
    """Job attempts that finished their work, out of those that ended."""
    job_gpu_hours_lost: float
    """Work redone after interruptions (since the last checkpoint), in GPU-hours."""
    job_wait_hours: float
    """Hours jobs spent waiting for nodes (restart overhead included), summed over jobs."""
    remediations: int
    outcomes: Mapping[str, int]
    """Finished Remediations by phase (Succeeded, Failed, Cancelled) and those still active."""
    actions: Mapping[str, int]
    """Step attempts started, by action."""
    replacements: int
    """Nodes handed back for replacement by the policy (Replace completed)."""
    manual_repairs: int
    """Faults no action fixed, repaired by a human (see the fault mix's manualRepair)."""
    recover_p50_minutes: float | None
    recover_p95_minutes: float | None
    """From a fault's onset until the node is schedulable and healthy again (recovered only)."""
    blocked_hours: Mapping[str, float] = field(default_factory=dict)
    """Remediation-hours spent Blocked, by reason."""
    peak_in_flight: int = 0
    """Most nodes in a disruptive step at once."""
    lost_node_hours: float = 0.0
    """Node-hours a slot was not schedulable-and-healthy (1 - availability, in node-hours)."""
    lost_by_stage: Mapping[str, float] = field(default_factory=dict)
    """Node-hours lost per stage (`sim/losses.Stage`); sums to `lost_node_hours`."""
    lost_by_class: Mapping[str, float] = field(default_factory=dict)
    """Node-hours lost per fault class (the fault mix's causes, storms); sums to the same."""
    breaker_openings: int = 0
    """Times a circuit breaker group went from closed to open."""
    breaker_open_hours: float = 0.0
    """Group-hours during which a breaker was open."""
    oracle: bool = False
    """This is the oracle's report (`sim/oracle.py`), the baseline the others are measured by."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def hours_by(seconds: Mapping[tuple[str, str], float], *, index: int) -> dict[str, float]:
    """Node-seconds per (fault class, stage) summed by one of the two, in node-hours, largest
    first (ties by name)."""
    total: dict[str, float] = {}
    for key, value in seconds.items():
        total[key[index]] = total.get(key[index], 0.0) + value
    ordered = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    return {name: round(value / 3600.0, 1) for name, value in ordered}


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _pct(value: float) -> str:
    return f"{value * 100:.3f}%"


def _num(value: float) -> str:
    return f"{value:,.1f}"


def _opt_minutes(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} min"


_Row = tuple[str, Callable[[Report], str]]


def _count_of(field_name: str, key: str) -> Callable[[Report], str]:
    def cell(report: Report) -> str:
        counts: Mapping[str, int] = getattr(report, field_name)
        return str(counts.get(key, 0))

    return cell


def _blocked(reason: str) -> Callable[[Report], str]:
    return lambda report: _num(report.blocked_hours.get(reason, 0.0))


def _rows(reports: Sequence[Report]) -> list[_Row]:
    rows: list[_Row] = [
        ("node availability (schedulable, healthy)", lambda r: _pct(r.availability)),
        ("schedulable while faulty", lambda r: _pct(r.schedulable_faulty)),
        ("GPU-hours unavailable", lambda r: _num(r.gpu_hours_unavailable)),
        ("faults (all causes)", lambda r: str(r.faults)),
        ("false-positive storms", lambda r: str(r.storms)),
        ("job attempts", lambda r: str(r.job_attempts)),
        ("job interruptions", lambda r: str(r.job_interruptions)),
        ("  caused by remediation", lambda r: str(r.interruptions_by_remediation)),
        ("job success rate", lambda r: _pct(r.job_success_rate)),
        ("job GPU-hours lost (redone work)", lambda r: _num(r.job_gpu_hours_lost)),
        ("job hours waiting for nodes", lambda r: _num(r.job_wait_hours)),
        ("remediations opened", lambda r: str(r.remediations)),
    ]
    phases = sorted({p for r in reports for p in r.outcomes})
    rows += [(f"  {p}", _count_of("outcomes", p)) for p in phases]
    rows += [(f"actions: {a.value}", _count_of("actions", a.value)) for a in LADDER_ORDER]
    rows += [
        ("replacements", lambda r: str(r.replacements)),
        ("manual repairs (nothing fixed it)", lambda r: str(r.manual_repairs)),
        ("time to recover p50", lambda r: _opt_minutes(r.recover_p50_minutes)),
        ("time to recover p95", lambda r: _opt_minutes(r.recover_p95_minutes)),
        ("peak nodes in disruptive steps", lambda r: str(r.peak_in_flight)),
    ]
    reasons = [
        x.value for x in BLOCKING_REASONS if any(x.value in r.blocked_hours for r in reports)
    ]
    rows += [(f"hours blocked: {x}", _blocked(x)) for x in reasons]
    if not reasons:
        rows.append(("hours blocked (budgets, breaker)", lambda r: "0.0"))
    rows += [
        ("breaker openings", lambda r: str(r.breaker_openings)),
        ("breaker open (group-hours)", lambda r: _num(r.breaker_open_hours)),
    ]
    rows += _loss_rows(reports)
    return rows


def _loss_rows(reports: Sequence[Report]) -> list[_Row]:
    """Node-hours lost, the gap to the oracle, and where the loss went."""
    rows: list[_Row] = [("node-hours lost", lambda r: _num(r.lost_node_hours))]
    oracle = next((r for r in reports if r.oracle), None)
    if oracle is not None:
        best = oracle.lost_node_hours

        def gap(r: Report) -> str:
            return "-" if r.oracle else _num(r.lost_node_hours - best)

        def share(r: Report) -> str:
            if r.oracle or r.lost_node_hours <= 0:
                return "-"
            return f"{(r.lost_node_hours - best) / r.lost_node_hours * 100:.1f}%"

        rows += [
            ("  more than the oracle", gap),
            ("  share a better policy could avoid", share),
        ]
    shown = list(losses.REPORTED)
    extra = {s for r in reports for s, v in r.lost_by_stage.items() if v > 0}
    shown += [s for s in losses.Stage if s in extra and s not in shown]
    rows += [(f"lost in: {stage.value}", _lost("lost_by_stage", stage.value)) for stage in shown]
    classes = sorted(
        {c for r in reports for c, v in r.lost_by_class.items() if v > 0},
        key=lambda c: (-max(r.lost_by_class.get(c, 0.0) for r in reports), c),
    )
    rows += [(f"lost to: {c}", _lost("lost_by_class", c)) for c in classes]
    return rows


def _lost(field_name: str, key: str) -> Callable[[Report], str]:
    def cell(report: Report) -> str:
        values: Mapping[str, float] = getattr(report, field_name)
        return _num(values.get(key, 0.0))

    return cell


def format_table(reports: Sequence[Report]) -> str:
    """The reports side by side: one row per figure, one column per policy."""
    if not reports:
        return ""
    first = reports[0]
    header = (
        f"{first.nodes} nodes x {first.gpus_per_node} GPUs, {first.days:g} days, seed {first.seed}"
    )
    rows = _rows(reports)
    label_width = max(len(label) for label, _ in rows)
    cells = [[fmt(r) for r in reports] for _, fmt in rows]
    widths = [max(len(r.policy), *(len(row[i]) for row in cells)) for i, r in enumerate(reports)]
    names = [r.policy for r in reports]
    lines = [header, "", _line("", names, label_width, widths)]
    lines += [
        _line(label, row, label_width, widths) for (label, _), row in zip(rows, cells, strict=True)
    ]
    return "\n".join(lines) + "\n"


def _line(label: str, cells: Sequence[str], label_width: int, widths: Sequence[int]) -> str:
    padded = (c.rjust(w) for c, w in zip(cells, widths, strict=True))
    return label.ljust(label_width) + "  " + "  ".join(padded)


def actions_from(counts: Mapping[Action, int]) -> dict[str, int]:
    """Action counts keyed by name, in ladder order, zeros included."""
    return {a.value: counts.get(a, 0) for a in LADDER_ORDER}
