"""A node name at the 253-character limit, end to end against the real operator: the whole
ladder runs, and every name the operator makes from it is one the API server accepts and a
human can still use: the Remediation (a DNS subdomain, at most 253 characters), the executor
Jobs (at most 63: they label their pods with the Job name), the Events (at most 253)."""

from __future__ import annotations

import re

import pytest

from remediation_emulator.fleet.manifests import Shape
from tests.integration.conftest import Cluster, eventually
from tests.reliability import invariants
from tests.reliability.test_crash import fast_ladder

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def subdomain(name: str) -> bool:
    return len(name) <= 253 and SUBDOMAIN.fullmatch(name) is not None


@pytest.mark.fleet(
    shape=Shape(nodes=2, node_prefix="n" * 248, nodes_per_training_job=2, pdb_every=0)
)
async def test_a_253_character_node_name_climbs_the_whole_ladder(cluster: Cluster) -> None:
    node = cluster.node_names()[0]
    assert len(node) == 253, len(node)
    async with invariants.replaying(cluster) as replay:
        cluster.apply(fast_ladder())
        await cluster.start_operator()
        cluster.fleet.inject(node, "xid-62")
        await eventually(lambda: cluster.phase(node) == "Succeeded", within=60, what="closed")
    remediation = cluster.remediation(node)
    assert remediation is not None
    name = remediation["metadata"]["name"]
    assert subdomain(name), name
    assert remediation["status"]["reason"] == "NodeReplaced"
    assert [s["action"] for s in remediation["status"]["steps"]] == invariants.LADDER
    jobs = list(replay.jobs_created)
    assert len(jobs) == 2
    assert all(len(j) <= 63 and LABEL.fullmatch(j) for j in jobs), jobs
    events = [
        e
        for e in cluster.api.store.list("events")
        if e["involvedObject"].get("name") in (node, name)
    ]
    assert events
    assert all(subdomain(e["metadata"]["name"]) for e in events)
    rejected = [e for e in cluster.writes_by("operator-a") if e.code in (400, 422)]
    assert rejected == [], rejected
