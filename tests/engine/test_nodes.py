"""Node objects from the API become NodeViews without ever crashing; the event filter is tight."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.engine import nodes

T = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)


def node_object(**overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": "gpu-7",
            "labels": {"pool": "h100", "remediation.gpuops.io/exclude": "true"},
            "annotations": {},
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "spec": {
            "unschedulable": True,
            "taints": [
                {
                    "key": "remediation.gpuops.io/quarantine",
                    "value": "gpu-xid",
                    "effect": "NoSchedule",
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-11-30T10:59:00Z",
                    "lastTransitionTime": "2026-11-30T10:01:00.123456+01:00",
                },
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "False",
                    "reason": "NvidiaXID62Error",
                    "message": "XID 62 on GPU 3",
                    "lastHeartbeatTime": "2026-11-30T10:58:00Z",
                },
            ],
            "nodeInfo": {"bootID": "b-1"},
        },
    }
    obj.update(overrides)
    return obj


def test_a_well_formed_node_is_read_completely() -> None:
    view = nodes.to_view(node_object())

    assert view.name == "gpu-7"
    assert view.excluded
    assert view.unschedulable
    assert view.quarantined
    assert view.boot_id == "b-1"
    assert view.ready
    assert view.created_at == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    ready = view.condition("Ready")
    assert ready is not None
    assert ready.last_transition_time == datetime(2026, 11, 30, 9, 1, 0, 123456, tzinfo=UTC)
    gpu = view.condition("AcceleratedHardwareReady")
    assert gpu is not None
    assert (gpu.status, gpu.reason, gpu.message) == ("False", "NvidiaXID62Error", "XID 62 on GPU 3")


def test_missing_parts_read_as_absent() -> None:
    view = nodes.to_view({"metadata": {"name": "bare"}})

    assert (view.name, view.conditions, view.unschedulable, view.quarantined) == (
        "bare",
        (),
        False,
        False,
    )
    assert (view.boot_id, view.created_at, dict(view.labels)) == ("", None, {})
    assert not view.ready


def test_odd_values_are_ignored_not_fatal() -> None:
    obj = node_object()
    obj["metadata"]["labels"] = {"ok": "yes", "n": 3, 4: "x", "ü-label": "ünïcödé"}
    obj["metadata"]["creationTimestamp"] = "yesterday"
    obj["spec"] = {
        "unschedulable": "true",
        "taints": ["junk", {"key": "remediation.gpuops.io/quarantine", "effect": "NoExecute"}],
    }
    obj["status"]["conditions"] = [
        "junk",
        {"status": "True"},
        {"type": "Ready", "status": None, "lastHeartbeatTime": 12345},
        {"type": "Ready", "status": "False"},
        {
            "type": "GPUHealthy",
            "status": "True",
            "reason": "x" * 100_000,
            "lastHeartbeatTime": "9999-99-99T00:00:00Z",
        },
    ]
    obj["status"]["nodeInfo"] = "not a dict"

    view = nodes.to_view(obj)

    assert dict(view.labels) == {"ok": "yes", "ü-label": "ünïcödé"}
    assert view.created_at is None
    assert not view.unschedulable, "only the boolean true cordons"
    assert not view.quarantined, "our taint is NoSchedule; another effect is not ours"
    assert [c.type for c in view.conditions] == ["Ready", "GPUHealthy"], "first of a type wins"
    assert view.conditions[0].status == ""
    gpu = view.conditions[1]
    assert gpu.last_heartbeat_time is None
    assert len(gpu.reason) <= 4096
    assert view.boot_id == ""


def test_timestamps_parse_in_the_shapes_the_api_writes() -> None:
    assert nodes.parse_time("2026-11-30T11:00:00Z") == T
    assert nodes.parse_time("2026-11-30T11:00:00.5Z") == T + timedelta(milliseconds=500)
    assert nodes.parse_time("2026-11-30T12:00:00+01:00") == T
    assert nodes.parse_time("2026-11-30T11:00:00") == T, "naive means UTC"
    for bad in (
        "",
        "now",
        "2026-13-01T00:00:00Z",
        None,
        17,
        "9" * 100,
        "0001-01-01T00:00:00+01:00",
    ):
        assert nodes.parse_time(bad) is None


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
anything = (
    scalars
    | st.lists(scalars, max_size=3)
    | st.dictionaries(st.text(max_size=8), scalars, max_size=3)
)
timestamps = st.text(max_size=30) | st.datetimes().map(lambda d: d.isoformat() + "Z") | anything


def maybe(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """A dict with any subset of these keys, or something that is not a dict at all."""
    return st.fixed_dictionaries({}, optional=keys) | anything


conditions = st.lists(
    maybe(
        {
            "type": st.sampled_from(["Ready", "GPUHealthy", ""]) | anything,
            "status": st.sampled_from(["True", "False", "Unknown"]) | anything,
            "reason": anything,
            "lastHeartbeatTime": timestamps,
            "lastTransitionTime": timestamps,
        }
    ),
    max_size=4,
)
node_objects = maybe(
    {
        "metadata": maybe(
            {
                "name": anything,
                "labels": anything,
                "annotations": anything,
                "creationTimestamp": timestamps,
            }
        ),
        "spec": maybe({"unschedulable": anything, "taints": st.lists(anything, max_size=3)}),
        "status": maybe(
            {"conditions": conditions | anything, "nodeInfo": maybe({"bootID": anything})}
        ),
    }
)


@settings(max_examples=150, deadline=None)
@given(node_objects)
def test_no_node_object_makes_conversion_or_filtering_crash(obj: Any) -> None:
    if not isinstance(obj, dict):
        obj = {"metadata": obj}
    nodes.to_view(obj)
    nodes.is_relevant_change(obj, node_object(), ["GPUHealthy"], timedelta(minutes=5))
    nodes.is_relevant_change(node_object(), obj, ["GPUHealthy"], None)


WATCHED = ["AcceleratedHardwareReady"]


def changed(edit: Any, stale_after: timedelta | None = None) -> bool:
    old = node_object()
    new = copy.deepcopy(old)
    edit(new)
    return nodes.is_relevant_change(old, new, WATCHED, stale_after)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in obj["status"]["conditions"] if c["type"] == type_)
    return found


def test_changes_that_can_alter_a_decision_are_relevant() -> None:
    assert changed(lambda n: condition(n, "AcceleratedHardwareReady").update(status="True"))
    assert changed(
        lambda n: condition(n, "AcceleratedHardwareReady").update(reason="NvidiaXID79Error")
    )
    assert changed(lambda n: condition(n, "Ready").update(status="Unknown"))
    assert changed(lambda n: n["status"]["conditions"].pop())
    assert changed(lambda n: n["spec"].pop("unschedulable"))
    assert changed(lambda n: n["spec"].update(taints=[]))
    assert changed(lambda n: n["metadata"]["labels"].pop("remediation.gpuops.io/exclude"))
    assert changed(lambda n: n["status"]["nodeInfo"].update(bootID="b-2"))
    assert changed(
        lambda n: n["metadata"]["annotations"].update(
            {"remediation.gpuops.io/agent-ack": "GPUReset:r:1:Succeeded"}
        )
    )
    assert nodes.is_relevant_change(None, node_object(), WATCHED)
    assert nodes.is_relevant_change(node_object(), None, WATCHED)


def test_noise_is_filtered_out() -> None:
    def beat(n: dict[str, Any]) -> None:
        condition(n, "AcceleratedHardwareReady")["lastHeartbeatTime"] = "2026-11-30T11:03:00Z"
        condition(n, "AcceleratedHardwareReady")["message"] = "XID 62 on GPU 3; again"

    assert not changed(beat)
    assert not changed(beat, stale_after=timedelta(minutes=10))
    assert not changed(lambda n: n["metadata"]["annotations"].update(other="x"))
    assert not changed(lambda n: n["status"].update(allocatable={"cpu": "8"}))
    assert not changed(
        lambda n: n["status"]["conditions"].append({"type": "DiskPressure", "status": "True"})
    )


def test_a_heartbeat_that_ends_staleness_is_relevant() -> None:
    def late_beat(n: dict[str, Any]) -> None:
        condition(n, "AcceleratedHardwareReady")["lastHeartbeatTime"] = "2026-11-30T11:20:00Z"

    assert changed(late_beat, stale_after=timedelta(minutes=5))
    assert not changed(late_beat, stale_after=None)
    old = node_object()
    del condition(old, "AcceleratedHardwareReady")["lastHeartbeatTime"]
    new = copy.deepcopy(old)
    late_beat(new)
    assert nodes.is_relevant_change(old, new, WATCHED, timedelta(minutes=5))


@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("8", 8),
        (8, 8),
        ("0", 0),
        ("8k", None),
        ("1.5", None),
        ("-1", None),
        (-1, None),
        (True, None),
        ("\uff18", None),  # a fullwidth digit: str.isdigit, but no quantity
        ("", None),
        (None, None),
        ("9" * 40, None),
    ],
)
def test_the_gpu_counts_are_whole_numbers_or_none(value: object, count: int | None) -> None:
    """Recovery compares allocatable with capacity (D68): a value the API server would not
    write as a whole number is no count, never a crash or a guess."""
    resources = {"nvidia.com/gpu": value}
    body = {"metadata": {"name": "n"}, "status": {"capacity": resources, "allocatable": resources}}
    view = nodes.to_view(body)
    assert (view.gpu_capacity, view.gpu_allocatable) == (count, count)
    odd = nodes.to_view({"status": {"capacity": value, "allocatable": [value]}})
    assert odd.gpu_capacity is None
