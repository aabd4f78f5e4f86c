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
    effective_training: float = 1.0
    """Llama 3's effective training time over the job slots (`sim/jobs.JobStats`)."""
    faults_by_cause: Mapping[str, int] = field(default_factory=dict)
    """Fault occurrences per cause, in the fault mix's order (zeros included)."""
    mode: str = "Enforce"
    """The policy's mode as simulated: in DryRun its actions are decisions it only recorded."""

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


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:,.1f}"


def _minutes(value: float) -> str:
    return f"{value:,.1f} min"


def _share(value: float) -> str:
    return f"{value * 100:.1f}%"


Value = Callable[[Report, "Report | None"], "float | None"]
"""A figure of one report, given the oracle's report of the same run (None: no oracle)."""


@dataclass(frozen=True)
class _Row:
    label: str
    value: Value
    show: Callable[[float], str]
    """How one value prints; a multi-seed cell prints the mean and the spread with it."""


def _plain(
    label: str, read: Callable[[Report], float | None], show: Callable[[float], str]
) -> _Row:
    return _Row(label, lambda r, _oracle: read(r), show)


def _from(field_name: str, key: str) -> Callable[[Report], float]:
    def read(report: Report) -> float:
        values: Mapping[str, float] = getattr(report, field_name)
        return float(values.get(key, 0))

    return read


def _gap(r: Report, oracle: Report | None) -> float | None:
    if oracle is None or r.oracle:
        return None
    return r.lost_node_hours - oracle.lost_node_hours


def _avoidable(r: Report, oracle: Report | None) -> float | None:
    if oracle is None or r.oracle or r.lost_node_hours <= 0:
        return None
    return (r.lost_node_hours - oracle.lost_node_hours) / r.lost_node_hours


def _rows(reports: Sequence[Report]) -> list[_Row]:
    """The rows to print for these reports (all seeds' reports, when there are several)."""
    rows = [
        _plain("node availability (schedulable, healthy)", lambda r: r.availability, _pct),
        _plain("schedulable while faulty", lambda r: r.schedulable_faulty, _pct),
        _plain("GPU-hours unavailable", lambda r: r.gpu_hours_unavailable, _num),
        _plain("faults (all causes)", lambda r: r.faults, _count),
    ]
    causes = [
        c
        for c in _ordered(reports, "faults_by_cause")
        if any(r.faults_by_cause.get(c, 0) for r in reports)
    ]
    rows += [_plain(f"  {c}", _from("faults_by_cause", c), _count) for c in causes]
    rows += [
        _plain("false-positive storms", lambda r: r.storms, _count),
        _plain("job attempts", lambda r: r.job_attempts, _count),
        _plain("job interruptions", lambda r: r.job_interruptions, _count),
        _plain("  caused by remediation", lambda r: r.interruptions_by_remediation, _count),
        _plain("job success rate", lambda r: r.job_success_rate, _pct),
        _plain("effective training time", lambda r: r.effective_training, _pct),
        _plain("job GPU-hours lost (redone work)", lambda r: r.job_gpu_hours_lost, _num),
        _plain("job hours waiting for nodes", lambda r: r.job_wait_hours, _num),
        _plain("remediations opened", lambda r: r.remediations, _count),
    ]
    phases = sorted({p for r in reports for p in r.outcomes})
    rows += [_plain(f"  {p}", _from("outcomes", p), _count) for p in phases]
    rows += [_plain(f"actions: {a.value}", _from("actions", a.value), _count) for a in LADDER_ORDER]
    rows += [
        _plain("replacements", lambda r: r.replacements, _count),
        _plain("manual repairs (nothing fixed it)", lambda r: r.manual_repairs, _count),
        _plain("time to recover p50", lambda r: r.recover_p50_minutes, _minutes),
        _plain("time to recover p95", lambda r: r.recover_p95_minutes, _minutes),
        _plain("peak nodes in disruptive steps", lambda r: r.peak_in_flight, _count),
    ]
    reasons = [
        x.value for x in BLOCKING_REASONS if any(x.value in r.blocked_hours for r in reports)
    ]
    rows += [_plain(f"hours blocked: {x}", _from("blocked_hours", x), _num) for x in reasons]
    if not reasons:
        rows.append(_plain("hours blocked (budgets, breaker)", lambda r: 0.0, _num))
    rows += [
        _plain("breaker openings", lambda r: r.breaker_openings, _count),
        _plain("breaker open (group-hours)", lambda r: r.breaker_open_hours, _num),
    ]
    rows += _loss_rows(reports)
    return rows


def _ordered(reports: Sequence[Report], field_name: str) -> list[str]:
    """The keys of a per-name mapping across reports, in the order the first report has them
    (the fault mix's order for causes), so rows do not move between runs or seeds."""
    keys: dict[str, None] = {}
    for r in reports:
        keys.update(dict.fromkeys(getattr(r, field_name)))
    return list(keys)


