"""A trimmed Node tells the operator exactly what the full one does, at a fraction of the memory.

Real: real-size Node bodies (`bench.bench_cluster.node`, `emulator.fleet.manifests.node`,
about 6.6 KB of JSON each), `engine.nodes` (the views and the per-event filter the planner and
the runtime use), `k8s.nodes.cordon` (which starts from the cached body) and the node watch
against the API emulator. Faked: the API client of the cordon test (it records the patch).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import tracemalloc
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench import bench_cluster
from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import manifests
from remediation_operator.engine import nodes
from remediation_operator.engine.condition_clock import ConditionClock
from remediation_operator.handlers import node_trim
from remediation_operator.handlers.node_cache import NodeCache
from remediation_operator.handlers.node_watch import NodeWatch
from remediation_operator.k8s import nodes as k8s_nodes
from remediation_operator.k8s.client import Client

GPU = "AcceleratedHardwareReady"
OURS = "remediation.gpuops.io/"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def compact(body: Mapping[str, Any]) -> int:
    return len(json.dumps(body, separators=(",", ":")))


def fleet_node(index: int = 7) -> dict[str, Any]:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "gpu-h100-x7", "uid": "0c4f1c1e-0000-4000-8000-000000000007"},
    }
    return manifests.node(
        manifests.Shape(),
        index=index,
        zone="us-east-1a",
        claim=claim,
        provider="aws:///us-east-1a/i-0123456789abcdef0",
        boot_id=manifests.new_uuid(random.Random(index)),
        now=T0,
    )


def bench_node(index: int = 7) -> dict[str, Any]:
    body = bench_cluster.node(f"gpu-{index:05d}", "fleet", index)
    body["metadata"] |= {
        "uid": f"uid-{index}",
        "resourceVersion": "41",
        "creationTimestamp": "2026-12-01T10:00:00Z",
    }
    return body


def test_benchmark_and_emulated_fleet_nodes_are_real_size() -> None:
    for body in (bench_node(), fleet_node()):
        assert 6_000 <= compact(body) <= 7_500
        metadata, status = body["metadata"], body["status"]
        assert metadata["managedFields"]
        assert status["images"]
        assert any(k.startswith("nvidia.com/gpu.") for k in metadata["labels"])
        assert status["allocatable"]["nvidia.com/gpu"] == "8"
        assert {"Ready", GPU} <= {c["type"] for c in status["conditions"]}
    assert fleet_node(3) == fleet_node(3)  # deterministic: the same fleet on every run


def test_trim_keeps_every_field_the_operator_reads_and_drops_the_bulk() -> None:
    body = bench_node()
    body["metadata"]["annotations"] |= {
        f"{OURS}quarantined-by": "fleet",
        f"{OURS}agent-ack": "GPUReset:r:1:Succeeded",
        "karpenter.sh/do-not-disrupt": "true",
        "kubectl.kubernetes.io/last-applied-configuration": "{...}" * 500,
    }
    body["metadata"]["ownerReferences"] = [{"kind": "NodeClaim", "name": "c", "uid": "u"}]
    body["metadata"]["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    body["spec"] |= {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    body["spec"]["podCIDR"] = "10.0.0.0/24"

    trimmed = node_trim.trim(body)

    meta = trimmed["metadata"]
    for key in ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        assert meta[key] == body["metadata"][key], key
    assert meta["labels"] == body["metadata"]["labels"]
    assert meta["ownerReferences"] == body["metadata"]["ownerReferences"]
    assert meta["annotations"] == {
        f"{OURS}quarantined-by": "fleet",
        f"{OURS}agent-ack": "GPUReset:r:1:Succeeded",
        "karpenter.sh/do-not-disrupt": "true",
    }
    assert trimmed["spec"] == {
        "providerID": body["spec"]["providerID"],
        "unschedulable": True,
        "taints": [{"key": "k", "effect": "NoSchedule"}],
    }
    assert trimmed["status"]["conditions"] == body["status"]["conditions"]
    assert trimmed["status"]["nodeInfo"] == {"bootID": body["status"]["nodeInfo"]["bootID"]}
    for part in ("capacity", "allocatable"):  # recovery reads the GPUs advertised (D68)
        assert trimmed["status"][part] == {"nvidia.com/gpu": body["status"][part]["nvidia.com/gpu"]}
    for gone in ("managedFields",):
        assert gone not in meta
    for gone in ("images", "addresses", "daemonEndpoints"):
        assert gone not in trimmed["status"], gone
    assert compact(trimmed) < compact(body) / 2


def test_a_trimmed_node_takes_under_a_third_of_the_memory() -> None:
    texts = [json.dumps(bench_node(i)) for i in range(300)]
    tracemalloc.start()
    try:
        full = [json.loads(t) for t in texts]
        full_bytes = tracemalloc.get_traced_memory()[0]
        del full
        tracemalloc.clear_traces()
        trimmed = [node_trim.trim(json.loads(t)) for t in texts]
        trimmed_bytes = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(trimmed) == 300
    assert trimmed_bytes < full_bytes / 3, (full_bytes / 300, trimmed_bytes / 300)


# Property: the views, the per-event filter and the cordon agree on full and trimmed bodies.

odd = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
stamps = st.sampled_from(["2026-12-01T12:00:00Z", "2026-12-01T12:05:00Z", "garbage", ""])


@st.composite
def edited_nodes(draw: st.DrawFn) -> dict[str, Any]:
    """A real-size Node with what can differ between Nodes, sometimes hostile."""
    body = copy.deepcopy(bench_node(draw(st.integers(0, 50))))
    meta, spec, status = body["metadata"], body["spec"], body["status"]
    notes = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    f"{OURS}quarantined-by",
                    f"{OURS}uncordon-on-release",
                    f"{OURS}agent-ack",
                    f"{OURS}agent-request",
                    f"{OURS}exclude",
                    "karpenter.sh/do-not-disrupt",
                    "node.alpha.kubernetes.io/ttl",
                    "example.com/anything",
                ]
            ),
            st.sampled_from(["true", "false", "fleet", "GPUReset:r:1:Succeeded"]) | odd,
            max_size=4,
        )
    )
    meta["annotations"] |= notes
    if draw(st.booleans()):
        meta["labels"][draw(st.sampled_from([f"{OURS}exclude", "team", "x"]))] = draw(
            st.sampled_from(["true", "a"]) | odd
        )
    if draw(st.integers(0, 9)) == 0:
        meta["annotations"] = draw(odd)
    if draw(st.integers(0, 9)) == 0:
        meta["labels"] = draw(odd)
    if draw(st.booleans()):
        meta["creationTimestamp"] = draw(stamps | odd)
    spec["unschedulable"] = draw(st.sampled_from([True, False, "true"]) | st.none())
    taint = st.sampled_from(
        [
            {"key": f"{OURS}quarantine", "value": "gpu-xid", "effect": "NoSchedule"},
            {"key": f"{OURS}quarantine", "effect": "NoExecute"},
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        ]
    )
    spec["taints"] = draw(st.lists(taint | odd, max_size=3) | odd)
    conditions = status["conditions"]
    gpu = next(c for c in conditions if c["type"] == GPU)
    gpu["status"] = draw(st.sampled_from(["True", "False", "Unknown"]) | odd)
    gpu["reason"] = draw(st.sampled_from(["GPUsHealthy", "NvidiaXID79Error"]) | odd)
    gpu["lastHeartbeatTime"] = draw(stamps | odd)
    if draw(st.booleans()):
        conditions.append({"type": GPU, "status": "False", "reason": "NvidiaXID48Error"})
    if draw(st.integers(0, 9)) == 0:
        status["conditions"] = draw(odd)
    status["nodeInfo"]["bootID"] = draw(st.sampled_from(["b-1", "b-2"]) | odd)
    if draw(st.integers(0, 9)) == 0:
        status["nodeInfo"] = draw(odd)
    for part in ("capacity", "allocatable"):
        if draw(st.booleans()):
            status[part]["nvidia.com/gpu"] = draw(st.sampled_from(["8", "7", "0", 8, "8k"]) | odd)
        if draw(st.integers(0, 9)) == 0:
            status[part]["cpu"] = draw(st.sampled_from(["191", "190"]))  # not read: unseen
        if draw(st.integers(0, 9)) == 0:
            del status[part]["nvidia.com/gpu"]
        if draw(st.integers(0, 19)) == 0:
            status[part] = draw(odd)
    if draw(st.integers(0, 19)) == 0:
        body[draw(st.sampled_from(["metadata", "spec", "status"]))] = draw(odd)
    return body


@settings(max_examples=200, deadline=None)
@given(edited_nodes(), st.sets(st.sampled_from([GPU, "Ready", "KernelDeadlock"])))
def test_a_trimmed_node_has_the_same_view_as_the_full_one(
    body: dict[str, Any], watched: set[str]
) -> None:
    observed = {t: T0 for t in watched}
    assert nodes.to_view(node_trim.trim(body), observed) == nodes.to_view(body, observed)


@settings(max_examples=200, deadline=None)
@given(
    edited_nodes(),
    edited_nodes(),
    st.sets(st.sampled_from([GPU, "KernelDeadlock"])),
    st.sampled_from([None, timedelta(minutes=1)]),
)
def test_the_per_event_filter_judges_trimmed_nodes_as_full_ones(
    old: dict[str, Any], new: dict[str, Any], watched: set[str], stale: timedelta | None
) -> None:
    full = nodes.classify(old, new, watched, stale)
    trimmed = nodes.classify(node_trim.trim(old), node_trim.trim(new), watched, stale)
    assert (trimmed is nodes.Change.RELEVANT) == (full is nodes.Change.RELEVANT)
    if full is nodes.Change.UNSEEN:
        assert trimmed is nodes.Change.UNSEEN  # trimming never makes more work


@st.composite
def conditions_moved(draw: st.DrawFn, old: dict[str, Any]) -> dict[str, Any]:
    """`old` with only its conditions edited (and a new resourceVersion), as heartbeats and
    agents do, sometimes in ways the fast path must hand to the full comparison."""
    new = copy.deepcopy(old)
    if isinstance(new.get("metadata"), dict):
        new["metadata"]["resourceVersion"] = "42"
    status = new.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    if not isinstance(conditions, list) or not conditions:
        return new
    for _ in range(draw(st.integers(0, 3))):
        place = draw(st.integers(0, len(conditions) - 1))
        if not isinstance(conditions[place], dict):
            continue
        field = draw(st.sampled_from(["lastHeartbeatTime", "status", "reason", "message", "type"]))
        value = draw(
            st.sampled_from(["True", "False", "Ready", GPU, "KernelDeadlock", "x"]) | stamps | odd
        )
        conditions[place] = {**conditions[place], field: value}
    if draw(st.integers(0, 9)) == 0:
        conditions.append({"type": "Ready", "status": "False"})  # a new one: not place-wise
    return new


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    edited_nodes(),
    st.sets(st.sampled_from([GPU, "KernelDeadlock"])),
)
def test_what_the_trim_says_moved_is_what_moved_and_judges_as_the_full_comparison(
    data: st.DataObject, old: dict[str, Any], watched: set[str]
) -> None:
    new = data.draw(st.one_of(conditions_moved(old), edited_nodes()))
    before = node_trim.trim(old)
    after, moved = node_trim.trim(new, before), node_trim.heartbeat(before, new)
    assert after == node_trim.trim(new), "the same body as trimming alone"
    full = nodes.classify(before, after, watched)
    if moved is None:
        return
    # Judged from the moved places of the event as delivered (the node cache's path): when
    # that gives an answer, it is the full comparison's.
    quick = nodes.classify_moved(before, new, moved, watched)
    assert quick is None or quick is full
    refreshed = copy.deepcopy(before)
    node_trim.refresh(refreshed, new, moved)
    assert refreshed == after, "refreshing in place stores what trimming does"
    was, now = before["status"]["conditions"], after["status"]["conditions"]
    assert len(was) == len(now)
    for place, (a, b) in enumerate(zip(was, now, strict=True)):
        assert (place in moved) == (a is not b), place
        assert (place in moved) == (a != b), place
        if place in moved:
            assert isinstance(a, dict), "a moved condition is a mapping"
            assert isinstance(b, dict), "a moved condition is a mapping"
            assert a.get("type") == b.get("type"), "a moved condition kept its type"
    assert after["spec"] is before["spec"]
    stripped = [
        {k: v for k, v in b["metadata"].items() if k != "resourceVersion"} for b in (before, after)
    ]
    assert stripped[0] == stripped[1]


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    edited_nodes(),
    st.sets(st.sampled_from([GPU, "KernelDeadlock"])),
    st.booleans(),
)
def test_timing_the_moved_conditions_alone_is_timing_them_all(
    data: st.DataObject, old: dict[str, Any], watched: set[str], windowed: bool
) -> None:
    """The node cache times a heartbeat from the conditions the trim says moved: the same
    instants, deadlines and renewal as looking at every condition."""
    new = data.draw(st.one_of(conditions_moved(old), edited_nodes()))
    before = node_trim.trim(old)
    after, moved = node_trim.trim(new, before), node_trim.heartbeat(before, new)
    if moved is None:
        return
    types = frozenset(watched | {"Ready"})
    later = T0 + timedelta(minutes=3)
    clocks = ConditionClock(), ConditionClock()
    for clock in clocks:
        clock.windows = {GPU: timedelta(minutes=2)} if windowed else {}
        clock.observe("n", before, T0, types)
    full = clocks[0].observe("n", after, later, types)
    quick = clocks[1].observe("n", after, later, types, moved)
    assert quick == full
    assert clocks[1].times("n") == clocks[0].times("n")
    assert clocks[1].next_deadline() == clocks[0].next_deadline()
    assert clocks[1].due(later) == clocks[0].due(later)


def test_a_moved_duplicate_of_a_condition_type_is_not_timed() -> None:
    """The API keys conditions by type; every reader takes the first of a type, and so does
    the clock's moved-only path (an agent writing a second copy is not a heartbeat)."""
    old = node_trim.trim(bench_node())
    duplicate = copy.deepcopy(bench_node())
    duplicate["status"]["conditions"].append(
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-01T12:00:00Z"}
    )
    before = node_trim.trim(duplicate)
    beat = copy.deepcopy(duplicate)
    beat["status"]["conditions"][-1]["lastHeartbeatTime"] = "2026-12-01T12:00:10Z"
    after, moved = node_trim.trim(beat, before), node_trim.heartbeat(before, beat)
    assert moved == (len(old["status"]["conditions"]),)
    clock = ConditionClock()
    clock.observe("n", before, T0, {"Ready"})
    assert clock.observe("n", after, T0 + timedelta(minutes=1), {"Ready"}, moved) is None
    assert clock.times("n") == {"Ready": T0}


