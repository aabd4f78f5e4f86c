"""The issue 12 policy API: new fields reach the domain, RE2 reason patterns, bounded values,
and matches that say what is wrong. Each mistake is refused with its field path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import re2

from remediation_operator.api import policy_parsing
from remediation_operator.api.field_types import CRON_PATTERN
from remediation_operator.domain import matching, patterns, schedule
from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.policy import OnPDBBlocked, WhenMissing


def messages(obj: Any) -> dict[str, str]:
    return {e.path: e.message for e in policy_parsing.validate(obj)}


def _match(minimal: dict[str, Any], **fields: Any) -> dict[str, Any]:
    minimal["spec"]["faults"][0]["match"] = [{"type": "GPUProblem", **fields}]
    return minimal


# --- new fields -----------------------------------------------------------------------------


def test_weight_and_creation_time_reach_the_domain(minimal: dict[str, Any]) -> None:
    minimal["spec"]["weight"] = 40
    minimal["metadata"]["creationTimestamp"] = "2026-11-30T11:02:00Z"
    policy = policy_parsing.parse_policy(minimal)
    assert policy.weight == 40
    assert policy.created_at == datetime(2026, 11, 30, 11, 2, tzinfo=UTC)


def test_weight_defaults_to_zero_and_a_file_has_no_creation_time(minimal: dict[str, Any]) -> None:
    policy = policy_parsing.parse_policy(minimal)
    assert (policy.weight, policy.created_at) == (0, None)


@pytest.mark.parametrize(("weight", "ok"), [(0, True), (100, True), (-1, False), (101, False)])
def test_weight_is_bounded_like_karpenters(minimal: dict[str, Any], weight: int, ok: bool) -> None:
    minimal["spec"]["weight"] = weight
    assert (messages(minimal) == {}) is ok
    if not ok:
        assert set(messages(minimal)) == {"spec.weight"}


def test_when_missing_reaches_the_domain_and_defaults_to_ignore(minimal: dict[str, Any]) -> None:
    minimal["spec"]["faults"][0]["match"] = [
        {"type": "GPUProblem", "staleAfter": "5m"},
        {"type": "AcceleratedHardwareReady", "staleAfter": "15m", "whenMissing": "Fault"},
        {"type": "Ready", "staleAfter": "15m", "whenMissing": "Ignore"},
    ]
    matches = policy_parsing.parse_policy(minimal).faults[0].match
    assert [m.when_missing for m in matches] == [
        WhenMissing.Ignore,
        WhenMissing.Fault,
        WhenMissing.Ignore,
    ]


def test_when_missing_without_stale_after_is_refused(minimal: dict[str, Any]) -> None:
    found = messages(_match(minimal, status="True", whenMissing="Fault"))
    assert list(found) == ["spec.faults[0].match[0].whenMissing"]
    assert "applies only with `staleAfter`" in found["spec.faults[0].match[0].whenMissing"]


def test_on_pdb_blocked_reaches_the_domain_and_defaults_to_wait(minimal: dict[str, Any]) -> None:
    minimal["spec"]["faults"][0]["ladder"] = [
        {"action": "Cordon"},
        {"action": "Drain", "timeout": "30m", "onPDBBlocked": "Escalate"},
        {"action": "Replace"},
    ]
    ladder = policy_parsing.parse_policy(minimal).faults[0].ladder
    assert ladder[1].on_pdb_blocked is OnPDBBlocked.Escalate
    minimal["spec"]["faults"][0]["ladder"][1].pop("onPDBBlocked")
    ladder = policy_parsing.parse_policy(minimal).faults[0].ladder
    assert ladder[1].on_pdb_blocked is OnPDBBlocked.Wait


@pytest.mark.parametrize("action", ["Cordon", "GPUReset", "Reboot", "Replace"])
def test_on_pdb_blocked_is_refused_on_other_actions(minimal: dict[str, Any], action: str) -> None:
    minimal["spec"]["faults"][0]["ladder"] = [{"action": action, "onPDBBlocked": "Wait"}]
    minimal["spec"]["faults"][0]["onExhausted"] = "Hold"
    found = messages(minimal)
    assert list(found) == ["spec.faults[0].ladder[0].onPDBBlocked"]
    assert (
        f"applies only to Drain (the only step a PodDisruptionBudget can block), not {action}"
        in (found["spec.faults[0].ladder[0].onPDBBlocked"])
    )


def test_the_wire_name_is_on_pdb_blocked_in_capitals(minimal: dict[str, Any]) -> None:
    minimal["spec"]["faults"][0]["ladder"][1]["onPdbBlocked"] = "Wait"
    assert messages(minimal) == {
        "spec.faults[0].ladder[1].onPdbBlocked": "unknown field; did you mean 'onPDBBlocked'?"
    }


# --- defect 16: one meaning for a match -----------------------------------------------------


def test_a_match_with_only_a_type_is_refused_saying_what_to_add(minimal: dict[str, Any]) -> None:
    assert messages(_match(minimal)) == {
        "spec.faults[0].match[0]": "names only type 'GPUProblem', which never matches a node:"
        ' add `status` (e.g. "True"), `reason` or `message` (regular expressions) or'
        " `staleAfter`"
    }


@pytest.mark.parametrize(
    "fields",
    [{"status": "True"}, {"reason": "XID.*"}, {"message": "XID"}, {"staleAfter": "5m"}],
    ids=str,
)
def test_a_match_with_any_one_more_field_is_valid_and_matches(
    minimal: dict[str, Any], fields: dict[str, str]
) -> None:
    """What the docs promise: an absent status accepts any status, an absent reason any
    reason; so each of these matches a node whose GPUProblem is True with reason XID79 (and a
    message that names it)."""
    policy = policy_parsing.parse_policy(_match(minimal, **fields))
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    stale = now - timedelta(minutes=10)
    condition = Condition(
        "GPUProblem", "True", "XID79", "XID 79: fell off the bus", stale, stale, observed_at=stale
    )
    node = NodeView(name="n", labels={}, conditions=(condition,))
    assert matching.match(node, policy.faults, now) is not None


# --- defect 8: RE2 --------------------------------------------------------------------------


def test_reason_patterns_are_compiled_by_re2(minimal: dict[str, Any]) -> None:
    """The engine is RE2 (linear time), in validation and in the matcher alike."""
    assert patterns.ENGINE == "RE2"
    assert isinstance(patterns.compile("NvidiaXID(79)Error"), type(re2.compile("x")))


def test_a_catastrophic_backtracking_pattern_is_accepted_and_matches_correctly(
    minimal: dict[str, Any],
) -> None:
    """`(a+)+$` stalls a backtracking engine on 'aaaa...!'; with RE2 it is an ordinary
    pattern, so it is accepted and evaluated like any other."""
    policy = policy_parsing.parse_policy(_match(minimal, status="True", reason="(a+)+$"))
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def node(reason: str) -> NodeView:
        condition = Condition("GPUProblem", "True", reason, "", now, now, observed_at=now)
        return NodeView(name="n", labels={}, conditions=(condition,))

    assert matching.match(node("a" * 50), policy.faults, now) is not None
    assert matching.match(node("a" * 50_000 + "!"), policy.faults, now) is None
    assert matching.match(node("b"), policy.faults, now) is None


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(XID)\1", r"invalid escape sequence: \1"),
        ("XID(?=79)", "invalid perl operator: (?="),
        ("XID(?<!x)79", "invalid perl operator: (?<"),
        ("NvidiaXID(79", "missing ): NvidiaXID(79"),
    ],
)
def test_a_pattern_re2_cannot_compile_is_refused_with_its_path(
    minimal: dict[str, Any], pattern: str, why: str
) -> None:
    found = messages(_match(minimal, status="True", reason=pattern))
    assert list(found) == ["spec.faults[0].match[0].reason"]
    message = found["spec.faults[0].match[0].reason"]
    assert message.startswith(f"{pattern!r} is not a valid RE2 regular expression: {why}")
    assert "no backreferences or lookarounds" in message


def test_an_empty_or_huge_pattern_is_refused(minimal: dict[str, Any]) -> None:
    assert (
        "is empty"
        in messages(_match(minimal, status="True", reason=""))["spec.faults[0].match[0].reason"]
    )
    assert (
        "at most 1024"
        in messages(_match(minimal, status="True", reason="a" * 1025))[
            "spec.faults[0].match[0].reason"
        ]
    )


# --- defect 9: bounds -----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["24000000000h", "9" * 31 + "h", "8761h", "525601m", "1e400s"])
def test_an_overflowing_or_too_long_duration_is_a_field_error(
    minimal: dict[str, Any], text: str
) -> None:
    """The overflow the hostile-policy fuzz found (issue 12, defect 9) is an error, not a crash."""
    minimal["spec"]["faults"][0]["tolerate"] = text
    found = messages(minimal)
    assert list(found) == ["spec.faults[0].tolerate"]


def test_the_longest_duration_is_accepted(minimal: dict[str, Any]) -> None:
    minimal["spec"]["faults"][0]["tolerate"] = "8760h"
    assert policy_parsing.parse_policy(minimal).faults[0].tolerate == timedelta(hours=8760)
    minimal["spec"]["faults"][0]["tolerate"] = "8759h59m59.999s"
    assert messages(minimal) == {}


@pytest.mark.parametrize(
    ("where", "value", "path"),
    [
        (("faults", 0, "ladder", 0, "retries"), 101, "spec.faults[0].ladder[0].retries"),
        (("history",), {"maxEpisodes": 1001}, "spec.history.maxEpisodes"),
        (("rate",), {"max": 10_001, "per": "1h"}, "spec.rate.max"),
        (("circuitBreaker",), {"maxUnhealthy": 100_001}, "spec.circuitBreaker.maxUnhealthy"),
        (("circuitBreaker",), {"maxUnhealthy": "999999"}, "spec.circuitBreaker.maxUnhealthy"),
        (
            ("circuitBreaker",),
            {"maxUnhealthy": 1, "minNodes": 100_001},
            "spec.circuitBreaker.minNodes",
        ),
        (("budgets",), [{"nodes": 1}] * 17, "spec.budgets"),
        (("pauseRequests",), ["x"] * 33, "spec.pauseRequests"),
        (("pauseRequests",), ["x" * 254], "spec.pauseRequests[0]"),
        (("faults", 0, "match", 0, "type"), "T" * 317, "spec.faults[0].match[0].type"),
        (("nodeSelector",), {"matchLabels": {"k" * 318: "v"}}, "spec.nodeSelector.matchLabels"),
        (("nodeSelector",), {"matchLabels": {"k": "v" * 64}}, "spec.nodeSelector.matchLabels.k"),
        (
            ("budgets",),
            [{"nodes": 1, "schedule": "@daily " * 30, "duration": "1h"}],
            "spec.budgets[0].schedule",
        ),
    ],
)
def test_every_count_string_and_list_is_bounded(
    minimal: dict[str, Any], where: tuple[Any, ...], value: Any, path: str
) -> None:
    target: Any = minimal["spec"]
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = value
    found = messages(minimal)
    assert found, "the value is out of bounds"
    assert all(p.startswith(path) for p in found), found


def test_many_errors_are_each_named_once(minimal: dict[str, Any]) -> None:
    minimal["spec"]["faults"] = [
        dict(minimal["spec"]["faults"][0], name=f"f{i}") for i in range(33)
    ]
    assert list(messages(minimal)) == ["spec.faults"]


# --- the cron pattern the CRD carries -------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "0 9 * * 1-5",
        "@daily",
        "@Weekly",
        " */15 0-23/2 1,15 JAN-mar mon-FRI ",
        "0 0 ? * 7",
        "007 00 01 01 0",
        "0 0 1-31/2 * ?",
        "5/10 * * * *",
        "0 0 * * SUN,SAT",
    ],
)
def test_the_crd_cron_pattern_accepts_what_the_operator_accepts(expr: str) -> None:
    schedule.parse(expr)
    assert re2.compile(CRON_PATTERN).fullmatch(expr) is not None


@pytest.mark.parametrize(
    "expr",
    [
        "0 25 * * *",
        "60 * * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "0 0 * * * *",
        "? * * * *",
        "0/0 * * * *",
        "TZ=UTC 0 0 * * *",
        "@often",
    ],
)
def test_the_crd_cron_pattern_refuses_out_of_range_fields(expr: str) -> None:
    with pytest.raises(schedule.ScheduleError):
        schedule.parse(expr)
    assert re2.compile(CRON_PATTERN).fullmatch(expr) is None
