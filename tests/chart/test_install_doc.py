"""docs/install.md's snippets are real: the policy fragment validates, the NPD config parses."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.chart import chart_check
from tests.chart.chart_check import ROOT

DOC = ROOT / "docs" / "install.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)


def test_the_node_problem_detector_policy_fragment_validates() -> None:
    from remediation_operator.api import policy_parsing

    fragments = [b for b in blocks("yaml") if b.startswith("faults:")]
    assert len(fragments) == 1
    policy = {
        "apiVersion": "remediation.gpuops.io/v1alpha1",
        "kind": "RemediationPolicy",
        "metadata": {"name": "npd-dcgm"},
        "spec": yaml.safe_load(fragments[0]),
    }
    assert policy_parsing.validate(policy) == []


def test_the_node_problem_detector_config_is_json_naming_the_matched_condition() -> None:
    (config,) = [json.loads(b) for b in blocks("json")]
    assert config["plugin"] == "custom"
    (rule,) = config["rules"]
    assert (rule["condition"], rule["reason"]) == ("GPUProblem", "DCGMHealthFailure")
    assert 'match: [{type: GPUProblem, status: "True", reason: DCGMHealthFailure}]' in (
        DOC.read_text()
    )


def section(title: str) -> str:
    return DOC.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


SCOPES = {
    "cluster": "cluster",
    "operator namespace": "remediation-system",
    "executor namespace": "remediation-system-executors",
}


def documented_permissions() -> dict[str, set[tuple[str, str, str]]]:
    """The "Permissions" table as {scope: {(group, resource, verb)}}; `(+ list)` is a verb."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for line in section("Permissions").split("### ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] not in SCOPES:
            continue
        scope, group, resources, verbs, _ = cells
        names = re.findall(r"[a-z]+", verbs.replace("(+ list)", ", list"))
        for resource in resources.split(","):
            for verb in names:
                found.setdefault(SCOPES[scope], set()).add(
                    ("" if group == "core" else group, resource.strip(), verb)
                )
    return found


def test_the_permissions_table_is_what_the_chart_grants(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Every row of docs/install.md's table, and nothing else, is granted to the operator by
    the rendered ClusterRole and Roles (tests/rbac proves those are what it uses)."""
    granted = {scope: set(rules) for scope, rules in chart_check.rbac(rendered["default"]).items()}
    assert documented_permissions() == granted


def test_the_metrics_service_named_in_the_docs_is_the_rendered_one(
    rendered: dict[str, list[dict[str, Any]]], tools: chart_check.Tools
) -> None:
    monitoring = section("Monitoring")
    named = re.search(
        r"Service `([a-z0-9-]+)` for the release name used on\s+this page", monitoring
    )
    assert named is not None
    [service] = [d for d in rendered["default"] if d["kind"] == "Service"]
    assert named[1] == service["metadata"]["name"]
    assert chart_check.RELEASE == "remediation-operator"  # the page's release name
    assert "`<release>-remediation-operator-metrics`" in monitoring
    assert (
        "`<release>-metrics` when\nthe release name contains `remediation-operator`" in monitoring
    )
    for release, expected in (
        ("gpu", "gpu-remediation-operator-metrics"),
        ("x-remediation-operator", "x-remediation-operator-metrics"),
    ):
        result = chart_check.run_tool(
            [tools.helm, "template", release, str(chart_check.CHART), "-n", chart_check.NAMESPACE]
        )
        assert result.returncode == 0, result.stderr
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        assert [d["metadata"]["name"] for d in docs if d["kind"] == "Service"] == [expected]