def test_the_benchmark_churn_is_judged_from_the_one_condition_that_moved() -> None:
    old = node_trim.trim(bench_node())
    places = {c["type"]: i for i, c in enumerate(old["status"]["conditions"])}
    heartbeat, flip = copy.deepcopy(bench_node()), copy.deepcopy(bench_node())
    for body in (heartbeat, flip):
        body["metadata"]["resourceVersion"] = "42"
    next(c for c in heartbeat["status"]["conditions"] if c["type"] == "Ready")[
        "lastHeartbeatTime"
    ] = "2026-12-01T12:00:10Z"
    next(c for c in flip["status"]["conditions"] if c["type"] == "KernelDeadlock")["status"] = (
        "True"
    )
    beat, moved = node_trim.trim(heartbeat, old), node_trim.heartbeat(old, heartbeat)
    assert moved == (places["Ready"],)
    assert nodes.classify_moved(old, heartbeat, moved, {GPU}) is nodes.Change.VIEW
    assert beat["metadata"]["labels"] is old["metadata"]["labels"]
    flipped, moved = node_trim.trim(flip, old), node_trim.heartbeat(old, flip)
    assert moved == (places["KernelDeadlock"],)
    assert nodes.classify_moved(old, flip, moved, {GPU}) is nodes.Change.UNSEEN
    watching = {GPU, "KernelDeadlock"}
    assert nodes.classify_moved(old, flip, moved, watching) is None, "left to the full look"
    assert nodes.classify(old, flipped, watching) is nodes.Change.RELEVANT
    relabelled = copy.deepcopy(bench_node())
    relabelled["metadata"]["labels"]["team"] = "a"
    assert node_trim.heartbeat(old, relabelled) is None, "not only conditions moved"


