"""The per-event Node filter answers exactly as before, and says what the node cache may skip."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.domain.fleet import EXCLUDE_KEY, NodeView
from remediation_operator.engine import nodes
from remediation_operator.engine.nodes import AGENT_ACK_ANNOTATION, Change
from tests.node_path import reference_filter

GPU = "AcceleratedHardwareReady"
WATCHED = frozenset({GPU})
BEATS = ["2026-11-30T11:00:00Z", "2026-11-30T11:04:00Z", "2026-11-30T11:20:00Z"]


def condition(type_: str, status: str, reason: str, beat: str = BEATS[0]) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "",
        "lastHeartbeatTime": beat,
        "lastTransitionTime": "2026-11-30T10:00:00Z",
    }


def node() -> dict[str, Any]:
    """A Node as the API returns it, with the three conditions the benchmark churns."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "uid": "u-1",
            "resourceVersion": "10",
            "creationTimestamp": "2026-11-30T09:00:00Z",
            "labels": {"pool": "h100"},
            "annotations": {"other": "x"},
        },
        "spec": {"providerID": "aws:///i-1"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                condition("Ready", "True", "KubeletReady"),
                condition(GPU, "True", "GPUsHealthy"),
                condition("KernelDeadlock", "False", "KernelHasNoDeadlock"),
            ],
            "nodeInfo": {"bootID": "b-1"},
        },
    }


