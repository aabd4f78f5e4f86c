"""A policy as written becomes the domain's Policy; every mistake is reported with its field."""

from __future__ import annotations

import copy
import itertools
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.api import policy_parsing
from remediation_operator.domain import policy as domain
from remediation_operator.domain.policy import Action, Mode, OnExhausted, OnTimeout
from remediation_operator.domain.selectors import Operator
from tests.api.conftest import EXAMPLES, GOOD_EXAMPLES, load


def paths(obj: Any) -> list[str]:
    return [e.path for e in policy_parsing.validate(obj)]


def messages(obj: Any) -> dict[str, str]:
    return {e.path: e.message for e in policy_parsing.validate(obj)}


@pytest.mark.parametrize("path", GOOD_EXAMPLES, ids=lambda p: p.name)
def test_good_examples_are_valid(path: Any) -> None:
    assert policy_parsing.validate(load(path)) == []


def test_minimal_policy_gets_the_domain_defaults(minimal: dict[str, Any]) -> None:
    minimal["metadata"]["generation"] = 4
    policy = policy_parsing.parse_policy(minimal)
    assert policy.name == "minimal"
    assert policy.generation == 4
    assert policy.mode is Mode.Enforce
    assert policy.startup_grace == domain.DEFAULT_STARTUP_GRACE
    assert policy.recovery.healthy_for == domain.DEFAULT_HEALTHY_FOR
    assert policy.history is None
    assert policy.rate is None
    assert policy.circuit_breaker is None
    assert policy.budgets == ()
    assert policy.actions == domain.Actions()
    (fault,) = policy.faults
    assert fault.tolerate == domain.DEFAULT_TOLERATE
    assert [s.action for s in fault.ladder] == [Action.Cordon, Action.Drain, Action.Replace]
    assert fault.ladder[1].timeout == timedelta(minutes=30)
    assert fault.ladder[0] == domain.Step(Action.Cordon)
    assert fault.match == (
        domain.ConditionMatch("AcceleratedHardwareReady", "False", "NvidiaXID79Error"),
    )


def test_default_gpu_policy_reads_as_written() -> None:
    policy = policy_parsing.parse_policy(load(EXAMPLES / "gpu-xid-ladders-policy.yaml"))
    names = [f.name for f in policy.faults]
    assert names[0] == "gpu-contact-support"  # most severe first
    silent = next(f for f in policy.faults if f.name == "gpu-health-unknown")
    assert silent.on_exhausted is OnExhausted.Hold
    assert silent.match[0].stale_after == timedelta(minutes=15)
    assert policy.node_selector.matches({"nvidia.com/gpu.present": "true"})
    assert not policy.node_selector.matches({})
    assert [b.nodes for b in policy.budgets] == ["10%", "1"]  # 1 written as an integer
    assert policy.budgets[1].schedule == "0 9 * * 1-5"
    assert policy.budgets[1].duration == timedelta(hours=8)
    assert policy.budgets[1].actions == frozenset({Action.Replace})
    assert policy.rate == domain.Rate(max=10, per=timedelta(hours=1))
    assert policy.recovery.healthy_for == timedelta(minutes=5)
    assert policy.circuit_breaker == domain.CircuitBreaker(
        "20%", 5, timedelta(minutes=15), "topology.kubernetes.io/zone"
    )
    assert policy.history == domain.History(timedelta(hours=168), 3, Action.Replace)
    assert policy.actions.gpu_reset.job_template is not None
    assert policy.actions.gpu_reset.job_template["spec"]["backoffLimit"] == 0


def test_dry_run_policy_selects_one_pool_and_gates_replace() -> None:
    policy = policy_parsing.parse_policy(load(EXAMPLES / "dryrun-policy.yaml"))
    assert policy.mode is Mode.DryRun
    assert policy.node_selector.match_expressions[0].operator is Operator.IN
    assert policy.node_selector.matches(
        {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "gpu-canary"}
    )
    assert not policy.node_selector.matches(
        {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "gpu-main"}
    )
    assert policy.require_approval == frozenset({Action.Replace})


