"""The benchmark harness runs end to end and measures what `make bench` reports."""

from __future__ import annotations

import json
from pathlib import Path

from bench import operator_bench


def test_a_tiny_run_measures_floor_operator_and_drain(tmp_path: Path) -> None:
    plan = operator_bench.Plan(
        sizes=(30,), faults=4, fault_rate=20.0, cpu_window=2.0, drain_pods=10, settle=0.5
    )
    out = tmp_path / "operator.json"
    report = operator_bench.run(plan, sim=False, quick=True, out=out)

    assert json.loads(out.read_text()) == report
    (size,) = report["sizes"]
    for who in ("floor", "operator"):
        measured = size[who]
        assert measured["latency"]["cordoned"] == 4, who
        assert measured["latency"]["missed"] == 0, who
        assert 0 < measured["latency"]["p50_ms"] <= measured["latency"]["p99_ms"] < 20_000
        assert measured["events"] > 0
        assert measured["cpu_seconds"] >= 0
        assert 20 < measured["peak_rss_mb"] < 2_000
    assert size["ratios"]["p50"] is not None
    drain = report["drain"]
    assert drain["emptied"] is True
    assert drain["evictions"] >= 10
    assert 0 < drain["fault_to_empty_s"] < 20
    table = operator_bench.table(report)
    assert "operator" in table
    assert "drain of 10 pods" in table


def test_percentiles_pick_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert operator_bench.percentile(values, 0.50) == 51.0
    assert operator_bench.percentile(values, 0.99) == 99.0
    assert operator_bench.percentile([], 0.5) is None