def after(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    new = node()
    edit(new)
    new["metadata"]["resourceVersion"] = "11"  # every write moves it
    return new


def find(body: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in body["status"]["conditions"] if c["type"] == type_)
    return found


def beat(type_: str, at: str) -> Callable[[dict[str, Any]], None]:
    return lambda n: find(n, type_).update(lastHeartbeatTime=at)


def classify(edit: Callable[[dict[str, Any]], None], stale: timedelta | None = None) -> Change:
    return nodes.classify(node(), after(edit), WATCHED, stale)


# Heartbeats -------------------------------------------------------------------------------------


@pytest.mark.parametrize("type_", ["Ready", GPU])
def test_a_heartbeat_alone_is_irrelevant_without_stale_after_but_changes_the_view(
    type_: str,
) -> None:
    assert classify(beat(type_, BEATS[2])) is Change.VIEW


@pytest.mark.parametrize("type_", ["Ready", GPU])
def test_with_stale_after_only_an_advance_beyond_it_is_relevant(type_: str) -> None:
    ten = timedelta(minutes=10)
    assert classify(beat(type_, BEATS[1]), ten) is Change.VIEW, "4 minutes: within staleAfter"
    assert classify(beat(type_, BEATS[2]), ten) is Change.RELEVANT, "20 minutes: beyond it"
    assert classify(beat(type_, BEATS[2]), None) is Change.VIEW


def test_a_heartbeat_appearing_is_relevant_only_with_stale_after() -> None:
    old = node()
    del find(old, GPU)["lastHeartbeatTime"]
    new = node()
    assert nodes.classify(old, new, WATCHED, timedelta(minutes=10)) is Change.RELEVANT
    assert nodes.classify(old, new, WATCHED, None) is Change.VIEW


def test_an_advance_of_exactly_stale_after_or_a_rewritten_instant_is_not_relevant() -> None:
    four = timedelta(minutes=4)
    assert classify(beat(GPU, BEATS[1]), four) is Change.VIEW, "exactly staleAfter is not beyond"
    assert classify(beat(GPU, "2026-11-30T12:00:00+01:00"), timedelta(0)) is Change.VIEW
    assert classify(beat(GPU, BEATS[1]), timedelta(minutes=3)) is Change.RELEVANT


def test_an_unreadable_new_heartbeat_ends_no_staleness() -> None:
    assert classify(beat(GPU, "yesterday"), timedelta(minutes=1)) is Change.VIEW


# What the cache may skip ------------------------------------------------------------------------


def test_a_flip_of_an_unwatched_condition_is_unseen() -> None:
    def flip(n: dict[str, Any]) -> None:
        find(n, "KernelDeadlock").update(status="True", lastTransitionTime=BEATS[2])

    assert classify(flip) is Change.UNSEEN
    assert classify(flip, timedelta(minutes=1)) is Change.UNSEEN
    assert classify(lambda n: None) is Change.UNSEEN, "only resourceVersion moved"
    assert classify(lambda n: n["status"]["allocatable"].update(cpu="7")) is (Change.UNSEEN), (
        "no view reads the allocatable resources but the GPUs"
    )
    assert (
        nodes.classify(node(), after(flip), WATCHED | {"KernelDeadlock"}, None) is Change.RELEVANT
    ), "once a policy watches it, the same flip matters"


def test_a_change_of_the_gpus_advertised_is_relevant() -> None:
    """Recovery waits for the device plugin to advertise every GPU again (D68): the event
    that brings allocatable back to the capacity must wake the node's plan."""
    assert classify(lambda n: n["status"].update(allocatable={"nvidia.com/gpu": "7"})) is (
        Change.RELEVANT
    )
    assert classify(lambda n: n["status"].update(capacity={"nvidia.com/gpu": "4"})) is (
        Change.RELEVANT
    )


@pytest.mark.parametrize(
    "edit",
    [
        lambda n: find(n, GPU).update(message="XID 13 seen, recovered"),
        lambda n: find(n, "Ready").update(lastTransitionTime=BEATS[1]),
        lambda n: n["metadata"]["annotations"].update(other="y"),
        lambda n: n["metadata"].update(creationTimestamp=BEATS[1]),
        lambda n: n["spec"].update(providerID="aws:///i-2"),
        lambda n: n["status"]["nodeInfo"].update(kernelVersion="6.8"),
        lambda n: n["status"]["conditions"].insert(0, condition("Ready", "True", "Other")),
        lambda n: n["status"]["conditions"].insert(0, n["status"]["conditions"].pop(1)),
    ],
    ids=[
        "watched message",
        "Ready transition time",
        "an annotation",
        "creationTimestamp",
        "spec field",
        "nodeInfo",
        "a duplicate Ready in front",
        "watched conditions reordered",
    ],
)
def test_anything_else_that_changes_the_view_is_never_skipped(
    edit: Callable[[dict[str, Any]], None],
) -> None:
    assert classify(edit) is not Change.UNSEEN


def test_decisions_are_still_relevant() -> None:
    assert classify(lambda n: find(n, GPU).update(status="False")) is Change.RELEVANT
    assert classify(lambda n: find(n, "Ready").update(reason="Other")) is Change.RELEVANT
    assert classify(lambda n: n["metadata"]["labels"].update(pool="a100")) is Change.RELEVANT
    assert (
        classify(lambda n: n["metadata"]["annotations"].update({AGENT_ACK_ANNOTATION: "a"}))
        is Change.RELEVANT
    )
    assert (
        classify(lambda n: n["metadata"]["annotations"].update({EXCLUDE_KEY: "true"}))
        is Change.RELEVANT
    ), "an opt-out annotation (defect 14)"
    assert classify(lambda n: n["spec"].update(unschedulable=True)) is Change.RELEVANT
    assert classify(lambda n: n["spec"].update(taints=[{"key": "k"}])) is Change.RELEVANT
    assert classify(lambda n: n["status"]["nodeInfo"].update(bootID="b-2")) is Change.RELEVANT
    assert nodes.classify(None, node(), WATCHED) is Change.RELEVANT
    assert nodes.classify(node(), None, WATCHED) is Change.RELEVANT


# Same answers as the previous filter, on random and malformed pairs -----------------------------

scalars = st.none() | st.booleans() | st.integers(-2, 2) | st.floats() | st.sampled_from(["", "x"])
anything = scalars | st.lists(scalars, max_size=2) | st.dictionaries(st.just("k"), scalars)
beats = st.sampled_from([*BEATS, "2026-11-30T12:20:00+01:00", "2026-11-30T11:00:00", "bad"])
types = st.sampled_from(["Ready", GPU, "KernelDeadlock", ""])


def maybe(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional=keys) | anything


conditions = maybe(
    {
        "type": types | anything,
        "status": st.sampled_from(["True", "False", "Unknown"]) | anything,
        "reason": st.sampled_from(["A", "B"]) | anything,
        "message": st.sampled_from(["", "m"]),
        "lastHeartbeatTime": beats | anything,
        "lastTransitionTime": beats,
    }
)
well_formed = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("n"), "labels": st.just({"a": "1"}), "resourceVersion": st.just("1")}
        ),
        "spec": st.just({}),
        "status": st.fixed_dictionaries(
            {
                "conditions": st.lists(
                    st.fixed_dictionaries(
                        {
                            "type": types,
                            "status": st.sampled_from(["True", "False"]),
                            "reason": st.just("A"),
                            "lastHeartbeatTime": beats,
                        }
                    ),
                    max_size=3,
                )
            }
        ),
    }
)
node_objects = well_formed | maybe(
    {
        "metadata": maybe(
            {
                "name": st.just("n"),
                "resourceVersion": st.sampled_from(["1", "2"]),
                "labels": st.sampled_from([{"a": "1"}, {"a": "2"}]) | anything,
                "annotations": st.sampled_from(
                    [{}, {AGENT_ACK_ANNOTATION: "x"}, {"o": "1"}, {EXCLUDE_KEY: "true"}]
                ),
                "creationTimestamp": beats,
            }
        ),
        "spec": maybe(
            {
                "unschedulable": st.sampled_from([True, False, "true"]),
                "taints": st.sampled_from([[], [{"key": "k"}]]),
            }
        ),
        "status": maybe(
            {
                "conditions": st.lists(conditions, max_size=4) | anything,
                "nodeInfo": maybe({"bootID": st.sampled_from(["b1", "b2"])}),
                "allocatable": st.sampled_from(
                    [{"gpu": "8"}, {"gpu": "7"}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "7"}]
                ),
                "capacity": st.sampled_from([{"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": 8}]),
            }
        ),
    }
)
PATHS = [
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "resourceVersion"),
    ("metadata", "creationTimestamp"),
    ("spec", "unschedulable"),
    ("spec", "taints"),
    ("status", "nodeInfo"),
    ("status", "allocatable"),
    ("status", "capacity"),
    ("status", "conditions"),
]
CONDITION_KEYS = ["type", "status", "reason", "message", "lastHeartbeatTime", "lastTransitionTime"]