def test_every_schema_error_is_reported_at_once(minimal: dict[str, Any]) -> None:
    fault = minimal["spec"]["faults"][0]
    fault["tolerate"] = "5 minutes"
    fault["match"][0]["reason"] = "NvidiaXID(79"
    fault["ladder"][1]["action"] = "Restart"
    minimal["spec"]["budgets"] = [{"nodes": "101%"}]
    minimal["spec"]["rate"] = {"max": 0, "per": "1h"}
    assert sorted(paths(minimal)) == sorted(
        [
            "spec.faults[0].tolerate",
            "spec.faults[0].match[0].reason",
            "spec.faults[0].ladder[1].action",
            "spec.budgets[0].nodes",
            "spec.rate.max",
        ]
    )
    with pytest.raises(policy_parsing.InvalidPolicyError) as caught:
        policy_parsing.parse_policy(minimal)
    assert len(caught.value.errors) == 5
    assert "RemediationPolicy minimal is invalid" in str(caught.value)
    assert "spec.faults[0].tolerate: '5 minutes' is not a duration" in str(caught.value)


def test_every_semantic_error_is_reported_at_once(minimal: dict[str, Any]) -> None:
    second = copy.deepcopy(minimal["spec"]["faults"][0])
    second["ladder"] = [{"action": "Drain"}, {"action": "Cordon"}]
    minimal["spec"]["faults"].append(second)
    minimal["spec"]["requireApproval"] = ["Cordon"]
    assert sorted(paths(minimal)) == [
        "spec.faults[1].ladder[1].action",
        "spec.faults[1].name",
        "spec.faults[1].onExhausted",
        "spec.requireApproval[0]",
    ]


def test_wire_names_are_camel_case_only(minimal: dict[str, Any]) -> None:
    minimal["spec"]["startup_grace"] = "1m"
    assert messages(minimal) == {
        "spec.startup_grace": "unknown field; did you mean 'startupGrace'?"
    }


def test_unknown_field_far_from_any_lists_the_known_ones(minimal: dict[str, Any]) -> None:
    minimal["spec"]["recovery"] = {"zzz": 1}
    assert messages(minimal) == {"spec.recovery.zzz": "unknown field; known fields: healthyFor"}


@pytest.mark.parametrize(
    ("envelope", "path", "fragment"),
    [
        ({"apiVersion": "v1"}, "apiVersion", "'v1' is not remediation.gpuops.io/v1alpha1"),
        ({"kind": "Remediation"}, "kind", "'Remediation' is not RemediationPolicy"),
        ({"metadata": {}}, "metadata.name", "is required"),
        ({"metadata": {"name": "GPU_Policy"}}, "metadata.name", "not a valid object name"),
        ({"spec": None}, "spec", "must be a mapping"),
    ],
)
def test_the_object_around_the_spec_is_checked(
    minimal: dict[str, Any], envelope: dict[str, Any], path: str, fragment: str
) -> None:
    minimal.update(envelope)
    assert fragment in messages(minimal)[path]


def test_a_document_that_is_not_a_mapping_is_one_clear_error() -> None:
    assert messages(["a", "list"]) == {"(document)": "must be a mapping (a Kubernetes object)"}


def _with_fault(minimal: dict[str, Any], **changes: Any) -> dict[str, Any]:
    minimal["spec"]["faults"][0].update(changes)
    return minimal