def kept_paths(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place in a trimmed body: each key of each mapping, each item of each list."""
    places: list[tuple[object, ...]] = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            places += kept_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            places += kept_paths(item, (*path, index))
    return places


def test_a_change_to_anything_kept_but_conditions_and_version_is_no_heartbeat() -> None:
    """Whatever `trim` keeps, `heartbeat` compares: a kept field changed or removed is not a
    heartbeat, so the node cache never refreshes in place what it should have trimmed anew.
    (Walks what the trim keeps: a field kept from now on is covered without editing this.)"""
    raw = fleet_node()
    meta = raw["metadata"]
    meta |= {"uid": "u-1", "resourceVersion": "41", "creationTimestamp": "2026-12-01T12:00:00Z"}
    meta["deletionTimestamp"] = "2026-12-01T13:00:00Z"
    meta["annotations"] |= {f"{OURS}quarantined-by": "fleet", "karpenter.sh/do-not-disrupt": "1"}
    raw["spec"] |= {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    stored = node_trim.trim(raw)
    beat = copy.deepcopy(raw)
    beat["metadata"]["resourceVersion"] = "42"
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-01T12:00:10Z"
    assert node_trim.heartbeat(stored, beat) == (0,)
    for path in kept_paths(stored):
        if path == ("metadata", "resourceVersion") or path[:2] == ("status", "conditions"):
            continue
        for edit in ("change", "remove"):
            edited = copy.deepcopy(raw)
            parent: Any = edited
            for step in path[:-1]:
                parent = parent[step]
            if edit == "change":
                parent[path[-1]] = "changed"
            elif isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
            assert node_trim.heartbeat(stored, edited) is None, (edit, path)


class RecordingClient:
    """Records merge patches; a cordon from a known body never reads."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch(self, path: str, body: dict[str, Any], kind: str = "merge") -> dict[str, Any]:
        self.patches.append((path, body))
        return {}

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        raise AssertionError(f"the cordon read {path} although it had the body")


@settings(max_examples=100, deadline=None)
@given(edited_nodes())
def test_the_cordon_writes_the_same_patch_from_a_trimmed_body(body: dict[str, Any]) -> None:
    if not isinstance(body.get("metadata"), dict) or not isinstance(body.get("spec"), dict):
        return  # the cordon then reads the Node (not from the cache)
    if not isinstance(body["spec"].get("taints"), list | None):
        return
    if not isinstance(body["metadata"].get("annotations"), dict):
        return
    full, trimmed = RecordingClient(), RecordingClient()
    name = body["metadata"]["name"]
    asyncio.run(k8s_nodes.cordon(full, name, "gpu-xid", "fleet", body))  # type: ignore[arg-type]
    asyncio.run(
        k8s_nodes.cordon(trimmed, name, "gpu-xid", "fleet", node_trim.trim(body))  # type: ignore[arg-type]
    )
    assert trimmed.patches == full.patches


async def test_the_node_cache_keeps_trimmed_nodes_from_the_watch(
    api: ApiServer, client: Client
) -> None:
    api.store.create("nodes", bench_cluster.node("gpu-00001", "fleet", 1))
    cache = NodeCache()
    kinds: list[str | None] = []

    def deliver(kind: str | None, body: Mapping[str, Any]) -> None:
        kinds.append(kind)
        cache.update(body)

    watch = NodeWatch(client, deliver)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.listed.wait(), 10)
        listed = cache.body("gpu-00001")
        assert listed is not None
        assert "managedFields" not in listed["metadata"]
        assert "images" not in listed["status"]
        assert listed["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
        api.store.patch("nodes", "gpu-00001", {"spec": {"unschedulable": True}})
        deadline = asyncio.get_running_loop().time() + 10
        while "MODIFIED" not in kinds:
            assert asyncio.get_running_loop().time() < deadline, "no MODIFIED event"
            await asyncio.sleep(0.02)
        modified = cache.body("gpu-00001")
        assert modified is not None
        assert modified["spec"]["unschedulable"] is True
        assert modified["status"]["allocatable"] == {"nvidia.com/gpu": "8"}  # only the GPUs
        assert modified["metadata"]["labels"] is listed["metadata"]["labels"], "kept, not copied"
        assert nodes.to_view(modified) == nodes.to_view(api.store.get("nodes", "gpu-00001"))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
