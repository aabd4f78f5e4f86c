"""The chart gate: the Helm chart and the example policies checked with the real tools.

Users install with Helm and apply our example policies, so CI checks what they would get:
`helm lint`, `helm template` for the default values and every file in the chart's `ci/`,
`kubernetes-validate --strict` on every rendered built-in object (and on the executor Job
templates inside the ConfigMap) for the oldest and newest Kubernetes the chart supports, and
`check-jsonschema` of rendered and example custom resources against a JSON Schema made from our
own CRDs (tests/chart/crd_schema.py). `make chart-check` runs
`python -m tests.chart.chart_check`; the pytest tests next to this module call the same
functions and assert on the rendered content.

kubernetes-validate only *warns* about a kind it has no schema for, which would let a typo in
an apiVersion pass. So every rendered document is sorted first: built-in kinds go to
kubernetes-validate (and any "Couldn't find schema" in its output fails the check), our kinds
go to check-jsonschema, and the kinds in SKIPPED_KINDS are skipped out loud, with the reason.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.chart import crd_schema

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "remediation-operator"
CRD_CHART = ROOT / "charts" / "remediation-operator-crd"
CRD_CHART_FILES = CRD_CHART / "files"
KEEP = "helm.sh/resource-policy"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
"""Passed to `helm template --api-versions` by the gate, as a cluster with the Prometheus
Operator would report it, so the PrometheusRule is rendered and checked too."""
VALIDATING_ADMISSION_POLICY_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
"""Passed too, as a Kubernetes 1.30+ API server reports it: the approver policy is rendered
only where the server has it (approver-policy.yaml)."""
SINCE: Mapping[tuple[str, str], str] = {
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30.0",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30.0",
}
"""Kinds newer than the chart's kubeVersion floor (rendered only where the API exists): each is
validated against the supported versions from the one it appeared in."""
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"
INVALID_EXAMPLES = EXAMPLES / "invalid"

REGENERATE_CRDS = "remediation-operator crds --out crds --out charts/remediation-operator-crd/files"
RELEASE = "remediation-operator"
NAMESPACE = "remediation-system"
KUBERNETES_VERSIONS = ("1.28.0", "1.37.0")
"""The chart's kubeVersion floor and the newest schema kubernetes-validate 1.37 bundles."""

SKIPPED_KINDS: Mapping[tuple[str, str], str] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        "kubernetes-validate bundles no schema for it and the Prometheus Operator CRDs are not"
        " vendored here; tests/chart asserts its selector and port instead"
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): (
        "no schema bundled either; tests/chart/test_alerts.py runs `promtool check rules` and"
        " `promtool test rules` on its groups instead"
    ),
}

SCHEMA_BLIND: Mapping[str, str] = {
    # Offline, check-jsonschema reads the schema but not its CEL rules (x-kubernetes-validations)
    # or list types; the real API server enforces those (tests/e2e/test_policy_api.py).
    "backwards-cron-range.yaml": "no schema can compare two numbers of a cron range",
    "bad-cron.yaml": "the cron pattern is a CEL rule (for a readable message)",
    "bad-regex.yaml": "pattern compilation is a CEL rule (matches())",
    "bad-selector.yaml": "values-required-for-In/NotIn is a CEL rule",
    "cordon-approval.yaml": "no-Cordon-in-requireApproval is a CEL rule",
    "duplicate-fault-name.yaml": (
        "unique names need x-kubernetes-list-type: map, which JSON Schema does not read"
    ),
    "force-on-reboot.yaml": "Force-only-on-Drain is a CEL rule",
    "ladder-out-of-order.yaml": "ladder order is a CEL rule over the whole list",
    "match-type-only.yaml": "a match needing status, reason or staleAfter is a CEL rule",
    "missing-on-exhausted.yaml": "onExhausted-unless-Replace is a CEL rule",
    "overflowing-duration.yaml": "the 8760h bound is a CEL rule (duration())",
    "pdb-blocked-on-reboot.yaml": "onPDBBlocked-only-on-Drain is a CEL rule",
    "regex-backreference.yaml": "pattern compilation is a CEL rule (matches())",
    "schedule-without-duration.yaml": "schedule-needs-duration is a CEL rule",
    "step-timeout-zero.yaml": "a step timeout longer than 0s is a CEL rule (duration())",
    "when-missing-without-stale-after.yaml": "whenMissing-needs-staleAfter is a CEL rule",
}
"""examples/invalid/ files whose mistake our CRD schema does not see, and why; every other
invalid example must fail check-jsonschema. `remediation-operator check-policy` catches all."""

