"""docs/install.md's snippets are real: the policy fragment validates, the NPD config parses."""

from __future__ import annotations

import json
import re

import yaml

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