@pytest.mark.parametrize(
    ("ladder", "extra", "errors"),
    [
        # Skipping rungs is fine; ending in Replace needs no onExhausted.
        ([{"action": "Cordon"}, {"action": "Reboot"}, {"action": "Replace"}], {}, {}),
        ([{"action": "Replace"}], {}, {}),
        ([{"action": "Cordon"}], {"onExhausted": "Fail"}, {}),
        (
            [{"action": "Cordon"}, {"action": "Drain"}, {"action": "Drain"}],
            {"onExhausted": "Hold"},
            {"spec.faults[0].ladder[2].action": "Drain appears twice (also ladder[1])"},
        ),
        (
            [{"action": "Reboot"}, {"action": "GPUReset"}, {"action": "Replace"}],
            {},
            {"spec.faults[0].ladder[1].action": "GPUReset comes after Reboot (ladder[0])"},
        ),
        (
            [{"action": "Cordon"}, {"action": "Drain"}],
            {},
            {"spec.faults[0].onExhausted": "ladder ends in Drain, not Replace"},
        ),
        (
            [{"action": "Drain", "onTimeout": "Force"}, {"action": "Replace"}],
            {},
            {"spec.faults[0].ladder[0].timeout": "is required with onTimeout: Force"},
        ),
        (
            [{"action": "Drain", "onTimeout": "Force", "timeout": "30m"}, {"action": "Replace"}],
            {},
            {},
        ),
        (
            [{"action": "GPUReset", "onTimeout": "Force", "timeout": "5m"}, {"action": "Replace"}],
            {},
            {"spec.faults[0].ladder[0].onTimeout": "Force applies only to Drain"},
        ),
        (
            [{"action": "Cordon", "retries": -1}, {"action": "Replace"}],
            {},
            {"spec.faults[0].ladder[0].retries": "greater than or equal to 0"},
        ),
        ([], {}, {"spec.faults[0].ladder": "at least 1 item"}),
    ],
)
def test_ladder_rules(
    minimal: dict[str, Any], ladder: list[Any], extra: dict[str, Any], errors: dict[str, str]
) -> None:
    found = messages(_with_fault(minimal, ladder=ladder, **extra))
    assert set(found) == set(errors)
    for path, fragment in errors.items():
        assert fragment in found[path]


def test_force_on_drain_reaches_the_domain(minimal: dict[str, Any]) -> None:
    ladder = [{"action": "Drain", "onTimeout": "Force", "timeout": "30m"}, {"action": "Replace"}]
    policy = policy_parsing.parse_policy(_with_fault(minimal, ladder=ladder))
    assert policy.faults[0].ladder[0].on_timeout is OnTimeout.Force


@pytest.mark.parametrize(
    ("budget", "errors"),
    [
        ({"nodes": 0}, {}),
        ({"nodes": "0%"}, {}),
        ({"nodes": "100%"}, {}),
        ({"nodes": "7"}, {}),
        ({"nodes": 3, "schedule": "@daily", "duration": "1h"}, {}),
        ({"nodes": "101%"}, {"spec.budgets[0].nodes": "percentage from 0% to 100%"}),
        ({"nodes": "ten"}, {"spec.budgets[0].nodes": "neither a node count"}),
        ({"nodes": True}, {"spec.budgets[0].nodes": "neither a node count"}),
        ({"nodes": 1.5}, {"spec.budgets[0].nodes": "neither a node count"}),
        ({"nodes": -2}, {"spec.budgets[0].nodes": "negative"}),
        (
            {"nodes": 1, "schedule": "0 9 * *", "duration": "1h"},
            {"spec.budgets[0].schedule": "has 4 fields"},
        ),
        ({"nodes": 1, "duration": "1h"}, {"spec.budgets[0].schedule": "is required with duration"}),
        (
            {"nodes": 1, "schedule": "@daily"},
            {"spec.budgets[0].duration": "is required with schedule"},
        ),
        (
            {"nodes": 1, "schedule": "@daily", "duration": "0s"},
            {"spec.budgets[0].duration": "never open"},
        ),
        ({"nodes": 1, "actions": []}, {"spec.budgets[0].actions": "at least 1 item"}),
        (
            {"nodes": 1, "actions": ["Cordon"]},
            {"spec.budgets[0].actions[0]": "Cordon is not disruptive"},
        ),
    ],
)
def test_budget_rules(
    minimal: dict[str, Any], budget: dict[str, Any], errors: dict[str, str]
) -> None:
    minimal["spec"]["budgets"] = [budget]
    found = messages(minimal)
    assert set(found) == set(errors)
    for path, fragment in errors.items():
        assert fragment in found[path]


