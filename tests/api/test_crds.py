"""The committed CRDs and field reference match the models, and the schemas are structural."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from remediation_operator import cli
from remediation_operator.api import crds, reference_docs, resources
from remediation_operator.domain import actions, running
from remediation_operator.domain.remediation import APPROVE_ANNOTATION, RemediationState
from tests.api.conftest import GOOD_EXAMPLES, INVALID_EXAMPLES, REPO, load

CRD_DIR = REPO / "crds"
DOCS = REPO / "docs" / "policy.md"
JUNCTORS = ("anyOf", "oneOf", "allOf", "not")


def crd(resource: resources.Resource) -> dict[str, Any]:
    loaded: dict[str, Any] = load(CRD_DIR / f"{resource.crd_name}.yaml")
    return loaded


def root_schema(resource: resources.Resource) -> dict[str, Any]:
    schema: dict[str, Any] = crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crds_match_the_models() -> None:
    for name, content in crds.files().items():
        committed = (CRD_DIR / name).read_text(encoding="utf-8")
        assert committed == content, f"crds/{name} is stale; run `make crds`"
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted(crds.files())


def test_committed_field_reference_matches_the_models() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert reference_docs.update(text) == text, "docs/policy.md is stale; run `make crds`"


def test_crds_check_flags_drift_with_a_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "crds", tmp_path / "charts" / "crds"
    assert cli.main(["crds", "--out", str(first), "--out", str(second)]) == 0
    for name in crds.files():
        assert (first / name).read_text() == (second / name).read_text()
    assert cli.main(["crds", "--out", str(first), "--out", str(second), "--check"]) == 0

    stale = first / resources.REMEDIATION.crd_name
    stale = stale.with_name(stale.name + ".yaml")
    stale.write_text(stale.read_text().replace("name: Attempt", "name: Try"))
    capsys.readouterr()
    assert cli.main(["crds", "--out", str(first), "--check"]) == 1
    out = capsys.readouterr()
    assert "-    - name: Try" in out.out
    assert "+    - name: Attempt" in out.out
    assert "differ from the models" in out.err
    assert "name: Try" in stale.read_text()  # --check writes nothing


def test_docs_need_their_markers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "policy.md"
    doc.write_text("# no markers\n")
    assert cli.main(["crds", "--docs", str(doc)]) == 2
    assert "must contain the lines" in capsys.readouterr().err
    doc.write_text(f"# intro\n\n{reference_docs.BEGIN}\nSTALE LINE\n{reference_docs.END}\n")
    assert cli.main(["crds", "--docs", str(doc), "--check"]) == 1
    assert cli.main(["crds", "--docs", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# intro\n\n")
    assert "| `spec.faults[].ladder[].action` | enum |" in text
    assert "STALE LINE" not in text


def test_resource_names_short_names_scope_and_status_subresource() -> None:
    for resource, short in ((resources.REMEDIATION_POLICY, "rpol"), (resources.REMEDIATION, "rem")):
        spec = crd(resource)["spec"]
        assert spec["group"] == "remediation.gpuops.io"
        assert spec["scope"] == "Cluster"
        assert spec["names"]["shortNames"] == [short]
        assert spec["names"]["categories"] == ["gpuops"]
        (version,) = spec["versions"]
        assert version["name"] == "v1alpha1"
        assert version["served"]
        assert version["storage"]
        assert version["subresources"] == {"status": {}}


def columns(resource: resources.Resource) -> list[tuple[str, str]]:
    version = crd(resource)["spec"]["versions"][0]
    return [
        (c["name"].upper(), c["jsonPath"])
        for c in version["additionalPrinterColumns"]
        if not c.get("priority")
    ]


def test_printer_columns_answer_what_is_happening() -> None:
    assert columns(resources.REMEDIATION) == [
        ("NODE", ".spec.nodeName"),
        ("FAULT", ".status.fault"),
        ("STEP", ".status.step"),
        ("PHASE", ".status.phase"),
        ("ATTEMPT", ".status.attempt"),
        ("REASON", ".status.reason"),
        ("AGE", ".metadata.creationTimestamp"),
    ]
    assert columns(resources.REMEDIATION_POLICY) == [
        ("MODE", ".status.mode"),
        ("NODES", ".status.observed"),
        ("UNHEALTHY", ".status.unhealthy"),
        ("IN-FLIGHT", ".status.inFlight"),
        ("CIRCUIT", ".status.circuitState"),
        ("PAUSED", ".status.paused"),
        ("AGE", ".metadata.creationTimestamp"),
    ]


def test_printer_columns_point_at_fields_of_the_schema() -> None:
    for resource in (resources.REMEDIATION, resources.REMEDIATION_POLICY):
        schema = root_schema(resource)
        for name, path in columns(resource):
            if path.startswith(".metadata"):
                continue
            node = schema
            for part in path.strip(".").split("."):
                node = node["properties"][part]
            assert "type" in node, name


def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("resource", [resources.REMEDIATION_POLICY, resources.REMEDIATION])
def test_schemas_are_structural(resource: resources.Resource) -> None:
    """The rules of apiextensions' structural schemas, checked node by node."""
    for path, node in walk(root_schema(resource), "root"):
        assert "$ref" not in node, path
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
        assert node.get("type") or int_or_string or preserve, f"{path} has no type"
        if int_or_string:
            assert "type" not in node, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        for junctor in JUNCTORS:
            if junctor in node and not int_or_string:
                pytest.fail(f"{path} uses {junctor}")
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties") is not False, path
        if node.get("type") == "array":
            assert "items" in node, path
        assert "title" not in node, path
        if node.get("nullable") and "enum" in node:
            assert None in node["enum"], f"{path}: the server checks enum on null values too"
        assert "default" not in node, path  # defaults are the operator's, not the server's


