"""The chart's alerts: rendered where the Prometheus Operator's API exists, each one unit-tested
with `promtool test rules`, each with a runbook section in docs/operations.md, and every
series they (and the Grafana dashboard) use is one the operator exports.

Real: helm, the chart, promtool (Debian package `prometheus`; the tests that need it skip
with the install command where it is absent), the operator's own `Metrics` exposition.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_operator.observability.metrics import Metrics
from tests.chart import chart_check
from tests.observability import promtool

PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
UNIT_TESTS = Path(__file__).parent / "alerts" / "alerts-test.yaml"
OPERATIONS = chart_check.ROOT / "docs" / "operations.md"
Document = dict[str, Any]


def rule_groups(tools: chart_check.Tools, *overrides: str) -> list[Document]:
    """The rendered rule groups; with a ServiceMonitor, so that every alert is there."""
    overrides = ("serviceMonitor.enabled=true", *overrides)
    docs = chart_check.render(tools, None, overrides, api_versions=(PROMETHEUS_RULE_API,))
    [rule] = chart_check.objects(docs, "PrometheusRule")
    groups: list[Document] = rule["spec"]["groups"]
    return groups


def alerts(groups: list[Document]) -> dict[str, Document]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def need_promtool() -> str:
    tool = promtool.find()
    if tool is None:
        pytest.skip(f"promtool not installed: {promtool.INSTALL}")
    return tool


def test_the_rule_renders_only_where_the_prometheus_operator_api_exists(
    tools: chart_check.Tools,
) -> None:
    assert not chart_check.objects(chart_check.render(tools), "PrometheusRule")
    assert len(alerts(rule_groups(tools))) == 12
    unscraped = chart_check.render(tools, api_versions=(PROMETHEUS_RULE_API,))
    [rule] = chart_check.objects(unscraped, "PrometheusRule")
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "RemediationOperatorAbsent" not in names, "would page where nothing scrapes it"
    off = chart_check.render(
        tools, None, ["prometheusRule.enabled=false"], api_versions=(PROMETHEUS_RULE_API,)
    )
    assert not chart_check.objects(off, "PrometheusRule")


def test_promtool_checks_the_rules_and_every_alert_passes_its_unit_test(
    tools: chart_check.Tools, tmp_path: Path
) -> None:
    tool = need_promtool()
    groups = rule_groups(tools)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    code, output = promtool.run(tool, ["check", "rules", str(tmp_path / "rules.yaml")])
    assert code == 0, output
    code, output = promtool.run(tool, ["test", "rules", str(tmp_path / UNIT_TESTS.name)])
    assert code == 0, output
    tested = {
        case["alertname"]
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert set(alerts(groups)) <= tested, "an alert has no promtool case that fires it"


def test_every_alert_links_to_its_runbook_section(tools: chart_check.Tools) -> None:
    text = OPERATIONS.read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in text.splitlines()
        if line.startswith("### ")
    }
    for name, rule in alerts(rule_groups(tools)).items():
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor == name.lower()
        assert anchor in headings, f"docs/operations.md has no '### {name}' runbook section"


def test_alerts_and_dashboard_use_only_series_the_operator_exports(
    tools: chart_check.Tools,
) -> None:
    metrics = Metrics()
    metrics.leadership(True)
    metrics.background_writes(lambda: 0, dict, lambda: 0)
    exported = {m.name for m in metrics.registry.collect()}
    exported |= {f"{name}_total" for name in exported}
    exprs = [r["expr"] for r in alerts(rule_groups(tools)).values()]
    dashboard = chart_check.CHART / "dashboards" / "remediation-operator.json"
    panels = json.loads(dashboard.read_text())["panels"]
    exprs += [t["expr"] for panel in panels for t in panel["targets"]]
    used = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for expr in exprs
        for name in re.findall(r"gpuops_remediation_[a-z_]+", expr)
    }
    assert used
    assert used <= exported, used - exported
