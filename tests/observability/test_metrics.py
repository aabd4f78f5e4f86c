"""The metrics the contract names, as Prometheus would scrape them."""

from __future__ import annotations

import pytest

from remediation_operator.observability.metrics import Metrics
from tests.observability import promtool


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    got = metrics.registry.get_sample_value(name, labels)
    return got


def leading() -> Metrics:
    metrics = Metrics()
    metrics.leadership(True)
    return metrics


def test_every_contract_metric_is_exposed_with_its_prefix() -> None:
    text = leading().render().decode()
    for name in (
        "gpuops_remediation_incidents",
        "gpuops_remediation_steps_started_total",
        "gpuops_remediation_steps_finished_total",
        "gpuops_remediation_step_duration_seconds",
        "gpuops_remediation_decisions_total",
        "gpuops_remediation_blocked",
        "gpuops_remediation_budget_headroom",
        "gpuops_remediation_circuit_open",
        "gpuops_remediation_nodes_quarantined",
        "gpuops_remediation_reaction_seconds",
        "gpuops_remediation_leader",
        "gpuops_remediation_policy_accepted",
        "gpuops_remediation_reconcile_total",
        "gpuops_remediation_reconcile_errors_total",
        "gpuops_remediation_reconcile_duration_seconds",
        "gpuops_remediation_queue_depth",
        "gpuops_remediation_queue_wait_seconds",
        "gpuops_remediation_api_requests_total",
        "gpuops_remediation_api_request_duration_seconds",
        "gpuops_remediation_watch_restarts_total",
    ):
        assert f"# TYPE {name} " in text, name
    assert "gpuops_remediation_remediations" not in text, "the stuttering name is gone"


def test_the_operators_own_cpu_and_memory_are_exported_and_no_created_series() -> None:
    metrics = Metrics()
    metrics.step_started("gpu", "Drain")
    metrics.reacted("gpu", 0.1)
    text = metrics.render().decode()
    assert "process_cpu_seconds_total" in text
    assert "process_resident_memory_bytes" in text
    assert "python_info" in text
    assert "_created" not in text


def test_steps_count_by_policy_action_and_outcome_and_reject_unknown_outcomes() -> None:
    metrics = Metrics()
    metrics.step_started("gpu", "Drain")
    metrics.step_started("gpu", "Drain")
    metrics.step_finished("gpu", "Drain", "PermanentFailure", "StepTimedOut", 1800.0)
    name = "gpuops_remediation_steps_started_total"
    assert value(metrics, name, policy="gpu", action="Drain") == 2
    finished = "gpuops_remediation_steps_finished_total"
    labels = {"policy": "gpu", "action": "Drain", "outcome": "PermanentFailure"}
    assert value(metrics, finished, reason="StepTimedOut", **labels) == 1
    assert value(metrics, "gpuops_remediation_step_duration_seconds_count", **labels) == 1
    with pytest.raises(ValueError, match="outcome: 'succeeded' is not one of Succeeded"):
        metrics.step_finished("gpu", "Drain", "succeeded", "Recovered", None)


def test_census_replaces_a_policys_share_per_policy() -> None:
    metrics = leading()
    metrics.policy_census("a", {("Running", "xid"): 2})
    metrics.policy_census("b", {("Running", "xid"): 1})
    name = "gpuops_remediation_incidents"
    assert value(metrics, name, policy="a", phase="Running", fault="xid") == 2
    assert value(metrics, name, policy="b", phase="Running", fault="xid") == 1
    metrics.policy_census("a", {("Succeeded", "xid"): 2})
    assert value(metrics, name, policy="a", phase="Running", fault="xid") == 0
    assert value(metrics, name, policy="a", phase="Succeeded", fault="xid") == 2


def test_blocked_reasons_that_no_longer_apply_drop_to_zero() -> None:
    metrics = leading()
    metrics.policy_blocked("gpu", {"BudgetExhausted": 2})
    metrics.policy_blocked("gpu", {"RateLimited": 1})
    name = "gpuops_remediation_blocked"
    assert value(metrics, name, policy="gpu", reason="BudgetExhausted") == 0
    assert value(metrics, name, policy="gpu", reason="RateLimited") == 1


def test_circuit_gauge_closes_groups_that_closed() -> None:
    metrics = leading()
    metrics.policy_summary("gpu", {"Drain": 3}, ["us-east-1a"])
    assert value(metrics, "gpuops_remediation_circuit_open", policy="gpu", group="us-east-1a") == 1
    metrics.policy_summary("gpu", {"Drain": 4}, [])
    assert value(metrics, "gpuops_remediation_circuit_open", policy="gpu", group="us-east-1a") == 0
    assert value(metrics, "gpuops_remediation_budget_headroom", policy="gpu", action="Drain") == 4