Document = dict[str, Any]
Kind = tuple[str, str]


class CheckFailedError(Exception):
    """A check found a problem; the message says which check, which file and what."""


class ToolMissingError(CheckFailedError):
    """A tool the checks need is not installed; the message says how to install it."""


@dataclass(frozen=True)
class Tools:
    helm: str
    kubernetes_validate: str
    check_jsonschema: str

    @classmethod
    def find(cls) -> Tools:
        """Locate the tools in this virtualenv's bin/ first, then on PATH."""
        bin_dir = Path(sys.executable).parent
        found: dict[str, str] = {}
        missing: list[str] = []
        hints = {
            "helm": "python scripts/install_helm.py",
            "kubernetes-validate": "pip install kubernetes-validate==1.37.0",
            "check-jsonschema": "pip install check-jsonschema==0.39.0",
        }
        for name, hint in hints.items():
            local = bin_dir / name
            path = str(local) if local.is_file() else shutil.which(name)
            if path is None:
                missing.append(f"{name} (install: {hint})")
            else:
                found[name] = path
        if missing:
            raise ToolMissingError("not installed: " + "; ".join(missing))
        return cls(found["helm"], found["kubernetes-validate"], found["check-jsonschema"])


def run_tool(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=False)


def _values_args(values: Path | None, overrides: Sequence[str]) -> list[str]:
    args = ["--values", str(values)] if values is not None else []
    for override in overrides:
        args += ["--set", override]
    return args


def values_files() -> list[Path | None]:
    """None (the chart's defaults) and every values file under the chart's ci/."""
    return [None, *sorted((CHART / "ci").glob("*.yaml"))]


def label(values: Path | None) -> str:
    return "default values" if values is None else str(values.relative_to(ROOT))


def helm_lint(tools: Tools, values: Path | None = None) -> None:
    result = run_tool([tools.helm, "lint", "--strict", str(CHART), *_values_args(values, ())])
    if result.returncode != 0:
        raise CheckFailedError(f"helm lint ({label(values)}):\n{result.stdout}{result.stderr}")


