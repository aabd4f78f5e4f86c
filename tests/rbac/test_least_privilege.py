"""The chart grants the operator exactly what it uses: no less, no more, no wildcards.

One run of every scenario (tests/rbac/scenarios.py) records, from the emulator's request log,
each (verb, group, resource[/subresource], namespace) the operator's ServiceAccount asked for;
the rendered ClusterRole and Role must cover all of it and grant nothing else. The audit itself
is shown to catch a removed rule, an extra rule and a wildcard on the real recorded usage.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from remediation_emulator.fleet.manifests import Shape
from tests.chart import chart_check
from tests.rbac import permissions, scenarios
from tests.rbac.conftest import Chart, running_cluster
from tests.rbac.permissions import Deliberate, Use

pytestmark = [
    pytest.mark.integration,
    # One worker under `make test`'s xdist runs the module: its fixture is module-scoped.
    pytest.mark.xdist_group("rbac-least-privilege"),
]

DELIBERATE: tuple[Deliberate, ...] = (
    Deliberate(
        f"{chart_check.NAMESPACE}-executors",
        ("", "events", "list"),
        "read only when an executor Job has no pod (its pod was refused: FailedCreate); the"
        " emulated fleet's Jobs always get their pod. tests/chart/test_executor_refusal.py"
        " covers the read",
    ),
)
"""Grants kept although no scenario uses them, each with the reason."""


@dataclass(frozen=True)
class Recording:
    uses: frozenset[Use]
    """Every resource request, as RBAC sees it."""
    beyond_discovery: frozenset[str]
    """Non-resource requests the default discovery role would not allow."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def recorded(chart: Chart, tmp_path_factory: pytest.TempPathFactory) -> Recording:
    """What the operator's ServiceAccount used across every scenario (RBAC not enforced, so a
    missing grant cannot hide the requests that would follow it)."""
    shape = Shape(nodes=7, nodes_per_training_job=3, pdb_every=0)
    tmp = tmp_path_factory.mktemp("rbac-recorded")
    async with running_cluster(tmp, chart, enforce=False, shape=shape) as cluster:
        await scenarios.everything(cluster)
    log = cluster.api.request_log
    return Recording(
        permissions.used(log, chart.user), permissions.beyond_discovery(log, chart.user)
    )


def audit(chart: Chart, docs: list[dict[str, Any]], uses: frozenset[Use]) -> permissions.Report:
    roles = [d for d in docs if d.get("kind") in ("ClusterRole", "Role")]
    return permissions.compare(uses, chart_check.rbac(docs), roles=roles, exceptions=DELIBERATE)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_chart_grants_exactly_what_the_operator_uses(
    chart: Chart, recorded: Recording
) -> None:
    report = audit(chart, list(chart.docs), recorded.uses)
    used = "\n".join(str(u) for u in sorted(recorded.uses))
    assert report.ok, f"{report}\n\nused:\n{used}"
    # Discovery (/api, /apis, /version, ...) is granted to every authenticated user by the
    # default system:discovery role; anything else would need a nonResourceURLs rule.
    assert not recorded.beyond_discovery


@pytest.mark.asyncio(loop_scope="module")
async def test_the_recording_saw_the_paths_that_need_each_kind_of_grant(
    recorded: Recording, chart: Chart
) -> None:
    """Guards the scenarios themselves: if one stops exercising its path, say which."""
    rules = {u.rule for u in recorded.uses}
    expected = {
        ("", "nodes", "delete"),  # DeleteNode replacement
        ("karpenter.sh", "nodeclaims", "delete"),  # Karpenter replacement
        ("karpenter.sh", "nodeclaims", "list"),  # a NodeClaim found by providerID
        ("", "events", "patch"),  # a repeated Event is counted
        ("", "pods/eviction", "create"),  # drain
        ("", "pods", "delete"),  # drain forced after its timeout
        ("batch", "jobs", "create"),  # GPU reset / reboot executors
        ("batch", "jobs", "delete"),  # executor Jobs after --job-retention
        ("remediation.gpuops.io", "remediations", "delete"),  # retention
        ("coordination.k8s.io", "leases", "update"),  # leader election
    }
    assert expected <= rules, f"not exercised: {sorted(expected - rules)}"
    creates = [u for u in recorded.uses if u.rule == ("batch", "jobs", "create")]
    assert {u.namespace for u in creates} == {chart.executor_namespace}


