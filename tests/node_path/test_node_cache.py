"""The node cache rebuilds a view only when a plan could read what changed, and never serves
a plan a view older than that."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.engine import nodes
from remediation_operator.engine.node_index import NodeIndex
from remediation_operator.handlers.node_cache import NodeCache
from tests.node_path.test_relevance import BEATS, GPU, find, node, project

DEADLOCK = "KernelDeadlock"


def version(body: dict[str, Any], rv: int) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["resourceVersion"] = str(rv)
    return body


def flipped(body: dict[str, Any], status: str = "True") -> dict[str, Any]:
    body = copy.deepcopy(body)
    find(body, DEADLOCK).update(status=status, lastTransitionTime=BEATS[2])
    return body


def cache_with(body: dict[str, Any], watched: frozenset[str] = frozenset({GPU})) -> NodeCache:
    cache = NodeCache()
    cache.watched = watched
    assert cache.update(body), "a new node is relevant"
    assert cache.views["gpu-1"] == nodes.to_view(body)
    return cache


def test_an_unwatched_flip_neither_wakes_nor_rebuilds_nor_journals() -> None:
    cache = cache_with(node())
    index = cache.views
    assert isinstance(index, NodeIndex)
    before, seen = index["gpu-1"], index.version

    assert not cache.update(version(flipped(node()), 11))

    assert cache.views["gpu-1"] is before, "the view was not rebuilt"
    assert index.version == seen, "no change journaled: plans re-match nothing"


def test_a_skipped_flip_is_caught_up_when_a_policy_starts_watching_it() -> None:
    cache = cache_with(node())
    newest = version(flipped(node()), 11)
    cache.update(newest)

    cache.watched = frozenset({GPU, DEADLOCK})

    view = cache.views["gpu-1"]
    condition = view.condition(DEADLOCK)
    assert condition is not None
    assert condition.status == "True"
    assert view == nodes.to_view(newest)


def test_the_same_watched_set_again_rebuilds_nothing() -> None:
    cache = cache_with(node())
    before = cache.views["gpu-1"]
    cache.update(version(flipped(node()), 11))

    cache.watched = frozenset({GPU})  # every policy event sets it again

    assert cache.views["gpu-1"] is before


def test_a_heartbeat_only_update_wakes_nothing_but_the_next_plan_sees_it() -> None:
    cache = cache_with(node())
    newest = version(node(), 11)
    find(newest, "Ready")["lastHeartbeatTime"] = BEATS[2]

    assert not cache.update(newest), "irrelevant without staleAfter"

    ready = cache.views["gpu-1"].condition("Ready")
    assert ready is not None
    assert ready.last_heartbeat_time == datetime(2026, 11, 30, 11, 20, tzinfo=UTC)


def test_a_skipped_node_plans_with_its_newest_conditions_after_a_relevant_change() -> None:
    cache = cache_with(node())
    cache.update(version(flipped(node()), 11))
    newest = version(flipped(node()), 12)
    find(newest, GPU).update(status="False", reason="NvidiaXID79Error")

    assert cache.update(newest)

    assert cache.views["gpu-1"] == nodes.to_view(newest)


def test_a_flip_before_the_first_view_is_built_is_in_that_view() -> None:
    cache = NodeCache()
    cache.watched = frozenset({GPU})
    cache.update(node())
    newest = version(flipped(node()), 11)
    cache.update(newest)

    assert cache.views["gpu-1"] == nodes.to_view(newest)


def test_a_deleted_node_that_was_behind_is_gone_for_good() -> None:
    cache = cache_with(node())
    cache.update(version(flipped(node()), 11))

    assert cache.remove("gpu-1")
    cache.watched = frozenset({GPU, DEADLOCK})

    assert "gpu-1" not in cache.views
    assert cache.body("gpu-1") is None


WATCH_SETS = [frozenset({GPU}), frozenset({GPU, DEADLOCK}), frozenset()]


def variant(index: int, rv: int) -> dict[str, Any]:
    """One of a few versions of the node: flips, heartbeats, a fault."""
    body = version(node(), rv)
    if index & 1:
        find(body, DEADLOCK)["status"] = "True"
    if index & 2:
        find(body, "Ready")["lastHeartbeatTime"] = BEATS[1]
    if index & 4:
        find(body, DEADLOCK)["message"] = "deadlock"
    if index & 8:
        find(body, GPU).update(status="False", reason="NvidiaXID79Error")
    return body


steps = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.integers(0, 15)),
        st.tuples(st.just("watch"), st.integers(0, len(WATCH_SETS) - 1)),
        st.tuples(st.just("plan"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_every_plan_reads_views_equal_to_the_newest_bodies_in_what_it_reads(
    history: list[tuple[str, int]],
) -> None:
    cache = NodeCache()
    newest = node()
    cache.update(newest)
    for rv, (kind, value) in enumerate(history, start=11):
        if kind == "update":
            newest = variant(value, rv)
            cache.update(newest)
        elif kind == "watch":
            cache.watched = WATCH_SETS[value]
        else:
            watched = cache.watched
            view = cache.views["gpu-1"]
            assert project(view, watched) == project(nodes.to_view(newest), watched)