def template(
    tools: Tools,
    values: Path | None = None,
    overrides: Sequence[str] = (),
    api_versions: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`helm template` as a user would run it; the caller decides what a failure means.

    `api_versions`: APIs the pretended cluster serves (`.Capabilities.APIVersions.Has`)."""
    return run_tool(
        [
            tools.helm,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            *_values_args(values, overrides),
            *(arg for api in api_versions for arg in ("--api-versions", api)),
        ]
    )


def render(
    tools: Tools,
    values: Path | None = None,
    overrides: Sequence[str] = (),
    api_versions: Sequence[str] = (),
) -> list[Document]:
    """The rendered objects (CRDs under crds/ are not rendered by `helm template`)."""
    result = template(tools, values, overrides, api_versions)
    if result.returncode != 0:
        raise CheckFailedError(f"helm template ({label(values)}) failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def kind_of(doc: Mapping[str, Any]) -> Kind:
    return (str(doc.get("apiVersion", "")), str(doc.get("kind", "")))


def objects(docs: Iterable[Document], kind: str) -> list[Document]:
    """The rendered objects of one kind, in render order."""
    return [doc for doc in docs if doc.get("kind") == kind]


Rule = tuple[str, str, str]
"""(apiGroup, resource[/subresource], verb), the unit an RBAC audit compares."""


def granted(role: Mapping[str, Any]) -> frozenset[Rule]:
    """Every (group, resource, verb) a rendered Role or ClusterRole grants."""
    return frozenset(
        (group, resource, verb)
        for rule in role.get("rules", [])
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    )


def rbac(docs: Iterable[Document]) -> dict[str, frozenset[Rule]]:
    """The chart's grants: {"cluster": ClusterRole rules, <namespace>: that Role's rules}.

    For the RBAC-proof test against the emulator's request log: render the chart
    (`render(Tools.find())`) and compare what the operator used with these sets.

    Roles no binding of the chart refers to (the view/edit/approver ClusterRoles for people)
    grant the operator nothing and are left out.
    """
    docs = list(docs)
    bound = {
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in docs
        if d.get("kind") in ("ClusterRoleBinding", "RoleBinding")
    }
    found: dict[str, frozenset[Rule]] = {"cluster": frozenset()}
    for doc in docs:
        if (doc.get("kind"), doc.get("metadata", {}).get("name")) not in bound:
            continue
        if doc.get("kind") == "ClusterRole":
            found["cluster"] |= granted(doc)
        elif doc.get("kind") == "Role":
            namespace = str(doc["metadata"]["namespace"])
            found[namespace] = found.get(namespace, frozenset()) | granted(doc)
    return found


def job_templates(docs: Iterable[Document]) -> dict[str, Document]:
    """The executor Job manifests shipped in the chart's job-templates ConfigMap, by file."""
    for doc in docs:
        if kind_of(doc) == ("v1", "ConfigMap") and doc["metadata"]["name"].endswith(
            "-job-templates"
        ):
            return {name: yaml.safe_load(text) for name, text in doc.get("data", {}).items()}
    return {}


def as_object(file_name: str, job: Document) -> Document:
    """A Job template with the name the operator would give it, so it validates as an object.

    The templates carry no name on purpose: the operator derives it from the Remediation.
    """
    metadata = {"name": f"template-{Path(file_name).stem}", **job.get("metadata", {})}
    return {**job, "metadata": metadata}


# --- built-in kinds ------------------------------------------------------------------------


