"""Hostile RemediationPolicy specs (hypothesis): a valid policy with any field swapped for
junk (wrong types, huge or unicode strings, bad durations and regexes, negative numbers,
deep nesting), and arbitrary documents. Parsing never raises anything but the documented
InvalidPolicyError, every error names a field, an accepted policy can be planned, and a
rejected one yields Accepted=False with a message that names the field.

Deterministic in CI (the "ci" hypothesis profile, tests/conftest.py: derandomized, so every
run draws the same examples); `make reliability` draws fresh ones, ten times as many. Inputs
that once broke these properties are kept below as explicit `@example`s: the overflowing
duration `24000000000h` (issue 12, defect 9) crashed validation with an OverflowError."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from remediation_operator.api import policy_parsing
from remediation_operator.api.field_errors import FieldError
from remediation_operator.domain import planner
from remediation_operator.domain.fleet import Condition, NodeView, Snapshot
from remediation_operator.handlers import policies
from tests.integration.conftest import policy as valid_policy

pytestmark = pytest.mark.reliability

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

BASE_EXAMPLES = settings().max_examples
"""100 under the CI profile, 1000 under `make reliability`'s (tests/conftest.py)."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            "0s",
            "-5m",
            "1e400s",
            "99999999999h",
            "10%",
            "-10%",
            "150%",
            "abc%",
            "(",
            "[a-",
            "*",
            "(a+)+$",
            "Cordon",
            "Replace",
            "Job",
            "NodeAgent",
            "Enforce",
            "DryRun",
            "* * * * *",
            "61 * * * *",
            "\u202e\u0000\ud7ff",
            "x" * 5000,
            "🔥" * 100,
        ]
    ),
)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, (*prefix, index))
    return out


@st.composite
def mutated_policies(draw: st.DrawFn) -> dict[str, Any]:
    """A valid policy with 1-3 of its fields (anywhere) replaced or joined by junk."""
    obj = valid_policy(
        budgets=[{"nodes": "1", "actions": ["Drain", "GPUReset", "Reboot", "Replace"]}],
        rate={"max": 2, "per": "10m"},
        circuitBreaker={"maxUnhealthy": "20%", "minNodes": 5},
    )
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(obj)[1:]))
        value = draw(junk)
        target = obj
        for part in path[:-1]:
            target = target[part]
        if isinstance(target, dict) and draw(st.booleans()):
            target[draw(st.text(max_size=12))] = value  # an extra (unknown) field
        else:
            target[path[-1]] = value
    return obj


def _node(name: str, reason: str) -> NodeView:
    return NodeView(
        name=name,
        labels={"nvidia.com/gpu.present": "true"},
        conditions=(Condition("AcceleratedHardwareReady", "False", reason, "junk"),),
    )


def _check(obj: Any) -> None:
    errors = policy_parsing.validate(obj)
    assert all(e.path and e.message for e in errors)
    rejected: list[FieldError] | None = None
    try:
        parsed = policy_parsing.parse_policy(obj)
    except policy_parsing.InvalidPolicyError as invalid:
        rejected = invalid.errors
    if rejected is not None:
        assert errors, "parse_policy rejected what validate accepted"
        assert rejected == errors
        if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
            acceptance = policies.accept(obj)
            assert not acceptance.accepted
            assert acceptance.in_force is None
            assert errors[0].path in acceptance.message
            change = policies.status_change(acceptance, {}, NOW)
            assert change is not None
            accepted = next(c for c in change["conditions"] if c["type"] == "Accepted")
            assert accepted["status"] == "False"
            assert errors[0].path in accepted["message"]
        return
    assert errors == [], "validate reported errors for a policy parse_policy accepted"
    # An accepted policy never crashes the planner, even with odd reasons on the nodes.
    nodes = {n: _node(n, r) for n, r in (("a", "NvidiaXID62Error"), ("b", "x" * 4096))}
    planner.plan(Snapshot(nodes=nodes), parsed, NOW)


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The base policy of `mutated_policies` with one field set: a found example, kept."""
    obj = valid_policy(
        budgets=[{"nodes": "1", "actions": ["Drain", "GPUReset", "Reboot", "Replace"]}],
        rate={"max": 2, "per": "10m"},
        circuitBreaker={"maxUnhealthy": "20%", "minNodes": 5},
    )
    target: Any = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return obj


@settings(
    max_examples=3 * BASE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(mutated_policies())
@example(_with(("spec", "faults", 0, "tolerate"), "24000000000h"))  # defect 9: OverflowError
@example(_with(("spec", "rate", "per"), "99999999999h"))
@example(_with(("spec", "faults", 0, "ladder", 0, "timeout"), "9" * 400 + "ms"))
@example(_with(("spec", "budgets", 0, "duration"), "1e400s"))
@example(_with(("spec", "faults", 0, "match", 0, "reason"), "(a+)+$"))  # defect 8: now harmless
@example(_with(("spec", "faults", 0, "match", 0, "reason"), r"(a)\1"))  # RE2 refuses it
@example(_with(("spec", "faults", 0, "ladder", 0, "retries"), 2**70))
@example(_with(("spec", "budgets", 0, "nodes"), "9" * 5000))
def test_a_mutated_policy_is_parsed_or_rejected_with_named_fields(obj: Any) -> None:
    _check(obj)


@settings(max_examples=BASE_EXAMPLES * 3 // 2, deadline=None)
@given(junk)
def test_an_arbitrary_document_is_rejected_clearly(obj: Any) -> None:
    _check(obj)


@settings(max_examples=BASE_EXAMPLES, deadline=None)
@given(junk)
def test_an_arbitrary_spec_is_rejected_or_parsed(spec: Any) -> None:
    obj = valid_policy()
    obj["spec"] = spec
    _check(obj)


def test_a_reason_pattern_that_does_not_compile_is_a_named_field_error() -> None:
    """`(` does not compile: that is a named field error, not a crash at plan time."""
    obj = valid_policy()
    obj["spec"]["faults"][0]["match"][0]["reason"] = "("
    errors = policy_parsing.validate(obj)
    assert [e.path for e in errors] == ["spec.faults[0].match[0].reason"]


def test_an_overflowing_duration_is_a_named_field_error_everywhere() -> None:
    """Defect 9, found by this fuzz: every duration field, not only the one it hit."""
    obj = _with(("spec", "history"), {"window": "1h"})
    obj["spec"]["budgets"][0].update(schedule="@daily", duration="1h")
    obj["spec"]["faults"][0]["ladder"][1]["timeout"] = "1h"
    fields = [
        ("spec", "startupGrace"),
        ("spec", "recovery", "healthyFor"),
        ("spec", "history", "window"),
        ("spec", "rate", "per"),
        ("spec", "circuitBreaker", "cooldown"),
        ("spec", "budgets", 0, "duration"),
        ("spec", "faults", 0, "tolerate"),
        ("spec", "faults", 0, "ladder", 0, "escalateAfter"),
        ("spec", "faults", 0, "ladder", 1, "timeout"),
    ]
    for path in fields:
        broken = copy.deepcopy(obj)
        target: Any = broken
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = "24000000000h"
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)[1:]
        assert [e.path for e in policy_parsing.validate(broken)] == [where]
        _check(broken)


def test_the_mutation_strategy_can_produce_valid_policies() -> None:
    """Guard against a vacuous fuzz: the unmutated base policy parses."""
    obj = copy.deepcopy(valid_policy())
    assert policy_parsing.parse_policy(obj).name == "gpu"
