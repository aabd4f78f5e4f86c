"""The chart gate with the real tools: it passes on the chart and fails on what it should catch."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import chart_check

Document = dict[str, Any]
Crds = dict[chart_check.Kind, Document]


@pytest.mark.parametrize("values", chart_check.values_files(), ids=chart_check.label)
def test_chart_lints_renders_and_validates(
    tools: chart_check.Tools, crds: Crds, values: Path | None
) -> None:
    lines = chart_check.check_values(tools, values, crds)
    assert any(line.startswith("helm lint: ok") for line in lines)
    assert any(line.startswith("kubernetes-validate --strict 1.28.0/1.37.0: ok") for line in lines)


def test_every_supported_value_set_is_checked() -> None:
    names = [chart_check.label(v) for v in chart_check.values_files()]
    assert names == [
        "default values",
        "charts/remediation-operator/ci/monitoring-policy-values.yaml",
        "charts/remediation-operator/ci/nodeagent-single-values.yaml",
        "charts/remediation-operator/ci/npd-values.yaml",
    ]


def test_an_unknown_field_fails_strict_validation(
    tools: chart_check.Tools, rendered: dict[str, list[Document]], tmp_path: Path
) -> None:
    docs = copy.deepcopy(rendered["default"])
    (deployment,) = chart_check.objects(docs, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(chart_check.CheckFailedError, match="readinesProbe"):
        chart_check.validate_builtin(tools, docs, tmp_path, "typo")


def test_a_kind_without_a_schema_fails_instead_of_warning(
    tools: chart_check.Tools, rendered: dict[str, list[Document]], tmp_path: Path
) -> None:
    docs = copy.deepcopy(rendered["default"])
    (deployment,) = chart_check.objects(docs, "Deployment")
    deployment["apiVersion"] = "apps/v2"
    with pytest.raises(chart_check.CheckFailedError, match="Couldn't find schema"):
        chart_check.validate_builtin(tools, docs, tmp_path, "bad-api-version")


def test_a_job_template_is_validated_as_a_job(
    tools: chart_check.Tools, rendered: dict[str, list[Document]], tmp_path: Path
) -> None:
    job = copy.deepcopy(chart_check.job_templates(rendered["default"])["reboot.yaml"])
    job["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(chart_check.CheckFailedError, match="hostPid"):
        chart_check.validate_builtin(
            tools, [chart_check.as_object("reboot.yaml", job)], tmp_path, "job"
        )


def test_service_monitor_is_skipped_out_loud(
    rendered: dict[str, list[Document]], crds: Crds
) -> None:
    sorted_docs = chart_check.sort_rendered(rendered["monitoring-policy-values"], crds)
    assert [kind for kind, _ in sorted_docs.skipped] == [
        ("monitoring.coreos.com/v1", "ServiceMonitor")
    ]
    assert [d["kind"] for d in sorted_docs.custom] == ["RemediationPolicy"]
    assert all(d["kind"] != "ServiceMonitor" for d in sorted_docs.builtin)


def test_the_crds_have_one_home_the_crd_chart(crds: Crds) -> None:
    """The operator chart ships no crds/ (Helm 4 would re-apply it over the CRD chart's
    objects); the CRD chart's files are the generated CRDs."""
    assert not (chart_check.CHART / "crds").exists()
    top = chart_check.crd_files(chart_check.CRDS)
    chart = chart_check.crd_files(chart_check.CRD_CHART_FILES)
    assert chart_check.differing_crds(top, chart) == [], (
        f"{chart_check.CRD_CHART_FILES} differs from crds/: run `{chart_check.REGENERATE_CRDS}`"
    )


def test_crd_drift_is_named() -> None:
    assert chart_check.differing_crds({"a.yaml": b"1", "b.yaml": b"2"}, {"a.yaml": b"1"}) == [
        "b.yaml"
    ]
    assert chart_check.differing_crds({"a.yaml": b"1"}, {"a.yaml": b"2"}) == ["a.yaml"]


def _policy(rendered: dict[str, list[Document]]) -> Document:
    (policy,) = chart_check.objects(rendered["monitoring-policy-values"], "RemediationPolicy")
    return copy.deepcopy(policy)


def _break(policy: Document, mistake: str) -> Document:
    spec = policy["spec"]
    if mistake == "unknown-action":
        spec["faults"][0]["ladder"][0]["action"] = "Explode"
    elif mistake == "unknown-field":
        spec["fautls"] = spec.pop("faults")
    elif mistake == "bad-duration":
        spec["faults"][0]["tolerate"] = "5 minutes"
    elif mistake == "bad-budget":
        spec["budgets"][0]["nodes"] = "150%"
    elif mistake == "namespaced":
        policy["metadata"]["namespace"] = "default"
    elif mistake == "wrong-kind":
        policy["kind"] = "RemediationPolice"
    return policy


MISTAKES = (
    "unknown-action",
    "unknown-field",
    "bad-duration",
    "bad-budget",
    "namespaced",
    "wrong-kind",
)


