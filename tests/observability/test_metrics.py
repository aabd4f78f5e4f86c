"""The metrics the contract names, as Prometheus would scrape them."""

from __future__ import annotations

import pytest

from remediation_operator.observability.metrics import Metrics


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    got = metrics.registry.get_sample_value(name, labels)
    return got


def test_every_contract_metric_is_exposed_with_its_prefix() -> None:
    text = Metrics().render().decode()
    for name in (
        "gpuops_remediation_remediations",
        "gpuops_remediation_actions_total",
        "gpuops_remediation_step_duration_seconds",
        "gpuops_remediation_decisions_total",
        "gpuops_remediation_blocked",
        "gpuops_remediation_budget_headroom",
        "gpuops_remediation_circuit_open",
        "gpuops_remediation_nodes_quarantined",
        "gpuops_remediation_reaction_seconds",
        "gpuops_remediation_leader",
        "gpuops_remediation_policy_accepted",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name


def test_actions_count_by_result_and_reject_unknown_results() -> None:
    metrics = Metrics()
    metrics.action("Drain", "started")
    metrics.action("Drain", "started")
    metrics.action("Drain", "timed_out")
    assert value(metrics, "gpuops_remediation_actions_total", action="Drain", result="started") == 2
    with pytest.raises(ValueError, match="result: 'ok' is not one of"):
        metrics.action("Drain", "ok")


def test_census_replaces_a_policys_share_and_sums_across_policies() -> None:
    metrics = Metrics()
    metrics.policy_census("a", {("Running", "xid"): 2})
    metrics.policy_census("b", {("Running", "xid"): 1})
    name = "gpuops_remediation_remediations"
    assert value(metrics, name, phase="Running", fault="xid") == 3
    metrics.policy_census("a", {("Succeeded", "xid"): 2})
    assert value(metrics, name, phase="Running", fault="xid") == 1
    assert value(metrics, name, phase="Succeeded", fault="xid") == 2


def test_blocked_reasons_that_no_longer_apply_drop_to_zero() -> None:
    metrics = Metrics()
    metrics.policy_blocked("gpu", {"BudgetExhausted": 2})
    metrics.policy_blocked("gpu", {"RateLimited": 1})
    name = "gpuops_remediation_blocked"
    assert value(metrics, name, policy="gpu", reason="BudgetExhausted") == 0
    assert value(metrics, name, policy="gpu", reason="RateLimited") == 1


def test_circuit_gauge_closes_groups_that_closed() -> None:
    metrics = Metrics()
    metrics.policy_summary("gpu", {"Drain": 3}, ["us-east-1a"])
    assert value(metrics, "gpuops_remediation_circuit_open", policy="gpu", group="us-east-1a") == 1
    metrics.policy_summary("gpu", {"Drain": 4}, [])
    assert value(metrics, "gpuops_remediation_circuit_open", policy="gpu", group="us-east-1a") == 0
    assert value(metrics, "gpuops_remediation_budget_headroom", policy="gpu", action="Drain") == 4


def test_a_deleted_policy_leaves_no_live_gauges() -> None:
    metrics = Metrics()
    metrics.accepted("gpu", True)
    metrics.policy_census("gpu", {("Blocked", "xid"): 1})
    metrics.policy_blocked("gpu", {"Paused": 1})
    metrics.policy_forgotten("gpu")
    assert value(metrics, "gpuops_remediation_policy_accepted", policy="gpu") == 0
    assert value(metrics, "gpuops_remediation_remediations", phase="Blocked", fault="xid") == 0
    assert value(metrics, "gpuops_remediation_blocked", policy="gpu", reason="Paused") == 0


def test_step_durations_and_reaction_times_are_histograms() -> None:
    metrics = Metrics()
    metrics.step_finished("GPUReset", "Succeeded", 95.0)
    metrics.reacted(0.02)
    name = "gpuops_remediation_step_duration_seconds_bucket"
    assert value(metrics, name, action="GPUReset", outcome="Succeeded", le="60.0") == 0
    assert value(metrics, name, action="GPUReset", outcome="Succeeded", le="120.0") == 1
    assert value(metrics, "gpuops_remediation_reaction_seconds_bucket", le="0.025") == 1


def test_two_metrics_objects_do_not_share_numbers() -> None:
    one, two = Metrics(), Metrics()
    one.leadership(True)
    assert value(one, "gpuops_remediation_leader") == 1
    assert value(two, "gpuops_remediation_leader") == 0


def test_background_writers_are_read_when_scraped() -> None:
    metrics = Metrics()
    queue = {"queued": 3, "queue_full": 0, "refused": 1, "pending": 2}
    metrics.background_writes(
        events_queued=lambda: queue["queued"],
        events_lost=lambda: {"queue_full": queue["queue_full"], "refused": queue["refused"]},
        status_pending=lambda: queue["pending"],
    )
    assert value(metrics, "gpuops_remediation_events_queued") == 3
    assert value(metrics, "gpuops_remediation_policy_status_writes_pending") == 2
    assert value(metrics, "gpuops_remediation_events_lost_total", why="refused") == 1

    queue.update(queued=0, queue_full=7, pending=0)

    assert value(metrics, "gpuops_remediation_events_queued") == 0
    assert value(metrics, "gpuops_remediation_events_lost_total", why="queue_full") == 7
    text = metrics.render().decode()
    assert "# TYPE gpuops_remediation_events_lost_total counter" in text
