"""Input limits (issue 24, item 6), at the user's level: `check-policy` names the field and
exits 1 (never a traceback), and the operator process marks the policy Accepted=False with
the same field path, for a policy nested 900 and 3,000 levels deep, a `jobTemplate` that is
not a Job, an empty or escaping `pvc://` destination and a validation `timeout: 0s`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from remediation_operator import cli
from remediation_operator.api import input_limits
from tests.integration.conftest import Cluster, cordon_only, eventually, policy

JOB = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


def with_spec(**spec: Any) -> dict[str, Any]:
    body = policy(faults=cordon_only())
    body["spec"].update(spec)  # (not through `policy`, whose deep copy recurses)
    return body


input_limits.allow_deep_documents()  # the emulator (in this process) stores the deep ones


CASES = {
    "deep-900": (
        with_spec(actions={"gpuReset": {"executor": "Job", "jobTemplate": deep(900)}}),
        "spec.actions.gpuReset.jobTemplate.a.a.a...: is nested more than 32 levels deep",
    ),
    "deep-3000": (
        with_spec(actions={"reboot": {"executor": "Job", "jobTemplate": deep(3000)}}),
        "spec.actions.reboot.jobTemplate.a.a.a...: is nested more than 32 levels deep",
    ),
    "not-a-job": (
        with_spec(actions={"gpuReset": {"executor": "Job", "jobTemplate": {"foo": "bar"}}}),
        "spec.actions.gpuReset.jobTemplate: is not a Job template",
    ),
    "empty-pvc": (
        with_spec(diagnostics={"destination": "pvc://"}),
        "spec.diagnostics.destination: 'pvc://' names no place after pvc://",
    ),
    "escaping-pvc": (
        with_spec(diagnostics={"destination": "pvc://x/../.."}),
        "spec.diagnostics.destination: 'pvc://x/../..': the directory must not contain",
    ),
    "escaping-hostpath": (
        with_spec(diagnostics={"destination": "hostpath:///var/log/../../etc"}),
        "spec.diagnostics.destination: 'hostpath:///var/log/../../etc': the directory must not",
    ),
    "zero-timeout": (
        with_spec(validation={"timeout": "0s"}),
        "spec.validation.timeout: '0s' must be longer than 0s",
    ),
    "no-containers": (
        with_spec(validation={"jobTemplate": {"spec": {"template": {"spec": {}}}}}),
        "spec.validation.jobTemplate: spec.template.spec.containers: must list at least one",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_policy_refuses_with_the_field_path(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, expected = CASES[case]
    file = tmp_path / f"{case}.yaml"
    file.write_text(json.dumps(body))  # JSON is YAML; yaml.safe_dump itself recurses
    code = cli.main(["check-policy", str(file)])
    out = capsys.readouterr()
    assert code == 1, out
    assert f"{file}: {expected}" in out.out, out.out
    assert "Traceback" not in out.out + out.err


def test_a_valid_job_template_and_destination_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = with_spec(
        actions={"gpuReset": {"executor": "Job", "jobTemplate": JOB}},
        diagnostics={"destination": "pvc://diagnostics/gpu", "jobTemplate": JOB},
        validation={"timeout": "10m", "jobTemplate": JOB["spec"]},
    )
    file = tmp_path / "good.yaml"
    file.write_text(json.dumps(body))
    assert cli.main(["check-policy", str(file)]) == 0, capsys.readouterr().out


FLOW_ABYSS_RUNS = "RELIABILITY_RUNS" in os.environ
"""The flow-style abyss takes PyYAML's pure-Python scanner about 50 s (quadratic in flow
nesting: it revisits every open bracket per token) and a CPU core with it, so it runs in
`make reliability`, which sets RELIABILITY_RUNS; `make test` reads the block-style one (2 s).
Both reach the same RecursionError in the composer, whose handling is what is tested (D78)."""


@pytest.mark.parametrize(
    "abyss",
    [
        pytest.param("spec:\n" + "- " * 200_000 + "x\n", id="block"),
        pytest.param(
            "spec: " + "[" * 200_000 + "]" * 200_000,
            id="flow",
            marks=[
                pytest.mark.reliability,
                pytest.mark.skipif(
                    not FLOW_ABYSS_RUNS, reason="about 50 s of PyYAML: `make reliability` runs it"
                ),
            ],
        ),
    ],
)
def test_a_document_deeper_than_the_api_server_allows_is_unreadable_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], abyss: str
) -> None:
    file = tmp_path / "abyss.yaml"
    file.write_text(abyss)
    assert cli.main(["check-policy", str(file)]) == 2
    assert "nested too deeply to read" in capsys.readouterr().out


def test_the_spec_walk_itself_never_recurses() -> None:
    input_limits.allow_deep_documents()
    assert input_limits.check(deep(10_000), "spec")[0].message.startswith("is nested more")
    many = {"k": list(range(input_limits.MAX_VALUES + 1))}
    assert "more than" in input_limits.check(many, "spec")[0].message


@pytest.mark.hostile
async def test_the_operator_marks_each_policy_not_accepted_with_the_field_path(
    cluster: Cluster,
) -> None:
    await cluster.start_operator()
    for case in ("deep-900", "deep-3000", "not-a-job", "escaping-pvc", "zero-timeout"):
        body, expected = CASES[case]
        body["metadata"]["name"] = case
        cluster.apply(body)
    for case in ("deep-900", "deep-3000", "not-a-job", "escaping-pvc", "zero-timeout"):
        expected = CASES[case][1]
        await eventually(
            lambda case=case: (cluster.condition(case, "Accepted") or {}).get("status") == "False",
            what=f"{case}: Accepted=False",
        )
        message = (cluster.condition(case, "Accepted") or {})["message"]
        assert expected in message, message