@pytest.mark.parametrize(
    ("spec", "errors"),
    [
        ({"circuitBreaker": {"maxUnhealthy": 2}}, {}),
        (
            {"circuitBreaker": {"maxUnhealthy": "20%", "minNodes": -1}},
            {"spec.circuitBreaker.minNodes": ">= 0"},
        ),
        ({"circuitBreaker": {}}, {"spec.circuitBreaker.maxUnhealthy": "is required"}),
        ({"history": {"then": "Reboot"}}, {}),
        ({"history": {"then": "Explode"}}, {"spec.history.then": "'Explode' is not valid"}),
        ({"history": {"maxEpisodes": 0}}, {"spec.history.maxEpisodes": ">= 1"}),
        ({"rate": {"max": 1}}, {"spec.rate.per": "is required"}),
        ({"requireApproval": ["Drain", "Replace"]}, {}),
        (
            {"requireApproval": ["Cordon"]},
            {"spec.requireApproval[0]": "Cordon cannot require approval"},
        ),
        ({"requireApproval": ["Nap"]}, {"spec.requireApproval[0]": "'Nap' is not valid"}),
        (
            {"mode": "Audit"},
            {"spec.mode": "'Audit' is not valid: it should be 'Enforce' or 'DryRun'"},
        ),
        ({"startupGrace": "5"}, {"spec.startupGrace": "not a duration"}),
        ({"paused": "maybe"}, {"spec.paused": "valid boolean"}),
        ({"pauseRequests": ["upgrade-team"]}, {}),
        ({"faults": []}, {"spec.faults": "at least 1 item"}),
        (
            {
                "nodeSelector": {
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
                }
            },
            {"spec.nodeSelector.matchExpressions[0].values": "must be empty with operator Exists"},
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            {"spec.nodeSelector.matchExpressions[0].operator": "'Near' is not valid"},
        ),
        (
            {"actions": {"gpuReset": {"executor": "Ssh"}}},
            {"spec.actions.gpuReset.executor": "'Ssh'"},
        ),
        ({"actions": {"replace": {"provider": "Manual"}}}, {}),
        (  # free-form, but a Job (issue 24: check-policy said ok to this)
            {"actions": {"reboot": {"jobTemplate": {"anything": {"goes": [1]}}}}},
            {"spec.actions.reboot.jobTemplate": "is not a Job template"},
        ),
        (
            {
                "actions": {
                    "reboot": {
                        "jobTemplate": {
                            "spec": {"containers": [{"name": "c", "image": "i", "x": {"y": [1]}}]}
                        }
                    }
                }
            },
            {},
        ),
    ],
)
def test_fleet_setting_rules(
    minimal: dict[str, Any], spec: dict[str, Any], errors: dict[str, str]
) -> None:
    minimal["spec"].update(spec)
    found = messages(minimal)
    assert set(found) == set(errors)
    for path, fragment in errors.items():
        assert fragment.replace(">= ", "greater than or equal to ") in found[path]


