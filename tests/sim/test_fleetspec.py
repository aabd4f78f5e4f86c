"""The fleet file: defaults from the Llama 3 fleet, errors that name the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from remediation_operator.sim import fleetspec
from remediation_operator.sim.agents import AgentProfile
from remediation_operator.sim.spec import SpecError


def test_no_file_means_the_llama3_fleet() -> None:
    fleet = fleetspec.load(None)
    assert (fleet.nodes, fleet.gpus_per_node) == (2048, 8)
    assert fleet.jobs is not None
    assert fleet.storms is None


def test_a_fleet_file_overrides_what_it_names() -> None:
    fleet = fleetspec.parse(
        {
            "nodes": 100,
            "zones": 2,
            "pools": ["train", "serve"],
            "jobs": {"nodesPerJob": 8, "checkpointEvery": "30m"},
            "storms": {"fraction": 0.5, "lasts": ["5m", "10m"], "firstAt": "2h"},
        }
    )
    assert fleet.nodes == 100
    assert fleet.zones == ("zone-a", "zone-b")
    assert fleet.zone_of(3) == "zone-b"
    assert [fleet.pool_of(i) for i in range(5)] == ["train", "train", "serve", "serve", "train"]
    assert fleet.jobs is not None
    assert fleet.jobs.nodes_per_job == 8
    assert fleet.jobs.checkpoint_every == timedelta(minutes=30)
    assert fleet.storms is not None
    assert fleet.storms.first_at == timedelta(hours=2)


def test_a_jobs_own_exclusion_is_read_and_off_by_default() -> None:
    assert fleetspec.parse({}).jobs is not None
    assert fleetspec.parse({}).jobs.exclude_after_crashes is None  # type: ignore[union-attr]
    jobs = fleetspec.parse({"jobs": {"excludeAfterCrashes": 2}}).jobs
    assert jobs is not None
    assert jobs.exclude_after_crashes == 2


def test_jobs_can_be_switched_off() -> None:
    assert fleetspec.parse({"jobs": None}).jobs is None


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"nodes": 0}, "nodes", "at least 1"),
        ({"nodes": 4, "jobs": {"nodesPerJob": 8}}, "jobs.nodesPerJob", "more than the fleet"),
        ({"zones": ["a", "a"]}, "zones", "twice"),
        ({"pools": []}, "pools", "non-empty list"),
        ({"nodez": 5}, "nodez", "unknown field"),
        ({"storms": {"fraction": 2}}, "storms.fraction", "probability"),
        ({"jobs": {"length": "0s"}}, "jobs.length", "longer than 0s"),
        ({"storms": {"meanInterval": "soon"}}, "storms.meanInterval", "not a duration"),
        ({"jobs": {"excludeAfterCrashes": 0}}, "jobs.excludeAfterCrashes", "at least 1"),
        ({"agent": "nvidia"}, "agent", "one of eks, npd, kind"),
        ({"agentRedetect": "soon"}, "agentRedetect", "not a duration"),
    ],
)
def test_a_bad_fleet_names_the_field(data: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        fleetspec.parse(data)
    assert caught.value.path == field
    assert words in str(caught.value)


def test_the_shipped_default_fleet_file_is_the_default() -> None:
    shipped = fleetspec.DATA / "fleet-llama3.yaml"
    assert fleetspec.load(shipped) == fleetspec.FleetSpec()


def test_the_agents_are_the_real_ones_unless_a_fleet_asks_for_the_kind_one() -> None:
    assert fleetspec.parse({}).agent is AgentProfile.eks
    assert fleetspec.parse({"agent": "npd"}).agent is AgentProfile.npd
    assert fleetspec.parse({"agent": "kind"}).agent is AgentProfile.kind


def test_the_shipped_storm_fleet_has_storms() -> None:
    fleet = fleetspec.load(fleetspec.DATA / "fleet-storms.yaml")
    assert fleet.storms is not None
    assert fleet.storms.symptom.reason == "NvidiaXID62Error"
