"""The benchmark harness runs end to end and measures what `make bench` reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import bench_cluster, event_path, operator_bench, real_cluster


def test_a_tiny_run_measures_floor_operator_and_drain(tmp_path: Path) -> None:
    plan = operator_bench.Plan(
        sizes=(30,),
        faults=4,
        fault_rate=20.0,
        cpu_window=1.0,
        cpu_windows=2,
        drain_pods=10,
        settle=0.5,
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
        assert len(measured["windows"]) == 2, who  # both read over the same two windows
        spread = measured["cpu_spread"]
        assert spread["min"] <= spread["median"] <= spread["max"]
        assert measured["cpu_s_per_1000_events"] == spread["median"]
        assert 20 < measured["peak_rss_mb"] < 2_000
    assert size["cpu"]["events"] > 0
    assert size["ratios"]["p50"] is not None
    assert size["ratios"]["cpu_per_event"] == size["cpu"]["ratio"]["median"]
    writes = size["operator"]["api_writes"]
    assert writes["incidents"] == 4
    # Per cordon-only fault: the cordon, the Remediation and its status, three Events on the
    # Node (not eight on Node and Remediation), and at most a share of the policy's summary.
    assert writes["by_resource"]["events"] <= 3 * 4
    assert "nodes" in writes["by_resource"]
    assert writes["per_incident"] <= 8
    drain = report["drain"]
    assert drain["emptied"] is True
    assert drain["evictions"] >= 10
    assert 0 < drain["fault_to_empty_s"] < 20
    table = operator_bench.table(report)
    assert "operator" in table
    assert "API writes per incident" in table
    assert "drain of 10 pods" in table


def test_percentiles_pick_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert operator_bench.percentile(values, 0.50) == 51.0
    assert operator_bench.percentile(values, 0.99) == 99.0
    assert operator_bench.percentile([], 0.5) is None


def test_spread_reports_min_median_max_and_their_distance() -> None:
    assert operator_bench.spread([0.30, 0.33, 0.27]) == {
        "min": 0.27,
        "median": 0.3,
        "max": 0.33,
        "spread_pct": 20.0,
    }
    assert operator_bench.spread([])["median"] is None


def test_the_servers_write_counters_are_read_by_resource() -> None:
    metrics = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="201",component="apiserver",dry_run="",group="",'
            'resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 7',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",'
            'resource="nodes",scope="cluster",subresource="status",verb="PATCH",version="v1"} 90',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",'
            'resource="nodes",scope="cluster",subresource="",verb="GET",version="v1"} 5',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="r",'
            'resource="remediations",scope="cluster",subresource="status",verb="PUT",'
            'version="v1"} 3',
        ]
    )
    assert real_cluster.parse_writes(metrics) == {
        "events": 7,
        "nodes/status": 90,
        "remediations/status": 3,
    }


def test_a_tiny_run_on_a_real_server_reports_the_same_figures(tmp_path: Path) -> None:
    """`BENCH_REAL=1`: the same harness on a real kube-apiserver (skips without binaries)."""
    from tests.e2e import control_plane

    if control_plane.assets_dir() is None and not os.environ.get("E2E_KUBECONFIG"):
        pytest.skip(control_plane.SKIP_MESSAGE)
    plan = operator_bench.Plan(
        sizes=(30,),
        faults=4,
        fault_rate=20.0,
        cpu_window=1.0,
        cpu_windows=2,
        drain_pods=10,
        settle=0.5,
    )
    report = operator_bench.run(plan, sim=False, quick=True, out=None, real=True)

    (size,) = report["real_server"]
    assert size["server"] == "kube-apiserver"
    for who in ("floor", "operator"):
        assert size[who]["latency"]["cordoned"] == 4, who
        assert len(size[who]["windows"]) == 2, who
    writes = size["operator"]["api_writes"]
    assert writes["incidents"] == 4
    assert writes["by_resource"]["events"] <= 3 * 4  # counted by the server itself
    assert writes["per_incident"] <= 8
    assert "on a real kube-apiserver" in operator_bench.table(report)


def test_the_event_path_benchmark_runs_the_real_node_path_on_the_churn() -> None:
    fleet = [bench_cluster.node(f"gpu-{i:05d}", "fleet", i) for i in range(5)]
    path = event_path.OperatorPath(fleet)
    for line in event_path.churn_lines(fleet, 6):
        body = json.loads(line)["object"]
        assert not path.cache.update(body), "the churn wakes no policy"
    stored = path.cache.body("gpu-00000")
    assert stored is not None
    assert "managedFields" not in stored["metadata"], "the cache keeps trimmed bodies"
    result = event_path.measure(nodes=5, events=4)
    assert result["floor_us"] > 0
    assert result["operator_us"] > 0
    assert result["ratio"] > 0