def validate_builtin(tools: Tools, docs: Sequence[Document], workdir: Path, name: str) -> str:
    """kubernetes-validate --strict for every supported Kubernetes version; returns its report.

    Fails on any invalid object and on any object it has no schema for.
    """

    def since(doc: Document) -> str:
        return SINCE.get((doc.get("apiVersion", ""), doc.get("kind", "")), KUBERNETES_VERSIONS[0])

    def release(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    reports = []
    for floor in sorted({since(doc) for doc in docs}, key=release):
        group = [doc for doc in docs if since(doc) == floor]
        path = workdir / f"{name}-{floor}.yaml"
        path.write_text(yaml.safe_dump_all(group, sort_keys=False))
        versions = [
            arg
            for version in KUBERNETES_VERSIONS
            if release(version) >= release(floor)
            for arg in ("-k", version)
        ]
        result = run_tool([tools.kubernetes_validate, "--strict", *versions, str(path)])
        report = result.stdout + result.stderr
        if result.returncode != 0 or "Couldn't find schema" in report:
            raise CheckFailedError(f"kubernetes-validate --strict ({name}):\n{report}")
        reports.append(report)
    return "".join(reports)


# --- our kinds -------------------------------------------------------------------------------


def crd_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.yaml"))}


def differing_crds(top: Mapping[str, bytes], chart: Mapping[str, bytes]) -> list[str]:
    """File names present in only one of the two CRD sets, or with different bytes."""
    return sorted(name for name in set(top) | set(chart) if top.get(name) != chart.get(name))


def sync_chart_crds() -> str:
    """Check that the CRD chart's files/ equals the top-level crds/ (the generator writes
    both), and that the operator chart has no crds/ of its own: the CRDs have one home, the
    CRD chart (Helm 4 re-applies a chart's crds/ over existing CRDs, dropping the CRD
    chart's labels and `keep`, and an older copy would downgrade the schema; D44)."""
    top = crd_files(CRDS)
    if not top:
        raise CheckFailedError("crds/ holds no CRDs: run `make crds` (remediation-operator crds)")
    if (CHART / "crds").exists():
        raise CheckFailedError(
            f"{(CHART / 'crds').relative_to(ROOT)}/ exists: the CRDs belong to the"
            f" {CRD_CHART.name} chart only; delete it"
        )
    differing = differing_crds(top, crd_files(CRD_CHART_FILES))
    if differing:
        raise CheckFailedError(
            f"{CRD_CHART_FILES.relative_to(ROOT)}/ differs from crds/ in {', '.join(differing)}:"
            f" run `{REGENERATE_CRDS}`"
        )
    return f"{CRD_CHART_FILES.relative_to(ROOT)}/ equals crds/ ({len(top)} CRDs)"


def check_values_schema() -> str:
    """values.schema.json's defaultPolicy.spec is the schema the policy models generate."""
    from tests.chart import values_schema  # imports this module: import at call time

    current = json.loads(values_schema.SCHEMA.read_text())
    if values_schema.render(values_schema.expected(current)) != values_schema.SCHEMA.read_text():
        raise CheckFailedError(
            f"{values_schema.SCHEMA.relative_to(ROOT)}: defaultPolicy.spec is stale: run"
            f" `{values_schema.COMMAND}`"
        )
    return "values.schema.json: defaultPolicy.spec matches the policy models"


def render_crd_chart(tools: Tools) -> list[Document]:
    """The CRD chart's rendered CustomResourceDefinitions."""
    result = run_tool([tools.helm, "template", "remediation-operator-crd", str(CRD_CHART)])
    if result.returncode != 0:
        raise CheckFailedError(f"helm template {CRD_CHART.name} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def check_crd_chart(tools: Tools) -> str:
    """The CRD chart lints, and renders exactly crds/ (a YAML round trip through Helm must not
    change a number or a string), each CRD kept on uninstall."""
    lint = run_tool([tools.helm, "lint", "--strict", str(CRD_CHART)])
    if lint.returncode != 0:
        raise CheckFailedError(f"helm lint {CRD_CHART.name}:\n{lint.stdout}{lint.stderr}")
    rendered = {d["metadata"]["name"]: d for d in render_crd_chart(tools)}
    expected = {
        crd["metadata"]["name"]: crd
        for crd in (yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml")))
    }
    if set(rendered) != set(expected):
        raise CheckFailedError(
            f"{CRD_CHART.name} renders {sorted(rendered)}, crds/ holds {sorted(expected)}"
        )
    for name, crd in rendered.items():
        metadata = crd["metadata"]
        if metadata.get("annotations", {}).get(KEEP) != "keep":
            raise CheckFailedError(f"{CRD_CHART.name}: {name} lacks the {KEEP}: keep annotation")
        if {k: v for k, v in crd.items() if k != "metadata"} != {
            k: v for k, v in expected[name].items() if k != "metadata"
        }:
            raise CheckFailedError(f"{CRD_CHART.name}: {name} renders differently from crds/")
    return f"{CRD_CHART.name}: lints and renders crds/ ({len(rendered)} CRDs, {KEEP}: keep)"


def load_crds(directory: Path = CRDS) -> dict[Kind, Document]:
    """Our CRDs by (apiVersion, kind) of the resources they define (served versions)."""
    crds: dict[Kind, Document] = {}
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                crds[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = crd
    return crds


@dataclass(frozen=True)
class Verdict:
    """check-jsonschema's answer for one custom resource document."""

    source: str
    kind: Kind
    errors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_custom(
    tools: Tools,
    docs: Sequence[tuple[str, Document]],
    crds: Mapping[Kind, Document],
    workdir: Path,
) -> list[Verdict]:
    """check-jsonschema each (source, document) against its kind's schema, one run per kind."""
    verdicts: list[Verdict] = []
    by_kind: dict[Kind, list[tuple[str, Path]]] = {}
    for index, (source, doc) in enumerate(docs):
        kind = kind_of(doc)
        if kind not in crds:
            verdicts.append(Verdict(source, kind, (f"no CRD in crds/ defines {kind}",)))
            continue
        path = workdir / f"instance-{index}.json"
        path.write_text(json.dumps(doc))
        by_kind.setdefault(kind, []).append((source, path))
    for kind, items in by_kind.items():
        schema_path = workdir / f"schema-{kind[1]}.json"
        schema_path.write_text(json.dumps(crd_schema.for_resource(crds[kind], kind[0])))
        result = run_tool(
            [
                tools.check_jsonschema,
                "--output-format",
                "json",
                "--schemafile",
                str(schema_path),
                *(str(path) for _, path in items),
            ]
        )
        try:
            report = json.loads(result.stdout)
        except json.JSONDecodeError as exc:
            raise CheckFailedError(f"check-jsonschema gave no report:\n{result.stderr}") from exc
        if report.get("parse_errors"):
            raise CheckFailedError(f"check-jsonschema could not read: {report['parse_errors']}")
        errors: dict[str, list[str]] = {}
        for error in report.get("errors", []):
            errors.setdefault(error["filename"], []).append(
                f"{error.get('path', '$')}: {error.get('message', error)}"
            )
        verdicts += [
            Verdict(source, kind, tuple(errors.get(str(path), ()))) for source, path in items
        ]
    return verdicts


def example_documents(directory: Path) -> list[tuple[str, Document]]:
    """(file[#index], document) for every document of every YAML file in `directory`."""
    found: list[tuple[str, Document]] = []
    for path in sorted(directory.glob("*.yaml")):
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for index, doc in enumerate(docs):
            suffix = f"#{index}" if len(docs) > 1 else ""
            found.append((f"{_relative(path)}{suffix}", doc))
    return found


# --- the whole gate ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """One values file's render, sorted by who validates what."""

    builtin: tuple[Document, ...]
    custom: tuple[Document, ...]
    skipped: tuple[tuple[Kind, str], ...]
    jobs: Mapping[str, Document]


def sort_rendered(docs: Sequence[Document], custom_kinds: Iterable[Kind]) -> Rendered:
    custom_set = set(custom_kinds)
    builtin: list[Document] = []
    custom: list[Document] = []
    skipped: list[tuple[Kind, str]] = []
    for doc in docs:
        kind = kind_of(doc)
        if kind in SKIPPED_KINDS:
            skipped.append((kind, SKIPPED_KINDS[kind]))
        elif kind in custom_set or kind[0].startswith("remediation.gpuops.io/"):
            custom.append(doc)
        else:
            builtin.append(doc)
    return Rendered(tuple(builtin), tuple(custom), tuple(skipped), job_templates(docs))


def check_values(tools: Tools, values: Path | None, crds: Mapping[Kind, Document]) -> list[str]:
    """Lint, render and validate one values file; returns what was checked, line by line."""
    lines: list[str] = []
    name = label(values)
    helm_lint(tools, values)
    lines.append(f"helm lint: ok ({name})")
    docs = render(
        tools, values, api_versions=(PROMETHEUS_RULE_API, VALIDATING_ADMISSION_POLICY_API)
    )
    rendered = sort_rendered(docs, crds)
    lines += check_alert_rules(docs, name)
    with tempfile.TemporaryDirectory(prefix="chart-check-") as tmp:
        workdir = Path(tmp)
        docs = [*rendered.builtin, *(as_object(f, job) for f, job in rendered.jobs.items())]
        validate_builtin(tools, docs, workdir, Path(name).stem.replace(" ", "-"))
        lines.append(
            f"kubernetes-validate --strict {'/'.join(KUBERNETES_VERSIONS)}: ok ({name}:"
            f" {len(rendered.builtin)} objects, {len(rendered.jobs)} Job templates)"
        )
        if rendered.custom:
            sources = [(f"{name}: {d['kind']}/{d['metadata']['name']}", d) for d in rendered.custom]
            bad = [v for v in validate_custom(tools, sources, crds, workdir) if not v.ok]
            if bad:
                raise CheckFailedError("\n".join(f"{v.source}: {'; '.join(v.errors)}" for v in bad))
            lines.append(f"check-jsonschema: ok ({name}: {len(rendered.custom)} custom resources)")
    lines += [f"skipped {kind[1]} ({name}): {why}" for kind, why in rendered.skipped]
    return lines


def check_alert_rules(docs: Sequence[Document], name: str) -> list[str]:
    """`promtool check rules` on the rendered PrometheusRule's groups (where promtool is
    installed; tests/chart/test_alerts.py also unit-tests every alert)."""
    rules = objects(docs, "PrometheusRule")
    promtool = shutil.which("promtool")
    if not rules:
        return []
    if promtool is None:
        return [f"promtool check rules ({name}): skipped, promtool not installed"]
    with tempfile.TemporaryDirectory(prefix="chart-check-") as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_text(yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}))
        result = run_tool([promtool, "check", "rules", str(path)])
    if result.returncode != 0:
        raise CheckFailedError(f"promtool check rules ({name}):\n{result.stdout}{result.stderr}")
    return [f"promtool check rules: ok ({name})"]


def check_examples(
    tools: Tools,
    crds: Mapping[Kind, Document],
    examples: Path = EXAMPLES,
    invalid_examples: Path = INVALID_EXAMPLES,
    schema_blind: Mapping[str, str] = SCHEMA_BLIND,
) -> list[str]:
    """Every example validates; every invalid example fails unless listed in `schema_blind`."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chart-check-") as tmp:
        good = example_documents(examples)
        if not good:
            raise CheckFailedError(f"{examples} holds no example policies")
        bad = [v for v in validate_custom(tools, good, crds, Path(tmp)) if not v.ok]
        if bad:
            raise CheckFailedError("\n".join(f"{v.source}: {'; '.join(v.errors)}" for v in bad))
        lines.append(f"check-jsonschema {_shown(examples)}: ok ({len(good)} documents)")
    with tempfile.TemporaryDirectory(prefix="chart-check-") as tmp:
        verdicts = validate_custom(tools, example_documents(invalid_examples), crds, Path(tmp))
        missed = [
            v.source
            for v in verdicts
            if v.ok and Path(v.source.split("#")[0]).name not in schema_blind
        ]
        if missed:
            raise CheckFailedError(
                "the CRD schema accepts these invalid examples: "
                + ", ".join(missed)
                + ". Tighten the schema, or add the file to SCHEMA_BLIND in"
                " tests/chart/chart_check.py with the reason no schema can see the mistake."
            )
        caught = sum(not v.ok for v in verdicts)
        lines.append(
            f"check-jsonschema {_shown(invalid_examples)}: {caught} rejected as they should be,"
            f" {len(verdicts) - caught} left to check-policy (SCHEMA_BLIND)"
        )
    return lines


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _shown(directory: Path) -> str:
    return f"{_relative(directory)}/"


def run_all() -> list[str]:
    tools = Tools.find()
    lines = [sync_chart_crds(), check_crd_chart(tools), check_values_schema()]
    crds = load_crds()
    for values in values_files():
        lines += check_values(tools, values, crds)
    lines += check_examples(tools, crds)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chart.chart_check",
        description="Lint, render and schema-validate the Helm chart and the example policies.",
    )
    parser.parse_args(argv)
    try:
        for line in run_all():
            print(f"chart-check: {line}", flush=True)
    except CheckFailedError as failure:
        print(f"chart-check: FAILED: {failure}", file=sys.stderr)
        return 1
    print("chart-check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