@pytest.mark.parametrize("resource", [resources.REMEDIATION_POLICY, resources.REMEDIATION])
def test_every_field_is_described(resource: resources.Resource) -> None:
    schema = root_schema(resource)
    for part in ("spec", "status"):
        for path, node in walk(schema["properties"][part], part):
            for name, field in node.get("properties", {}).items():
                assert field.get("description"), f"{path}.{name} has no description"


def test_remediation_status_mirrors_the_domain_state_field_for_field() -> None:
    status = root_schema(resources.REMEDIATION)["properties"]["status"]["properties"]
    identity = {"name", "node", "policy"}  # metadata.name and spec
    wanted = {f.name for f in dataclasses.fields(RemediationState)} - identity
    camel = {
        "".join(w.capitalize() if i else w for i, w in enumerate(name.split("_")))
        for name in wanted
    }
    camel = {"bootIDAtStepStart" if c == "bootIdAtStepStart" else c for c in camel}
    derived = {"conditions"}  # Ready/Reconciling/Stalled, computed from the phase
    assert set(status) - derived == camel


def as_json_schema(node: Any) -> Any:
    """Structural OpenAPI -> JSON Schema: `nullable` becomes a null type option."""
    if isinstance(node, list):
        return [as_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def policy_validator() -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(as_json_schema(root_schema(resources.REMEDIATION_POLICY)))


@pytest.mark.parametrize("path", GOOD_EXAMPLES, ids=lambda p: p.name)
def test_good_examples_pass_the_crd_schema(path: Path) -> None:
    errors = [e.message for e in policy_validator().iter_errors(load(path))]
    assert errors == []


@pytest.mark.parametrize(
    "name",
    [
        "bad-duration",
        "unknown-action",
        "bad-budget",
        "bad-fault-name",
        "rate-zero",
        "bad-breaker",
        "weight-too-high",
    ],
)
def test_the_crd_schema_itself_rejects_what_a_schema_can_say(name: str) -> None:
    """The API server refuses these before the operator sees them."""
    path = next(p for p in INVALID_EXAMPLES if p.stem == name)
    assert list(policy_validator().iter_errors(load(path)))


def _described(path: str) -> str:
    row = next(line for line in reference_docs.render().splitlines() if f"| `{path}` |" in line)
    return row.split(" | ")[3]


def test_the_reference_says_what_the_planner_does() -> None:
    """Issue 12: docs/policy.md (generated from these descriptions) disagreed with behaviour."""
    history = _described("spec.history.maxEpisodes")
    assert "reached Drain or a later step in Enforce mode" in history
    assert "cordon-only" in history
    assert "DryRun" in history
    assert "`tolerate`" in history
    fail = _described("spec.faults[].onExhausted")
    assert "clears and comes back" in fail
    assert "`recovery.healthyFor`" in fail
    assert "is deleted" in fail
    assert "is not a clearing" in _described("spec.faults[].tolerate")
    wait = _described("spec.faults[].ladder[].onPDBBlocked")
    assert "phase Blocked with reason DrainBlockedByPDB" in wait
    assert f"every {actions.EVICTION_RETRY.seconds} s" in wait
    assert f"every {running.PDB_REANNOUNCE.seconds // 60} minutes" in wait
    approval = _described("spec.requireApproval")
    assert f"kubectl annotate remediation <name> {APPROVE_ANNOTATION}=Replace" in approval
