"""Which fault a node shows: severity order, regex on the whole reason, stale, missing, Unknown.

Staleness is judged on our clock from `Condition.observed_at` (when the operator last saw the
condition change), never from the remote `lastHeartbeatTime` (issue 12, defects 1 and 4).
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.domain import matching, patterns
from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    Step,
    WhenMissing,
)

from .fake_cluster import MIN, T0

CORDON = (Step(Action.Cordon),)
XID = Fault(
    "xid", (ConditionMatch("AcceleratedHardwareReady", "False", r"NvidiaXID(46|62)Error"),), CORDON
)
NVLINK = Fault(
    "nvlink", (ConditionMatch("AcceleratedHardwareReady", "False", r"NvidiaNVLinkError"),), CORDON
)
NPD = Fault("npd", (ConditionMatch("GPUProblem", "True"),), CORDON)
SILENT = Fault("silent", (ConditionMatch("GPUHealthy", stale_after=5 * MIN),), CORDON)
EXPECTED = Fault(
    "expected",
    (ConditionMatch("GPUHealthy", stale_after=5 * MIN, when_missing=WhenMissing.Fault),),
    CORDON,
)
FAULTS = (NVLINK, XID, NPD, SILENT)


def seen(type_: str, status: str, reason: str = "", *, at: timedelta = timedelta(0)) -> Condition:
    """A condition the operator last saw change at T0 + `at`."""
    return Condition(type_, status, reason, observed_at=T0 + at)


def view(*conditions: Condition) -> NodeView:
    return NodeView("n", conditions=(*conditions, seen("GPUHealthy", "True")))


def test_healthy_node_shows_nothing() -> None:
    node = view(seen("AcceleratedHardwareReady", "True", "Ready"))
    assert matching.match(node, FAULTS, T0) is None


def test_reason_regex_must_match_the_whole_reason() -> None:
    near_miss = view(seen("AcceleratedHardwareReady", "False", "NvidiaXID620Error"))
    assert matching.match(near_miss, FAULTS, T0) is None
    hit = view(seen("AcceleratedHardwareReady", "False", "NvidiaXID62Error"))
    found = matching.match(hit, FAULTS, T0)
    assert found is not None
    assert (found.fault.name, found.weak, found.condition_type) == (
        "xid",
        False,
        "AcceleratedHardwareReady",
    )


def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    """Defect 8: `(a+)+$` against `aaaa...!` takes exponential time with backtracking."""
    evil = Fault("evil", (ConditionMatch("GPUProblem", "True", r"(a+)+$"),), CORDON)
    node = view(seen("GPUProblem", "True", "a" * 4000 + "!"))
    started = time.thread_time()  # CPU time: other processes stretch only the wall clock
    assert matching.match(node, (evil,), T0) is None
    assert time.thread_time() - started < 0.5


def test_a_pattern_re2_cannot_compile_is_refused() -> None:
    backreference = Fault("bad", (ConditionMatch("GPUProblem", "True", r"(a)\1"),), CORDON)
    with pytest.raises(patterns.PatternError, match="RE2"):
        matching.match(view(), (backreference,), T0)


def test_most_severe_fault_wins_whatever_the_condition_order() -> None:
    npd = seen("GPUProblem", "True", "Whatever")
    nvlink = seen("AcceleratedHardwareReady", "False", "NvidiaNVLinkError")
    for node in (view(npd, nvlink), view(nvlink, npd)):
        found = matching.match(node, FAULTS, T0)
        assert found is not None
        assert found.fault.name == "nvlink"
        assert found.severity == 0


def test_a_condition_not_seen_to_change_for_stale_after_is_weak_evidence() -> None:
    node = NodeView("n", conditions=(seen("GPUHealthy", "True"),))
    assert matching.match(node, FAULTS, T0 + 5 * MIN) is None, "exactly staleAfter: not stale"
    found = matching.match(node, FAULTS, T0 + 5 * MIN + timedelta(seconds=1))
    assert found is not None
    assert (found.fault.name, found.weak, found.stale) == ("silent", True, True)
    assert found.condition_type == "GPUHealthy"
    assert found.observed_at == T0


def test_the_remote_heartbeat_is_never_compared_with_our_clock() -> None:
    """A heartbeat a year in the future, or ten minutes old when first seen, says nothing:
    only how long WE have not seen the condition change counts."""
    future = replace(seen("GPUHealthy", "True"), last_heartbeat_time=T0 + timedelta(days=365))
    old = replace(seen("GPUHealthy", "True"), last_heartbeat_time=T0 - 10 * MIN)
    for condition in (future, old):
        node = NodeView("n", conditions=(condition,))
        assert matching.match(node, FAULTS, T0 + 4 * MIN) is None
        found = matching.match(node, FAULTS, T0 + 6 * MIN)
        assert found is not None
        assert found.fault.name == "silent"


def test_a_condition_without_an_observation_time_is_never_stale() -> None:
    untracked = NodeView("n", conditions=(Condition("GPUHealthy", "True"),))
    assert matching.match(untracked, FAULTS, T0 + timedelta(days=30)) is None


def test_a_source_that_never_reported_is_not_a_stale_source() -> None:
    """Defect 1: `{type: GPUProblem, staleAfter: 5m}` on a node without GPUProblem."""
    assert matching.match(NodeView("n"), FAULTS, T0) is None
    eks_only = NodeView("n", conditions=(seen("AcceleratedHardwareReady", "True"),))
    assert matching.match(eks_only, FAULTS, T0 + timedelta(days=1)) is None


def test_when_missing_fault_makes_an_absent_expected_condition_weak_evidence() -> None:
    found = matching.match(NodeView("n"), (XID, EXPECTED), T0)
    assert found is not None
    assert (found.fault.name, found.condition, found.weak) == ("expected", None, True)
    assert found.condition_type == "GPUHealthy", "the message names the expected condition"
    assert "GPUHealthy never reported" in matching.describe(found, T0)
    present = NodeView("n", conditions=(seen("GPUHealthy", "True"),))
    assert matching.match(present, (XID, EXPECTED), T0) is None


def test_the_evidence_names_the_condition_that_went_stale() -> None:
    """Defect 4: the Event named another condition than the stale one."""
    other_first = Fault(
        "health",
        (
            ConditionMatch("AcceleratedHardwareReady", "Unknown"),
            ConditionMatch("GPUProblem", stale_after=5 * MIN),
        ),
        CORDON,
    )
    node = NodeView("n", conditions=(seen("GPUProblem", "False"),))
    found = matching.match(node, (other_first,), T0 + 6 * MIN)
    assert found is not None
    assert found.condition_type == "GPUProblem"
    text = matching.describe(found, T0 + 6 * MIN)
    assert text.startswith("GPUProblem=False")
    assert "not seen to change for 6m" in text


def test_unknown_status_is_weak_evidence() -> None:
    unknown_ok = Fault("hw", (ConditionMatch("AcceleratedHardwareReady", "Unknown"),), CORDON)
    node = view(seen("AcceleratedHardwareReady", "Unknown", "NodeStatusUnknown"))
    found = matching.match(node, (unknown_ok,), T0)
    assert found is not None
    assert found.weak
    assert not found.stale


def test_a_strong_match_on_a_stale_condition_is_weak() -> None:
    both = Fault("gpu", (ConditionMatch("GPUHealthy", "False", stale_after=5 * MIN),), CORDON)
    node = NodeView("n", conditions=(seen("GPUHealthy", "False"),))
    fresh = matching.match(node, (both,), T0 + 4 * MIN)
    assert fresh is not None
    assert not fresh.weak
    stale = matching.match(node, (both,), T0 + 9 * MIN)
    assert stale is not None
    assert (stale.weak, stale.stale) == (True, True)


def test_a_stale_after_of_another_fault_sets_the_window_of_its_condition_type() -> None:
    """The freshness window is a property of the source: the policy's smallest staleAfter for
    the type, whichever fault it belongs to (the default policy keeps it in a separate fault)."""
    problem = Fault("npd", (ConditionMatch("GPUProblem", "True"),), CORDON)
    silent = Fault("npd-silent", (ConditionMatch("GPUProblem", stale_after=15 * MIN),), CORDON)
    node = NodeView("n", conditions=(seen("GPUProblem", "True", "XID79"),))
    fresh = matching.match(node, (problem, silent), T0 + 14 * MIN)
    assert fresh is not None
    assert (fresh.fault.name, fresh.weak) == ("npd", False)
    stale = matching.match(node, (problem, silent), T0 + 16 * MIN)
    assert stale is not None
    assert (stale.fault.name, stale.weak) == ("npd", True)
    assert stale.observed_at == T0, "the evidence is as old as our last sight of a change"
    # The re-check of one incident's fault uses the same windows when given the policy's faults.
    again = matching.match_fault(node, problem, T0 + 16 * MIN, (problem, silent))
    assert again is not None
    assert (again.fault.name, again.weak) == ("npd", True)
    alone = matching.match_fault(node, problem, T0 + 16 * MIN)
    assert alone is not None
    assert not alone.weak


def test_remembered_answer_expires_when_a_condition_goes_stale() -> None:
    node = NodeView("n", conditions=(seen("GPUHealthy", "True"),))
    matcher = matching.Matcher(FAULTS)
    assert matcher.match(node, T0 + MIN) is None
    assert matcher.match(node, T0 + 5 * MIN) is None
    later = matcher.match(node, T0 + 5 * MIN + timedelta(seconds=1))
    assert later is not None
    assert later.fault.name == "silent"
    assert matcher.faulty({"n": node}, T0 + MIN) == {}


def test_remembered_strong_answer_turns_weak_when_its_window_passes() -> None:
    problem = Fault("npd", (ConditionMatch("GPUProblem", "True"),), CORDON)
    silent = Fault("npd-silent", (ConditionMatch("GPUProblem", stale_after=15 * MIN),), CORDON)
    node = NodeView("n", conditions=(seen("GPUProblem", "True"),))
    matcher = matching.Matcher((problem, silent))
    first = matcher.match(node, T0)
    assert first is not None
    assert not first.weak
    _, until = matcher.evaluate(node, T0)
    assert until == T0 + 15 * MIN
    later = matcher.match(node, T0 + 16 * MIN)
    assert later is not None
    assert later.weak


@given(
    seen_at=st.lists(st.integers(min_value=0, max_value=900), min_size=1, max_size=3),
    queries=st.lists(st.integers(min_value=0, max_value=1200), min_size=1, max_size=8),
    status=st.sampled_from(["True", "False", "Unknown"]),
    missing=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_remembered_answers_equal_fresh_ones(
    seen_at: list[int], queries: list[int], status: str, missing: bool
) -> None:
    """Whatever order a node is asked about, the memory never changes the answer."""
    nodes = [
        NodeView(
            f"n{i}",
            conditions=(seen("GPUHealthy", status, at=timedelta(seconds=s)),),
        )
        for i, s in enumerate(seen_at)
    ]
    nodes.append(NodeView("bare"))
    both = Fault("gpu", (ConditionMatch("GPUHealthy", "False", stale_after=5 * MIN),), CORDON)
    slow = Fault("slow", (ConditionMatch("GPUHealthy", stale_after=12 * MIN),), CORDON)
    faults = (both, slow, EXPECTED if missing else SILENT)
    remembering = matching.Matcher(faults)
    for q in queries:
        now = T0 + timedelta(seconds=q)
        for node in nodes:
            fresh, _ = matching.Matcher(faults).evaluate(node, now)
            assert remembering.match(node, now) == fresh


def test_the_matcher_says_when_an_answer_next_changes_with_time_alone() -> None:
    """A plan must wake when a source goes silent: nothing else announces it."""
    quiet = NodeView("q", conditions=(seen("GPUHealthy", "True", at=timedelta(minutes=2)),))
    other = NodeView("o", conditions=(seen("GPUHealthy", "True", at=timedelta(minutes=3)),))
    untracked = NodeView("u", conditions=(Condition("GPUHealthy", "True"),))
    matcher = matching.Matcher(FAULTS)
    assert matcher.faulty({"q": quiet, "o": other, "u": untracked}, T0 + MIN) == {}
    assert matcher.next_change == T0 + 7 * MIN + timedelta(microseconds=1)
    assert matching.match(quiet, FAULTS, T0 + 7 * MIN) is None
    assert matching.match(quiet, FAULTS, matcher.next_change) is not None
    matcher.faulty({"u": untracked}, T0 + MIN)
    assert matcher.next_change is None


def test_except_reason_leaves_out_the_reasons_it_names() -> None:
    from remediation_operator.domain.policy import Action, ConditionMatch, Fault, Step

    catch_all = Fault(
        name="catch-all",
        match=(
            ConditionMatch(
                "AcceleratedHardwareReady", "False", except_reason=r"NvidiaXID(13|63)Error"
            ),
        ),
        ladder=(Step(Action.Cordon),),
    )

    def shows(reason: str) -> bool:
        node = NodeView(
            "gpu-1", conditions=(Condition("AcceleratedHardwareReady", "False", reason),)
        )
        return matching.match(node, (catch_all,), T0) is not None

    assert shows("NvidiaXID79Error")
    assert shows("SomethingNew")
    assert not shows("NvidiaXID63Error")
    assert not shows("NvidiaXID13Error")
    assert shows("NvidiaXID130Error")  # the whole reason must match the exception