def _role(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The operator's own Role or ClusterRole (the one its binding refers to)."""
    binding = next(d for d in docs if d.get("kind") == kind + "Binding")
    name = binding["roleRef"]["name"]
    return next(d for d in docs if d.get("kind") == kind and d["metadata"]["name"] == name)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_removed_rule_is_reported_missing(chart: Chart, recorded: Recording) -> None:
    docs = copy.deepcopy(list(chart.docs))
    rules = _role(docs, "ClusterRole")["rules"]
    eviction = next(r for r in rules if r["resources"] == ["pods/eviction"])
    rules.remove(eviction)
    report = audit(chart, docs, recorded.uses)
    assert not report.ok
    assert {u.rule for u in report.missing} == {("", "pods/eviction", "create")}
    assert "the chart lacks: create core/pods/eviction" in str(report)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_removed_role_verb_is_reported_missing(chart: Chart, recorded: Recording) -> None:
    docs = copy.deepcopy(list(chart.docs))
    for rule in _role(docs, "Role")["rules"]:
        if rule["resources"] == ["leases"]:
            rule["verbs"].remove("update")
    report = audit(chart, docs, recorded.uses)
    assert {u.rule for u in report.missing} == {("coordination.k8s.io", "leases", "update")}
    assert {u.namespace for u in report.missing} == {chart.namespace}


@pytest.mark.asyncio(loop_scope="module")
async def test_an_added_wildcard_is_reported(chart: Chart, recorded: Recording) -> None:
    docs = copy.deepcopy(list(chart.docs))
    _role(docs, "ClusterRole")["rules"][0]["verbs"] = ["*"]
    report = audit(chart, docs, recorded.uses)
    assert not report.ok
    assert any("verbs contains '*'" in w for w in report.wildcards), report.wildcards


@pytest.mark.asyncio(loop_scope="module")
async def test_an_unused_grant_is_reported(chart: Chart, recorded: Recording) -> None:
    docs = copy.deepcopy(list(chart.docs))
    _role(docs, "ClusterRole")["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    )
    report = audit(chart, docs, recorded.uses)
    assert report.unused == {("cluster", ("", "secrets", "get"))}
    assert not report.missing


@pytest.mark.asyncio(loop_scope="module")
async def test_a_namespaced_grant_widened_to_the_cluster_is_reported(
    chart: Chart, recorded: Recording
) -> None:
    """Creating Jobs cluster-wide would let the operator run pods in any namespace."""
    docs = copy.deepcopy(list(chart.docs))
    _role(docs, "ClusterRole")["rules"].append(
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}
    )
    report = audit(chart, docs, recorded.uses)
    # The namespaced grant is now redundant: the audit names it, so the widening is noticed.
    assert (chart.executor_namespace, ("batch", "jobs", "create")) in report.unused


def test_the_chart_binds_only_its_own_roles_to_its_own_account(chart: Chart) -> None:
    names = {(d["kind"], d["metadata"]["name"]) for d in chart.roles}
    for binding in (
        d for d in chart.docs if d.get("kind") in ("ClusterRoleBinding", "RoleBinding")
    ):
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"]) in names, f"{binding['kind']} binds {ref}"
        users = {
            f"system:serviceaccount:{s['namespace']}:{s['name']}"
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        }
        assert users == {chart.user}
        assert all(s["kind"] == "ServiceAccount" for s in binding["subjects"])