def test_a_deleted_policy_leaves_no_series() -> None:
    metrics = leading()
    metrics.accepted("gpu", True)
    metrics.policy_census("gpu", {("Blocked", "xid"): 1})
    metrics.policy_blocked("gpu", {"Paused": 1})
    metrics.policy_summary("gpu", {"Drain": 1}, ["a"])
    metrics.policy_forgotten("gpu")
    assert 'policy="gpu"' not in metrics.render().decode()
    metrics.policy_forgotten("never-seen")  # harmless


def test_a_standby_exports_no_fleet_gauges_and_the_leader_does() -> None:
    metrics = Metrics()
    metrics.accepted("gpu", True)
    metrics.quarantined(3)
    metrics.queues(lambda: {"gpu": 4})
    assert value(metrics, "gpuops_remediation_policy_accepted", policy="gpu") is None
    assert value(metrics, "gpuops_remediation_nodes_quarantined") is None
    assert value(metrics, "gpuops_remediation_leader") == 0
    metrics.leadership(True)
    assert value(metrics, "gpuops_remediation_policy_accepted", policy="gpu") == 1
    assert value(metrics, "gpuops_remediation_nodes_quarantined") == 3
    assert value(metrics, "gpuops_remediation_queue_depth", policy="gpu") == 4
    metrics.leadership(False)
    assert value(metrics, "gpuops_remediation_nodes_quarantined") is None


def test_step_durations_and_reaction_times_are_histograms_per_policy() -> None:
    metrics = Metrics()
    metrics.step_finished("gpu", "GPUReset", "Succeeded", "StepSucceeded", 95.0)
    metrics.reacted("gpu", 0.02)
    name = "gpuops_remediation_step_duration_seconds_bucket"
    labels = {"policy": "gpu", "action": "GPUReset", "outcome": "Succeeded"}
    assert value(metrics, name, le="60.0", **labels) == 0
    assert value(metrics, name, le="120.0", **labels) == 1
    reaction = "gpuops_remediation_reaction_seconds_bucket"
    assert value(metrics, reaction, policy="gpu", le="0.025") == 1


def test_reconcile_rounds_errors_and_queue_wait() -> None:
    metrics = Metrics()
    metrics.reconciled("gpu", 0.2, failed=False, waited=0.01)
    metrics.reconciled("gpu", 0.3, failed=True)
    assert value(metrics, "gpuops_remediation_reconcile_total", policy="gpu") == 2
    assert value(metrics, "gpuops_remediation_reconcile_errors_total", policy="gpu") == 1
    assert value(metrics, "gpuops_remediation_queue_wait_seconds_count", policy="gpu") == 1
    duration = "gpuops_remediation_reconcile_duration_seconds_sum"
    assert value(metrics, duration, policy="gpu") == pytest.approx(0.5)


def test_api_requests_by_verb_and_code_and_watch_restarts_by_resource() -> None:
    metrics = Metrics()
    metrics.api_request("PATCH", "/api/v1/nodes/n1", 409, 0.01)
    metrics.api_request("GET", "/api/v1/nodes/n1", 0, 30.0)
    metrics.api_request("WATCH", "/api/v1/nodes", 200, 0.01)
    metrics.api_request("WATCH", "/api/v1/pods?fieldSelector=spec.nodeName=n1", 200, 0.01)
    metrics.api_request("WATCH", "/api/v1/nodes", 200, 0.01)
    requests = "gpuops_remediation_api_requests_total"
    assert value(metrics, requests, verb="PATCH", code="409") == 1
    assert value(metrics, requests, verb="GET", code="<error>") == 1
    assert value(metrics, requests, verb="WATCH", code="200") == 3
    restarts = "gpuops_remediation_watch_restarts_total"
    assert value(metrics, restarts, resource="nodes") == 1
    assert value(metrics, restarts, resource="pods") is None


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


def test_promtool_accepts_every_family_with_every_label_in_use() -> None:
    tool = promtool.find()
    if tool is None:
        pytest.skip(f"promtool not installed: {promtool.INSTALL}")
    metrics = leading()
    metrics.step_started("gpu", "Drain")
    metrics.step_finished("gpu", "Drain", "Succeeded", "StepSucceeded", 3.0)
    metrics.decision("gpu", "BudgetExhausted")
    metrics.reacted("gpu", 0.1)
    metrics.reconciled("gpu", 0.1, failed=True, waited=0.0)
    metrics.api_request("WATCH", "/api/v1/nodes", 200, 0.1)
    metrics.policy_census("gpu", {("Running", "xid"): 1})
    metrics.policy_blocked("gpu", {"Paused": 1})
    metrics.policy_summary("gpu", {"Drain": 1}, ["zone-a"])
    metrics.accepted("gpu", True)
    metrics.background_writes(lambda: 0, dict, lambda: 0)
    code, output = promtool.run(tool, ["check", "metrics"], stdin=metrics.render().decode())
    assert code == 0, output
    assert not output.strip(), output