@st.composite
def updates(draw: st.DrawFn) -> tuple[Any, Any]:
    """A Node body and the next version of it: a few edits apart, as watch events are."""
    old = draw(node_objects)
    if not isinstance(old, dict):
        return old, draw(node_objects)
    new: dict[str, Any] = copy.deepcopy(old)
    for _ in range(draw(st.integers(0, 3))):
        status = new.get("status")
        raw = status.get("conditions") if isinstance(status, dict) else None
        if isinstance(raw, list) and raw and draw(st.booleans()):
            index = draw(st.integers(0, len(raw) - 1))
            kind = draw(st.sampled_from(["set", "drop", "move"]))
            if kind == "drop":
                raw.pop(index)
            elif kind == "move":
                raw.insert(0, raw.pop(index))
            elif isinstance(raw[index], dict):
                key = draw(st.sampled_from(CONDITION_KEYS))
                raw[index][key] = draw(types if key == "type" else beats | scalars)
            continue
        top, key = draw(st.sampled_from(PATHS))
        part = new.get(top)
        if not isinstance(part, dict):
            part = new[top] = {}
        part[key] = draw(node_objects | anything)
    return old, new


stale_values = st.sampled_from([None, timedelta(0), timedelta(minutes=5), timedelta(minutes=-1)])
watched_sets = st.sampled_from([(), (GPU,), [GPU, "KernelDeadlock"], frozenset({""})])


def project(view: NodeView, watched: Collection[str]) -> NodeView:
    """The view without the conditions no plan reads (neither Ready nor watched)."""
    kept = tuple(c for c in view.conditions if c.type == "Ready" or c.type in watched)
    return dataclasses.replace(view, conditions=kept)


@settings(max_examples=600, deadline=None)
@given(updates(), watched_sets, stale_values)
def test_relevance_is_what_the_previous_filter_said(
    pair: tuple[Any, Any], watched: Collection[str], stale: timedelta | None
) -> None:
    old, new = pair
    for a, b in ((old, new), (new, old)):
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        expected = reference_filter.is_relevant_change(a, b, watched, stale)
        assert nodes.is_relevant_change(a, b, watched, stale) is expected
        change = nodes.classify(a, b, watched, stale)
        assert (change is Change.RELEVANT) is expected
        if change is Change.UNSEEN:
            assert project(nodes.to_view(a), watched) == project(nodes.to_view(b), watched)
