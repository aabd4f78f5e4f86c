"""Hostile Node objects (hypothesis): missing or non-mapping status, conditions that are not
dicts, odd or duplicate types, huge and unicode messages, bad timestamps, a thousand
conditions. `to_view` and `is_relevant_change` never raise, and the planner on the resulting
views never raises and never acts on (or opens an incident for) a node whose fault condition
is not well formed: an operator that cannot classify a node leaves it alone."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remediation_operator.api import policy_parsing
from remediation_operator.domain import planner
from remediation_operator.domain.effects import Announce
from remediation_operator.domain.fleet import Snapshot
from remediation_operator.engine import nodes as node_views
from tests.integration.conftest import FAULT_REASONS, cordon_only, policy

pytestmark = pytest.mark.reliability

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TYPE = "AcceleratedHardwareReady"
POLICY = policy_parsing.parse_policy(policy(faults=cordon_only()))
WATCHED = frozenset({TYPE})

odd_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "False", "True", "Unknown", "false", " False", "NvidiaXID62Error"]),
    st.sampled_from(["NvidiaXID62Error ", "nvidiaxid62error", "NvidiaXID62Error\n", "🔥" * 50]),
    st.just("m" * 100_000),
)
odd_value = st.one_of(
    st.none(), st.integers(), st.booleans(), st.floats(), odd_text, st.lists(st.integers())
)
timestamps = st.one_of(
    odd_value,
    st.sampled_from(
        [
            "2026-11-30T11:59:00Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59-23:59",
            "2026-13-45T99:99:99Z",
            "yesterday",
            "2026-11-30T11:59:00+14:00",
            "2026-11-30",
        ]
    ),
)


def condition(type_: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": type_},
            optional={
                "status": st.one_of(odd_value, st.sampled_from(["False", "True", "Unknown"])),
                "reason": st.one_of(odd_value, st.sampled_from(["NvidiaXID62Error", "DCGMError"])),
                "message": odd_text,
                "lastHeartbeatTime": timestamps,
                "lastTransitionTime": timestamps,
            },
        ),
        odd_value,
    )


condition_types = st.one_of(st.sampled_from([TYPE, "Ready", "", TYPE.lower()]), odd_value)
nodes = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(
            odd_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "labels": st.one_of(
                        odd_value,
                        st.just({"nvidia.com/gpu.present": "true"}),
                        st.dictionaries(st.text(max_size=8), odd_value, max_size=3),
                    ),
                    "creationTimestamp": timestamps,
                    "annotations": st.one_of(odd_value, st.dictionaries(odd_text, odd_value)),
                },
            ),
        ),
        "spec": st.one_of(
            odd_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "unschedulable": odd_value,
                    "taints": st.one_of(odd_value, st.lists(odd_value, max_size=3)),
                },
            ),
        ),
        "status": st.one_of(
            odd_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "conditions": st.one_of(
                        odd_value, st.lists(condition(condition_types), max_size=6)
                    ),
                    "nodeInfo": st.one_of(odd_value, st.fixed_dictionaries({"bootID": odd_value})),
                },
            ),
        ),
    },
)


@st.composite
def near_valid_nodes(draw: st.DrawFn) -> dict[str, Any]:
    """A selected node whose conditions mix junk with one fault condition that is either
    well formed or off by one detail (case, whitespace, type, status)."""
    fault = {
        "type": draw(st.sampled_from([TYPE, TYPE, TYPE, TYPE.lower(), TYPE + " "])),
        "status": draw(st.sampled_from(["False", "False", "false", "Unknown", "True", None])),
        "reason": draw(
            st.sampled_from(["NvidiaXID62Error", "DCGMError", "NvidiaXID62Error ", "XID62", 62])
        ),
        "message": draw(odd_text),
        "lastHeartbeatTime": draw(timestamps),
    }
    junk = draw(st.lists(condition(condition_types), max_size=5))
    junk.insert(draw(st.integers(min_value=0, max_value=len(junk))), fault)
    return {
        "metadata": {
            "name": draw(odd_text),
            "labels": {"nvidia.com/gpu.present": "true"},
            "creationTimestamp": draw(timestamps),
        },
        "spec": {"unschedulable": draw(odd_value)},
        "status": {"conditions": junk},
    }


any_nodes = st.one_of(nodes, near_valid_nodes())


def classifiable_fault(node: Mapping[str, Any]) -> bool:
    """Independent oracle: the node's first well-typed AcceleratedHardwareReady condition says
    status "False" with a reason the policy's pattern matches in full."""
    status = node.get("status")
    raw = status.get("conditions") if isinstance(status, Mapping) else None
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, Mapping) and item.get("type") == TYPE:
            reason = item.get("reason")
            return (
                item.get("status") == "False"
                and isinstance(reason, str)
                and re.fullmatch(FAULT_REASONS, reason) is not None
            )
    return False


def selected(node: Mapping[str, Any]) -> bool:
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return isinstance(labels, Mapping) and labels.get("nvidia.com/gpu.present") == "true"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_nodes, min_size=1, max_size=5), st.lists(any_nodes, min_size=1, max_size=5))
def test_hostile_nodes_never_crash_and_unclassifiable_ones_are_left_alone(
    before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> None:
    for old, new in zip(before, after, strict=False):
        node_views.is_relevant_change(old, new, WATCHED, timedelta(seconds=30))
        node_views.is_relevant_change(None, new, WATCHED)
    views = {}
    raw = {}
    for index, body in enumerate(after):
        view = node_views.to_view(body)
        assert view.name == node_views.name_of(body)
        assert all(len(c.message) <= 4096 and len(c.reason) <= 4096 for c in view.conditions)
        name = f"node-{index}"
        views[name] = view.__class__(**{**view.__dict__, "name": name})
        raw[name] = body
    chosen = {n: v for n, v in views.items() if selected(raw[n])}
    result = planner.plan(Snapshot(nodes=chosen), POLICY, NOW)
    touched = {e.node for e in result.effects if not isinstance(e, Announce)}
    opened = {r.node for r in result.remediations}
    for name in touched | opened:
        assert classifiable_fault(raw[name]), f"acted on unclassifiable node {raw[name]!r:.300}"
    for name, view in chosen.items():
        created = view.created_at
        if classifiable_fault(raw[name]) and (created is None or created <= NOW):
            assert name in opened, "a well-formed fault on a selected node was not opened"


def test_a_thousand_conditions_with_huge_messages_are_read_quickly() -> None:
    conditions: list[Any] = [
        {"type": f"Vendor{i}", "status": "True", "message": "é" * 10_000} for i in range(999)
    ]
    conditions.append({"type": TYPE, "status": "False", "reason": "NvidiaXID62Error"})
    body = {
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"conditions": conditions},
    }
    started = time.monotonic()
    view = node_views.to_view(body)
    relevant = node_views.is_relevant_change(body, body, WATCHED)
    result = planner.plan(Snapshot(nodes={"n": view}), POLICY, NOW)
    assert time.monotonic() - started < 1.0
    assert len(view.conditions) == 1000
    assert not relevant
    assert [r.node for r in result.remediations] == ["n"]


def test_a_duplicate_condition_type_is_read_first_wins_never_both() -> None:
    body = {
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {
            "conditions": [
                {"type": TYPE, "status": "True", "reason": "Healthy"},
                {"type": TYPE, "status": "False", "reason": "NvidiaXID62Error"},
            ]
        },
    }
    result = planner.plan(Snapshot(nodes={"n": node_views.to_view(body)}), POLICY, NOW)
    assert result.remediations == ()
    assert result.effects == ()
