"""The node cache rebuilds a view only when a plan could read what changed, and never serves
a plan a view older than that."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.domain.fleet import NodeView
from remediation_operator.engine import nodes
from remediation_operator.engine.node_index import NodeIndex
from remediation_operator.handlers import node_trim
from remediation_operator.handlers.node_cache import CoarseClock, NodeCache
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


NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Clock:
    """The operator's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def unobserved(view: NodeView) -> NodeView:
    """The view without our observation instants (what `to_view` alone gives)."""
    plain = tuple(dataclasses.replace(c, observed_at=None) for c in view.conditions)
    return dataclasses.replace(view, conditions=plain)


def cache_with(
    body: dict[str, Any], watched: frozenset[str] = frozenset({GPU}), clock: Clock | None = None
) -> NodeCache:
    cache = NodeCache(clock or Clock())
    cache.watched = watched
    assert cache.update(body), "a new node is relevant"
    assert unobserved(cache.views["gpu-1"]) == nodes.to_view(body)
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
    assert unobserved(view) == nodes.to_view(newest)


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

    assert unobserved(cache.views["gpu-1"]) == nodes.to_view(newest)


def test_a_flip_before_the_first_view_is_built_is_in_that_view() -> None:
    cache = NodeCache()
    cache.watched = frozenset({GPU})
    cache.update(node())
    newest = version(flipped(node()), 11)
    cache.update(newest)

    assert unobserved(cache.views["gpu-1"]) == nodes.to_view(newest)


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
            # Refreshed in place or trimmed anew: what is stored is the newest body, trimmed.
            assert cache.body("gpu-1") == node_trim.trim(newest)
        elif kind == "watch":
            cache.watched = WATCH_SETS[value]
        else:
            watched = cache.watched
            view = cache.views["gpu-1"]
            assert unobserved(project(view, watched)) == project(nodes.to_view(newest), watched)


def test_a_heartbeat_refreshes_the_stored_body_and_a_fault_replaces_it() -> None:
    """A heartbeat no decision reads builds nothing (docs/performance.md, item 19); an update
    a decision reads stores a new body, and the runtime still gets the one it replaced."""
    cache = cache_with(node())
    stored = cache.body("gpu-1")
    heartbeat = version(node(), 11)
    find(heartbeat, "Ready")["lastHeartbeatTime"] = BEATS[1]

    assert not cache.update(heartbeat)
    assert cache.body("gpu-1") is stored, "refreshed in place"
    assert stored == node_trim.trim(heartbeat)
    assert cache.replaced is stored
    assert unobserved(cache.views["gpu-1"]) == nodes.to_view(heartbeat)

    fault = version(heartbeat, 12)
    find(fault, GPU).update(status="False", reason="NvidiaXID79Error")
    assert cache.update(fault), "a watched condition turned: relevant"
    assert cache.body("gpu-1") is not stored
    assert cache.body("gpu-1") == node_trim.trim(fault)
    assert cache.replaced is stored
    assert find(dict(stored), GPU)["status"] == "True", "the body replaced is as it was"


# Observation times (staleness on our clock) -------------------------------------------------


def observed(cache: NodeCache, type_: str) -> datetime | None:
    condition = cache.views["gpu-1"].condition(type_)
    assert condition is not None
    return condition.observed_at


def beaten(body: dict[str, Any], type_: str, at: str, rv: int) -> dict[str, Any]:
    newer = version(body, rv)
    find(newer, type_)["lastHeartbeatTime"] = at
    return newer


def test_a_condition_is_first_seen_when_the_operator_first_sees_it_whatever_its_heartbeat() -> None:
    """The node's heartbeat (BEATS[0], a day before NOW) says nothing about staleness."""
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    assert observed(cache, GPU) == NOW
    assert observed(cache, "Ready") == NOW


def test_a_heartbeat_change_is_timed_when_the_event_arrives_not_when_the_view_is_built() -> None:
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    clock.now = NOW + timedelta(minutes=3)
    cache.update(beaten(node(), GPU, BEATS[1], 11))
    clock.now = NOW + timedelta(minutes=9)  # the next plan comes later

    assert observed(cache, GPU) == NOW + timedelta(minutes=3)
    assert observed(cache, "Ready") == NOW, "Ready did not change"


def test_an_update_that_changes_no_heartbeat_status_or_reason_keeps_the_instant() -> None:
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    clock.now = NOW + timedelta(minutes=3)
    same = version(node(), 11)
    find(same, GPU)["message"] = "still fine"
    cache.update(same)

    assert observed(cache, GPU) == NOW


def test_a_heartbeat_in_the_future_is_one_more_heartbeat() -> None:
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    clock.now = NOW + timedelta(minutes=3)
    cache.update(beaten(node(), GPU, "2027-12-01T09:00:00Z", 11))
    clock.now = NOW + timedelta(minutes=30)
    cache.update(beaten(node(), GPU, "2027-12-01T09:00:00Z", 12))

    assert observed(cache, GPU) == NOW + timedelta(minutes=3), "unchanged since: it goes stale"