def test_policy_schema_catches_mistakes_and_accepts_nulls(
    tools: chart_check.Tools, crds: Crds, rendered: dict[str, list[Document]], tmp_path: Path
) -> None:
    kind = ("remediation.gpuops.io/v1alpha1", "RemediationPolicy")
    # A misspelt kind is looked up under its own name, with the real schema, so that the
    # schema's `kind` constant (not a missing CRD) is what rejects it.
    crds_by_kind = {**crds, ("remediation.gpuops.io/v1alpha1", "RemediationPolice"): crds[kind]}
    nulls = _policy(rendered)
    nulls["spec"]["circuitBreaker"] = None
    nulls["spec"]["actions"]["gpuReset"]["jobTemplate"] = {"spec": {"anything": ["goes"]}}
    docs = [(m, _break(_policy(rendered), m)) for m in MISTAKES] + [("nulls", nulls)]
    verdicts = {
        v.source: v for v in chart_check.validate_custom(tools, docs, crds_by_kind, tmp_path)
    }
    assert verdicts["nulls"].ok, verdicts["nulls"].errors
    assert [m for m in MISTAKES if verdicts[m].ok] == []
    assert any("Explode" in error for error in verdicts["unknown-action"].errors)
    assert any("fautls" in error for error in verdicts["unknown-field"].errors)


def test_examples_pass_and_invalid_examples_fail(tools: chart_check.Tools, crds: Crds) -> None:
    lines = chart_check.check_examples(tools, crds)
    assert lines[0].startswith("check-jsonschema examples/: ok")


def _write(path: Path, doc: Document) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))


def test_an_invalid_example_the_schema_accepts_must_be_declared(
    tools: chart_check.Tools, crds: Crds, rendered: dict[str, list[Document]], tmp_path: Path
) -> None:
    good, invalid = tmp_path / "examples", tmp_path / "examples" / "invalid"
    _write(good / "policy.yaml", _policy(rendered))
    _write(invalid / "unknown-action.yaml", _break(_policy(rendered), "unknown-action"))
    out_of_order = _policy(rendered)
    out_of_order["spec"]["faults"][0]["ladder"].reverse()
    _write(invalid / "ladder-out-of-order.yaml", out_of_order)
    with pytest.raises(chart_check.CheckFailedError, match=r"ladder-out-of-order\.yaml"):
        chart_check.check_examples(tools, crds, good, invalid, schema_blind={})
    lines = chart_check.check_examples(
        tools, crds, good, invalid, schema_blind={"ladder-out-of-order.yaml": "order is semantic"}
    )
    assert lines[1].endswith("1 rejected as they should be, 1 left to check-policy (SCHEMA_BLIND)")


def test_the_operator_turns_the_shipped_templates_into_valid_jobs(
    tools: chart_check.Tools, rendered: dict[str, list[Document]], tmp_path: Path
) -> None:
    from remediation_operator.domain.policy import Action
    from remediation_operator.k8s import executors, names

    shipped = tmp_path / "job-templates"
    shipped.mkdir()
    (config_map,) = [
        d
        for d in chart_check.objects(rendered["default"], "ConfigMap")
        if d["metadata"]["name"].endswith("-job-templates")
    ]
    for file_name, text in config_map["data"].items():
        (shipped / file_name).write_text(text)
    templates = executors.load_templates(str(shipped))
    assert set(templates) == {Action.GPUReset, Action.Reboot, Action.Validate, Action.Diagnose}
    jobs = [
        executors.job_manifest(
            template,
            namespace=chart_check.NAMESPACE,
            node="gpu-17",
            remediation="gpu-17-20261130t1102",
            action=action,
            attempt=1,
            env={"REMEDIATION_DIAG_LEVEL": "3"} if action is Action.Validate else None,
            claim="gpu-diagnostics" if action is Action.Diagnose else None,
        )
        for action, template in templates.items()
    ]
    (validate,) = [j for j in jobs if j["metadata"]["labels"][names.ACTION_LABEL] == "Validate"]
    (container,) = validate["spec"]["template"]["spec"]["containers"]
    assert {"name": "REMEDIATION_DIAG_LEVEL", "value": "3"} in container["env"]
    (diagnose,) = [j for j in jobs if j["metadata"]["labels"][names.ACTION_LABEL] == "Diagnose"]
    pod = diagnose["spec"]["template"]["spec"]
    assert {"name": "diagnostics", "persistentVolumeClaim": {"claimName": "gpu-diagnostics"}} in (
        pod["volumes"]
    )
    (container,) = pod["containers"]
    assert {"name": "diagnostics", "mountPath": "/diagnostics"} in container["volumeMounts"]
    chart_check.validate_builtin(tools, jobs, tmp_path, "operator-jobs")
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeName"] == "gpu-17"
        assert job["spec"]["ttlSecondsAfterFinished"] == 86400