@pytest.mark.parametrize(
    ("match", "errors"),
    [
        ({"type": "GPUProblem", "staleAfter": "5m"}, {}),
        ({"type": "GPUProblem", "status": "Unknown"}, {}),
        (
            {"type": "GPUProblem", "status": "false"},
            {"spec.faults[0].match[0].status": "'false' is not valid"},
        ),
        (
            {"type": "GPUProblem", "status": False},
            {"spec.faults[0].match[0].status": "is not valid"},
        ),
        ({"type": ""}, {"spec.faults[0].match[0].type": "at least 1 character"}),
        ({"status": "True"}, {"spec.faults[0].match[0].type": "is required"}),
        (
            {"type": "X", "reason": "[a-"},
            {"spec.faults[0].match[0].reason": "not a valid RE2 regular expression"},
        ),
        (
            {"type": "X", "staleAfter": "soon"},
            {"spec.faults[0].match[0].staleAfter": "not a duration"},
        ),
        ({"type": "Ready", "status": "Unknown", "positiveAfter": "30m"}, {}),
        ({"type": "X", "status": "False", "exceptReason": "NvidiaXID(13|63)Error"}, {}),
        (
            {"type": "X", "status": "False", "exceptReason": "[a-"},
            {"spec.faults[0].match[0].exceptReason": "not a valid RE2 regular expression"},
        ),
        (
            {"type": "X", "staleAfter": "5m", "exceptReason": "A"},
            {"spec.faults[0].match[0].exceptReason": "narrows a `status` or `reason` match"},
        ),
        (
            {"type": "GPUProblem", "status": "Unknown", "positiveAfter": "30m"},
            {"spec.faults[0].match[0].positiveAfter": "applies only to `type: Ready`"},
        ),
        (
            {"type": "Ready", "status": "False", "positiveAfter": "30m"},
            {"spec.faults[0].match[0].positiveAfter": "with `status: Unknown`"},
        ),
    ],
)
def test_condition_match_rules(
    minimal: dict[str, Any], match: dict[str, Any], errors: dict[str, str]
) -> None:
    minimal["spec"]["faults"][0]["match"] = [match]
    found = messages(minimal)
    assert set(found) == set(errors)
    for path, fragment in errors.items():
        assert fragment in found[path]


@pytest.mark.parametrize("name", ["a", "gpu-xid-79", "x" * 63])
def test_fault_names_that_are_dns_labels_pass(minimal: dict[str, Any], name: str) -> None:
    assert paths(_with_fault(minimal, name=name)) == []


@pytest.mark.parametrize("name", ["", "GPU", "gpu_xid", "-gpu", "gpu-", "x" * 64])
def test_fault_names_that_are_not_dns_labels_fail(minimal: dict[str, Any], name: str) -> None:
    assert paths(_with_fault(minimal, name=name)) == ["spec.faults[0].name"]


def test_a_stored_spec_parses_alone_like_the_whole_object(minimal: dict[str, Any]) -> None:
    """The status keeps lastAcceptedSpec; a restarted operator parses it without metadata."""
    whole = policy_parsing.parse_policy(minimal)
    alone = policy_parsing.parse_spec(minimal["spec"], name="minimal", generation=1)
    assert alone == whole
    with pytest.raises(policy_parsing.InvalidPolicyError):
        policy_parsing.parse_spec({"faults": "none"}, name="minimal")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(domain.LADDER_ORDER), min_size=1, max_size=5), st.booleans())
def test_a_ladder_is_valid_exactly_when_it_climbs(actions: list[Action], hold: bool) -> None:
    """Property: accepted iff strictly increasing in LADDER_ORDER (and it says how it ends)."""
    spec: dict[str, Any] = {
        "faults": [
            {
                "name": "f",
                "match": [{"type": "X", "status": "True"}],
                "ladder": [{"action": str(a)} for a in actions],
                **({"onExhausted": "Hold"} if hold else {}),
            }
        ]
    }
    ranks = [domain.LADDER_ORDER.index(a) for a in actions]
    climbs = all(a < b for a, b in itertools.pairwise(ranks))
    ends = hold or actions[-1] is Action.Replace
    if climbs and ends:
        policy = policy_parsing.parse_spec(spec, name="p")
        assert [s.action for s in policy.faults[0].ladder] == actions
    else:
        with pytest.raises(policy_parsing.InvalidPolicyError) as caught:
            policy_parsing.parse_spec(spec, name="p")
        assert all(e.path.startswith("spec.faults[0].") for e in caught.value.errors)
        assert any(e.path.endswith(".action") for e in caught.value.errors) is not climbs


def test_validate_is_not_a_rung_and_is_configured_in_spec_validation(
    minimal: dict[str, Any],
) -> None:
    ladder = [{"action": "Cordon"}, {"action": "Reboot"}, {"action": "Validate"}]
    errors = messages(_with_fault(minimal, ladder=ladder, onExhausted="Hold"))
    assert set(errors) == {"spec.faults[0].ladder[2].action"}
    assert "Validate is not a ladder step" in errors["spec.faults[0].ladder[2].action"]
    assert "spec.validation" in errors["spec.faults[0].ladder[2].action"]