def test_a_beat_that_ends_a_staleness_wakes_the_planner() -> None:
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    cache.stale_after = timedelta(minutes=5)
    clock.now = NOW + timedelta(minutes=4)
    assert not cache.update(beaten(node(), GPU, BEATS[1], 11)), "not stale yet: nothing to do"
    clock.now = NOW + timedelta(minutes=10)
    assert cache.update(beaten(node(), GPU, BEATS[2], 12)), "6 minutes unseen: stale, now fresh"
    assert observed(cache, GPU) == NOW + timedelta(minutes=10)


def test_a_newly_watched_condition_is_first_seen_when_the_policy_starts_watching_it() -> None:
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    clock.now = NOW + timedelta(minutes=7)
    cache.watched = frozenset({GPU, DEADLOCK})

    assert observed(cache, DEADLOCK) == NOW + timedelta(minutes=7)
    assert observed(cache, GPU) == NOW


def test_a_node_deleted_and_created_again_is_a_first_sight() -> None:
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    cache.remove("gpu-1")
    clock.now = NOW + timedelta(minutes=2)
    cache.update(node())

    assert observed(cache, GPU) == NOW + timedelta(minutes=2)


def test_the_exclude_annotation_is_relevant_and_opts_the_node_out() -> None:
    """Defect 14: `remediation.gpuops.io/exclude=true` is honoured as an annotation too."""
    cache = cache_with(node())
    annotated = version(node(), 11)
    annotated["metadata"]["annotations"]["remediation.gpuops.io/exclude"] = "true"

    assert cache.update(annotated), "an opt-out must reach the planner at once"
    view = cache.views["gpu-1"]
    assert view.excluded
    assert "annotated" in view.exclusion
    assert cache.update(version(node(), 12)), "and so must its removal"
    assert not cache.views["gpu-1"].excluded


def test_a_heartbeat_is_reported_as_renewed_evidence_without_being_relevant() -> None:
    """The runtime wakes an open incident's policy on it: a step may wait for fresh evidence."""
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    clock.now = NOW + timedelta(minutes=1)

    assert not cache.update(beaten(node(), GPU, BEATS[1], 11))
    assert cache.renewed
    assert not cache.update(version(flipped(beaten(node(), GPU, BEATS[1], 12)), 12))
    assert not cache.renewed, "only an unwatched condition changed"


def test_going_stale_is_due_at_the_instant_after_the_window_and_reported_once() -> None:
    """No watch event says a condition went stale: the cache says when, for the runtime."""
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    armed: list[bool] = []
    cache.on_sooner = lambda: armed.append(True)
    cache.windows = {GPU: timedelta(minutes=5)}
    assert armed, "a first deadline re-arms the timer"
    first = NOW + timedelta(minutes=5, microseconds=1)
    assert cache.next_deadline() == first

    clock.now = NOW + timedelta(minutes=2)
    cache.update(beaten(node(), GPU, BEATS[1], 11))  # a live agent pushes it back
    assert cache.next_deadline() == NOW + timedelta(minutes=7, microseconds=1)
    assert cache.due(first) == []

    late = NOW + timedelta(minutes=8)
    assert cache.due(late) == ["gpu-1"]
    assert cache.due(late) == [], "reported once, until it is seen to change again"
    assert cache.next_deadline() is None


def test_every_watched_type_gets_its_own_window() -> None:
    clock = Clock()
    cache = cache_with(node(), frozenset({GPU, DEADLOCK}), clock=clock)
    cache.windows = {GPU: timedelta(minutes=15), DEADLOCK: timedelta(minutes=5)}
    assert cache.due(NOW + timedelta(minutes=6)) == ["gpu-1"]
    assert cache.next_deadline() == NOW + timedelta(minutes=15, microseconds=1)
    cache.remove("gpu-1")
    assert cache.next_deadline() is None


def test_a_deadline_passed_before_the_timer_fired_is_still_reported() -> None:
    """A heartbeat of another condition, seen after a condition went stale but before the
    runtime's timer asked, must not drop that node's wake-up (it once did: the deadline was
    recomputed from the conditions not yet stale at that instant)."""
    clock = Clock()
    cache = cache_with(node(), clock=clock)
    cache.windows = {GPU: timedelta(minutes=5)}
    clock.now = NOW + timedelta(minutes=5, seconds=1)  # GPU went stale a second ago
    assert not cache.update(beaten(node(), "Ready", BEATS[1], 11))
    assert cache.renewed, "Ready was renewed"
    assert cache.due(clock.now) == ["gpu-1"], "the stale GPU condition still wakes the node"
    assert cache.next_deadline() is None


def test_the_production_clock_reads_the_wall_clock_at_most_once_per_resolution() -> None:
    ticks = [100.0]
    walls = iter([NOW, NOW + timedelta(seconds=1), NOW + timedelta(seconds=2)])
    clock = CoarseClock(resolution=0.1, wall=lambda: next(walls), ticks=lambda: ticks[0])
    assert clock() == NOW
    ticks[0] = 100.09
    assert clock() == NOW, "within the resolution: the instant read before"
    ticks[0] = 100.25
    assert clock() == NOW + timedelta(seconds=1)
    ticks[0] = 500.0
    assert clock() == NOW + timedelta(seconds=2)
    assert NodeCache()._clock().tzinfo is not None, "the default clock is the coarse UTC one"