def _loss_rows(reports: Sequence[Report]) -> list[_Row]:
    """Node-hours lost, the gap to the oracle, and where the loss went."""
    rows = [_plain("node-hours lost", lambda r: r.lost_node_hours, _num)]
    if any(r.oracle for r in reports):
        rows += [
            _Row("  more than the oracle", _gap, _num),
            _Row("  share a better policy could avoid", _avoidable, _share),
        ]
    shown = list(losses.REPORTED)
    extra = {s for r in reports for s, v in r.lost_by_stage.items() if v > 0}
    shown += [s for s in losses.Stage if s in extra and s not in shown]
    rows += [
        _plain(f"lost in: {stage.value}", _from("lost_by_stage", stage.value), _num)
        for stage in shown
    ]
    # Fault classes in the fault mix's order (then storms and the rest by name): a fixed order,
    # so two runs or two seeds print the same rows in the same places.
    lost = {c for r in reports for c, v in r.lost_by_class.items() if v > 0}
    causes = _ordered(reports, "faults_by_cause")
    classes = [c for c in causes if c in lost] + sorted(lost - set(causes))
    rows += [_plain(f"lost to: {c}", _from("lost_by_class", c), _num) for c in classes]
    return rows


def _oracle_of(reports: Sequence[Report]) -> Report | None:
    return next((r for r in reports if r.oracle), None)


def _dry_run_notes(reports: Sequence[Report]) -> list[str]:
    return [
        f"note: {r.policy} is mode: DryRun: it only records what it would do, so its actions"
        " below change nothing and its availability is that of no remediation"
        " (set mode: Enforce, or pass --as-enforce, to see what it would do in force)"
        for r in reports
        if r.mode == "DryRun"
    ]


def format_table(reports: Sequence[Report]) -> str:
    """The reports side by side: one row per figure, one column per policy."""
    if not reports:
        return ""
    first = reports[0]
    header = (
        f"{first.nodes} nodes x {first.gpus_per_node} GPUs, {first.days:g} days, seed {first.seed}"
    )
    oracle = _oracle_of(reports)
    rows = _rows(reports)
    cells = [[_cell(row, [(r, oracle)]) for r in reports] for row in rows]
    return _render([header, *_dry_run_notes(reports)], [r.policy for r in reports], rows, cells)


def format_seeds(runs: Sequence[Sequence[Report]]) -> str:
    """Several seeds of the same study: each cell is the mean over seeds and, where the seeds
    differ, their range (lowest-highest); then the headline figures seed by seed.

    `runs[i]` is the i-th seed's reports, one per policy, in the same order for every seed.
    """
    if not runs or not runs[0]:
        return ""
    first = runs[0][0]
    seeds = [run[0].seed for run in runs]
    header = (
        f"{first.nodes} nodes x {first.gpus_per_node} GPUs, {first.days:g} days,"
        f" {len(seeds)} seeds ({', '.join(map(str, seeds))}): mean (lowest-highest)"
    )
    everything = [r for run in runs for r in run]
    rows = _rows(everything)
    names = [r.policy for r in runs[0]]
    per_column = [[(run[i], _oracle_of(run)) for run in runs] for i in range(len(names))]
    cells = [[_cell(row, column) for column in per_column] for row in rows]
    summary = _render([header, *_dry_run_notes(runs[0])], names, rows, cells)
    headline = [row for row in rows if row.label in _HEADLINE]
    seed_rows = [
        _Row(f"seed {run[0].seed}: {row.label.strip()}", row.value, row.show)
        for run in runs
        for row in headline
    ]
    seed_cells = [
        [_cell(row, [(r, _oracle_of(run))]) for r in run] for run in runs for row in headline
    ]
    return summary + "\n" + _render(["per seed"], names, seed_rows, seed_cells)


_HEADLINE = (
    "node availability (schedulable, healthy)",
    "effective training time",
    "job interruptions",
    "replacements",
    "node-hours lost",
    "  share a better policy could avoid",
)
"""The rows repeated seed by seed under a multi-seed table."""


def _cell(row: _Row, runs: Sequence[tuple[Report, Report | None]]) -> str:
    values = [v for v in (row.value(r, oracle) for r, oracle in runs) if v is not None]
    if not values:
        return "-"
    mean = sum(values) / len(values)
    low, high = min(values), max(values)
    if len(runs) == 1 or row.show(low) == row.show(high):
        return row.show(mean)
    lowest, highest = row.show(low), row.show(high)
    for unit in ("%", " min"):  # said once, after the range: "41.6 min (30.5-49.7 min)"
        if lowest.endswith(unit):
            lowest = lowest.removesuffix(unit)
    return f"{row.show(mean)} ({lowest}-{highest})"


def _render(
    header: Sequence[str], names: Sequence[str], rows: Sequence[_Row], cells: list[list[str]]
) -> str:
    label_width = max(len(row.label) for row in rows)
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
    lines = [*header, "", _line("", names, label_width, widths)]
    lines += [
        _line(row.label, values, label_width, widths)
        for row, values in zip(rows, cells, strict=True)
    ]
    return "\n".join(lines) + "\n"


def _line(label: str, cells: Sequence[str], label_width: int, widths: Sequence[int]) -> str:
    padded = (c.rjust(w) for c, w in zip(cells, widths, strict=True))
    return label.ljust(label_width) + "  " + "  ".join(padded)


def actions_from(counts: Mapping[Action, int]) -> dict[str, int]:
    """Action counts keyed by name, in ladder order, zeros included."""
    return {a.value: counts.get(a, 0) for a in LADDER_ORDER}
