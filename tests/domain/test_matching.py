"""Which fault a node shows: severity order, regex on the whole reason, stale and Unknown."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.domain import matching
from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.policy import Action, ConditionMatch, Fault, Step

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
FAULTS = (NVLINK, XID, NPD, SILENT)


def view(*conditions: Condition) -> NodeView:
    beat = Condition("GPUHealthy", "True", last_heartbeat_time=T0)
    return NodeView("n", conditions=(*conditions, beat))


def test_healthy_node_shows_nothing() -> None:
    node = view(Condition("AcceleratedHardwareReady", "True", "Ready"))
    assert matching.match(node, FAULTS, T0) is None


def test_reason_regex_must_match_the_whole_reason() -> None:
    near_miss = view(Condition("AcceleratedHardwareReady", "False", "NvidiaXID620Error"))
    assert matching.match(near_miss, FAULTS, T0) is None
    hit = view(Condition("AcceleratedHardwareReady", "False", "NvidiaXID62Error"))
    found = matching.match(hit, FAULTS, T0)
    assert found is not None
    assert (found.fault.name, found.weak) == ("xid", False)


def test_most_severe_fault_wins_whatever_the_condition_order() -> None:
    npd = Condition("GPUProblem", "True", "Whatever")
    nvlink = Condition("AcceleratedHardwareReady", "False", "NvidiaNVLinkError")
    for node in (view(npd, nvlink), view(nvlink, npd)):
        found = matching.match(node, FAULTS, T0)
        assert found is not None
        assert found.fault.name == "nvlink"
        assert found.severity == 0


def test_stale_heartbeat_is_weak_evidence() -> None:
    node = NodeView(
        "n", conditions=(Condition("GPUHealthy", "True", last_heartbeat_time=T0 - 6 * MIN),)
    )
    found = matching.match(node, FAULTS, T0)
    assert found is not None
    assert (found.fault.name, found.weak) == ("silent", True)
    fresh = NodeView(
        "n", conditions=(Condition("GPUHealthy", "True", last_heartbeat_time=T0 - 4 * MIN),)
    )
    assert matching.match(fresh, FAULTS, T0) is None


def test_missing_condition_counts_as_stale() -> None:
    found = matching.match(NodeView("n"), FAULTS, T0)
    assert found is not None
    assert (found.fault.name, found.condition, found.weak) == ("silent", None, True)


def test_unknown_status_is_weak_evidence() -> None:
    unknown_ok = Fault("hw", (ConditionMatch("AcceleratedHardwareReady", "Unknown"),), CORDON)
    node = view(Condition("AcceleratedHardwareReady", "Unknown", "NodeStatusUnknown"))
    found = matching.match(node, (unknown_ok,), T0)
    assert found is not None
    assert found.weak


def test_strong_evidence_beats_stale_for_the_same_fault() -> None:
    both = Fault("gpu", (ConditionMatch("GPUHealthy", "False", stale_after=5 * MIN),), CORDON)
    node = NodeView(
        "n", conditions=(Condition("GPUHealthy", "False", last_heartbeat_time=T0 - 9 * MIN),)
    )
    found = matching.match(node, (both,), T0)
    assert found is not None
    assert not found.weak


def test_remembered_answer_expires_when_a_heartbeat_goes_stale() -> None:
    node = NodeView("n", conditions=(Condition("GPUHealthy", "True", last_heartbeat_time=T0),))
    matcher = matching.Matcher(FAULTS)
    assert matcher.match(node, T0 + MIN) is None
    assert matcher.match(node, T0 + 5 * MIN) is None
    later = matcher.match(node, T0 + 5 * MIN + timedelta(seconds=1))
    assert later is not None
    assert later.fault.name == "silent"
    assert matcher.faulty({"n": node}, T0 + MIN) == {}


@given(
    beats=st.lists(st.integers(min_value=0, max_value=900), min_size=1, max_size=3),
    queries=st.lists(st.integers(min_value=0, max_value=1200), min_size=1, max_size=8),
    status=st.sampled_from(["True", "False", "Unknown"]),
)
@settings(max_examples=150, deadline=None)
def test_remembered_answers_equal_fresh_ones(
    beats: list[int], queries: list[int], status: str
) -> None:
    """Whatever order a node is asked about, the memory never changes the answer."""
    nodes = [
        NodeView(
            f"n{i}",
            conditions=(
                Condition("GPUHealthy", status, last_heartbeat_time=T0 + timedelta(seconds=b)),
            ),
        )
        for i, b in enumerate(beats)
    ]
    both = Fault("gpu", (ConditionMatch("GPUHealthy", "False", stale_after=5 * MIN),), CORDON)
    faults = (both, SILENT)
    remembering = matching.Matcher(faults)
    for q in queries:
        now = T0 + timedelta(seconds=q)
        for node in nodes:
            fresh, _ = matching.Matcher(faults)._evaluate(node, now)
            assert remembering.match(node, now) == fresh