def test_validation_is_parsed_with_its_level_given_to_the_job(minimal: dict[str, Any]) -> None:
    spec = minimal["spec"]
    given_spec = {**spec, "validation": {"after": ["Reboot"], "level": 3, "timeout": "45m"}}
    validation = policy_parsing.parse_spec(given_spec, name="p").validation
    assert validation is not None
    assert validation.after == frozenset({Action.Reboot})
    assert validation.timeout == timedelta(minutes=45)
    assert validation.executor.env == {"REMEDIATION_DIAG_LEVEL": "3"}
    default = policy_parsing.parse_spec({**spec, "validation": {}}, name="p").validation
    assert default is not None
    assert default.after == frozenset({Action.GPUReset, Action.Reboot})
    assert default.level == 2
    assert policy_parsing.parse_spec(spec, name="p").validation is None


def test_validation_after_lists_in_place_repairs_only(minimal: dict[str, Any]) -> None:
    minimal["spec"]["validation"] = {"after": ["Reboot", "Replace"]}
    errors = messages(minimal)
    assert set(errors) == {"spec.validation.after[1]"}
    assert "only the in-place repairs GPUReset and Reboot" in errors["spec.validation.after[1]"]
    minimal["spec"]["validation"] = {"after": ["Reboot", "Reboot"]}
    assert messages(minimal) == {"spec.validation.after[1]": "Reboot is listed twice"}
    minimal["spec"]["validation"] = {"level": 9}
    assert set(messages(minimal)) == {"spec.validation.level"}


def test_a_ladder_longer_than_the_actions_is_refused_as_a_whole(minimal: dict[str, Any]) -> None:
    ladder = [{"action": "Cordon"}] * 6
    assert messages(_with_fault(minimal, ladder=ladder, onExhausted="Hold")) == {
        "spec.faults[0].ladder": "list should have at most 5 items after validation, not 6"
    }


def test_a_check_with_a_zero_timeout_is_refused(minimal: dict[str, Any]) -> None:
    """A validation given no time would end before its Job ran: no verdict (issue 22)."""
    minimal["spec"]["validation"] = {"timeout": "0s"}
    assert messages(minimal) == {
        "spec.validation.timeout": "'0s' must be longer than 0s (a Job cannot finish in no time)"
    }
    minimal["spec"].pop("validation")
    minimal["spec"]["diagnostics"] = {"destination": "s3://b/p", "timeout": "0s"}
    assert set(messages(minimal)) == {"spec.diagnostics.timeout"}


def test_restart_pods_are_parsed_and_an_empty_selector_is_refused(
    minimal: dict[str, Any],
) -> None:
    """D71: `validation.restartPods` names the pods that hold stale state on the node; an
    empty selector would restart every pod of the namespace there."""
    agent = {"app.kubernetes.io/name": "eks-node-monitoring-agent"}
    minimal["spec"]["validation"] = {
        "restartPods": [{"namespace": "kube-system", "podSelector": {"matchLabels": agent}}]
    }
    parsed = policy_parsing.parse_spec(minimal["spec"], name="p").validation
    assert parsed is not None
    (target,) = parsed.restart_pods
    assert target.namespace == "kube-system"
    assert target.selects("kube-system", {**agent, "pod-template-generation": "1"})
    assert not target.selects("default", agent)
    assert target.describe() == "kube-system/app.kubernetes.io/name=eks-node-monitoring-agent"

    minimal["spec"]["validation"] = {
        "restartPods": [{"namespace": "gpu-operator", "podSelector": {}}]
    }
    assert messages(minimal) == {
        "spec.validation.restartPods[0].podSelector": "must select something: an empty"
        " selector would restart every pod of the namespace on the node"
    }
    minimal["spec"]["validation"] = {
        "restartPods": [{"namespace": "GPU_Operator", "podSelector": {"matchLabels": agent}}]
    }
    assert set(messages(minimal)) == {"spec.validation.restartPods[0].namespace"}
