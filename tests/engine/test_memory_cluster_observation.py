"""The in-memory cluster times conditions as the operator's node cache does: on its own clock,
from when a heartbeat, status or reason was seen to change, never from the remote heartbeat."""

from __future__ import annotations

from datetime import datetime, timedelta

from remediation_operator.sim.memory_cluster import MemoryCluster
from tests.engine.conftest import T0

GPU = "AcceleratedHardwareReady"
MIN = timedelta(minutes=1)


def observed(cluster: MemoryCluster, node: str = "gpu-0", type_: str = GPU) -> datetime | None:
    condition = cluster.views()[node].condition(type_)
    assert condition is not None
    return condition.observed_at


def cluster_with_gpu(**kwargs: object) -> MemoryCluster:
    cluster = MemoryCluster(T0, **kwargs)  # type: ignore[arg-type]
    cluster.add_node("gpu-0")
    cluster.set_condition("gpu-0", GPU, "True", "Ready")
    return cluster


def test_a_condition_is_seen_when_set_and_an_unchanged_rewrite_keeps_the_instant() -> None:
    cluster = cluster_with_gpu()
    assert observed(cluster) == T0
    cluster.advance(T0 + 3 * MIN)
    cluster.set_condition("gpu-0", GPU, "True", "Ready", heartbeat=T0)  # same heartbeat
    assert observed(cluster) == T0
    cluster.set_condition("gpu-0", GPU, "True", "Ready")  # a new heartbeat
    assert observed(cluster) == T0 + 3 * MIN


def test_a_heartbeat_a_year_ahead_is_only_a_value() -> None:
    cluster = cluster_with_gpu()
    year = T0 + timedelta(days=365)
    cluster.advance(T0 + MIN)
    cluster.set_condition("gpu-0", GPU, "True", "Ready", heartbeat=year)
    cluster.advance(T0 + 30 * MIN)
    cluster.set_condition("gpu-0", GPU, "True", "Ready", heartbeat=year)
    assert observed(cluster) == T0 + MIN, "it never changed again: it goes stale"


def test_an_agent_beating_until_later_is_seen_until_then() -> None:
    cluster = cluster_with_gpu()
    cluster.set_condition("gpu-0", GPU, "True", "Ready", beating_until=T0 + 90 * MIN)
    assert observed(cluster) == T0 + 90 * MIN
    cluster.reboot("gpu-0")
    assert observed(cluster) == T0 + 90 * MIN, "its agent still beats until then"


def test_heartbeats_every_period_but_not_from_silent_agents() -> None:
    cluster = cluster_with_gpu(heartbeat=5 * MIN)
    cluster.add_node("gpu-1")
    cluster.set_condition("gpu-1", GPU, "True", "Ready")
    cluster.silent.add("gpu-1")

    cluster.advance(T0 + 7 * MIN)

    assert observed(cluster, "gpu-0") == T0 + 7 * MIN
    assert observed(cluster, "gpu-1") == T0


def test_a_reboot_brings_fresh_evidence_unless_the_agents_stay_silent() -> None:
    cluster = cluster_with_gpu()
    cluster.advance(T0 + 10 * MIN)
    cluster.reboot("gpu-0")
    assert observed(cluster) == T0 + 10 * MIN

    cluster.agents_report_after_reboot = False
    cluster.advance(T0 + 20 * MIN)
    cluster.reboot("gpu-0")
    assert observed(cluster) == T0 + 10 * MIN, "evidence from before this reboot"


def test_a_restarted_operator_sees_every_condition_first_now() -> None:
    cluster = cluster_with_gpu()
    cluster.advance(T0 + 40 * MIN)
    cluster.restart_operator()
    assert observed(cluster) == T0 + 40 * MIN
    assert observed(cluster, type_="Ready") == T0 + 40 * MIN
