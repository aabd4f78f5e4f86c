"""What simulated agents publish: healthy conditions a policy watches, symptoms, recovery."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from remediation_operator.domain import matching
from remediation_operator.domain.policy import Policy
from remediation_operator.sim.agents import AgentProfile
from remediation_operator.sim.faultmix import Cause, FaultMix, Symptom
from remediation_operator.sim.fleetspec import FleetSpec
from remediation_operator.sim.hosts import Host, HostFault, Publisher
from remediation_operator.sim.memory_cluster import MemoryCluster

START = datetime(2026, 1, 5, tzinfo=UTC)
XID62 = Symptom("AcceleratedHardwareReady", "False", "NvidiaXID62Error")


def _setup(
    policy: Policy, mix: FaultMix, fleet: FleetSpec | None = None
) -> tuple[Publisher, MemoryCluster, Host]:
    symptoms = [s.symptom for c in mix.causes for s in c.signals if s.symptom is not None]
    fleet = fleet if fleet is not None else FleetSpec()
    publisher = Publisher(fleet, symptoms, [policy], START, START + timedelta(days=400))
    cluster = MemoryCluster(START)
    host = Host(slot=0, name="gpu-00000", zone="zone-a", created_at=-86400.0 * 30)
    cluster.add_node(host.name, labels=publisher.labels(host), created_at=publisher.created(host))
    host.published = publisher.on_new_node()
    publisher.publish(host, None, cluster)
    return publisher, cluster, host


def _cause(mix: FaultMix, name: str) -> Cause:
    return next(c for c in mix.causes if c.name == name)


def test_a_healthy_node_shows_no_fault_even_to_staleness_rules(
    graduated: Policy, mix: FaultMix
) -> None:
    _, cluster, host = _setup(graduated, mix)
    view = cluster.views()[host.name]
    # gpu-default watches AcceleratedHardwareReady and GPUProblem with staleAfter: both are
    # published healthy, with a heartbeat that never goes stale during a simulation.
    assert view.condition("AcceleratedHardwareReady") is not None
    assert view.condition("GPUProblem") is not None
    later = START + timedelta(days=90)
    assert matching.match(view, graduated.faults, later) is None
    assert view.labels["nvidia.com/gpu.present"] == "true"


def test_the_kind_agent_shows_a_fault_and_clears_back_to_healthy_with_it(
    graduated: Policy, mix: FaultMix
) -> None:
    publisher, cluster, host = _setup(graduated, mix, FleetSpec(agent=AgentProfile.kind))
    host.fault = HostFault(1, _cause(mix, "faulty-gpu"), XID62, started_at=0.0)
    assert publisher.publish(host, None, cluster)
    found = matching.match(cluster.views()[host.name], graduated.faults, START)
    assert found is not None
    assert found.fault.name == "gpu-xid-reset"
    assert not found.weak
    host.fault = None
    assert publisher.publish(host, None, cluster)
    assert not publisher.publish(host, None, cluster)  # nothing changed: nothing written
    assert matching.match(cluster.views()[host.name], graduated.faults, START) is None


def test_a_host_that_stops_answering_is_not_ready(graduated: Policy, mix: FaultMix) -> None:
    publisher, cluster, host = _setup(graduated, mix)
    dead = _cause(mix, "power-supply")
    host.fault = HostFault(1, dead, dead.signals[0].symptom, started_at=0.0)
    publisher.publish(host, None, cluster)
    view = cluster.views()[host.name]
    assert not host.ready
    assert not view.ready
