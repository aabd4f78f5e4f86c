"""The audit's scoping rules on hand-made request-log entries (no server, no chart)."""

from __future__ import annotations

from datetime import UTC, datetime

from remediation_emulator.requestlog import Entry
from tests.rbac import permissions
from tests.rbac.permissions import Use

OPERATOR = "system:serviceaccount:remediation-system:remediation-operator"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def entry(
    verb: str,
    resource: str = "",
    *,
    group: str = "",
    subresource: str = "",
    namespace: str = "",
    user: str = OPERATOR,
    path: str = "",
) -> Entry:
    return Entry(NOW, verb, group, resource, subresource, namespace, "", 200, user, path)


def test_only_the_operators_resource_requests_count_with_subresources_joined() -> None:
    log = [
        entry("create", "pods", subresource="eviction", namespace="training"),
        entry("patch", "nodes", user="gpu-fleet"),
        entry("get", path="/apis"),
    ]
    assert permissions.used(log, OPERATOR) == {Use("", "pods/eviction", "create", "training")}


def test_discovery_is_free_but_other_urls_and_verbs_are_not() -> None:
    log = [
        entry("get", path="/apis/batch/v1"),
        entry("get", path="/version"),
        entry("get", path="/metrics"),
        entry("post", path="/api"),
    ]
    assert permissions.beyond_discovery(log, OPERATOR) == {"get /metrics", "post /api"}


def test_a_role_covers_only_its_own_namespace() -> None:
    grants = {
        "cluster": frozenset(),
        "remediation-system-executors": frozenset({("batch", "jobs", "create")}),
        "remediation-system": frozenset({("coordination.k8s.io", "leases", "get")}),
    }
    ours = Use("batch", "jobs", "create", "remediation-system-executors")
    lease = Use("coordination.k8s.io", "leases", "get", "remediation-system")
    elsewhere = Use("batch", "jobs", "create", "default")
    beside = Use("batch", "jobs", "create", "remediation-system")
    assert permissions.compare([ours, lease], grants).ok
    report = permissions.compare([ours, lease, elsewhere, beside], grants)
    assert report.missing == {elsewhere, beside}
    assert "the chart lacks: create batch/jobs in namespace default" in str(report)


def test_a_cluster_scoped_request_needs_the_cluster_role() -> None:
    grants = {"cluster": frozenset(), "remediation-system": frozenset({("", "nodes", "get")})}
    report = permissions.compare([Use("", "nodes", "get", "")], grants)
    assert report.missing == {Use("", "nodes", "get", "")}
    assert report.unused == {("remediation-system", ("", "nodes", "get"))}
    assert "Role in remediation-system grants, never used: get core/nodes" in str(report)


def test_a_deliberate_exception_is_not_reported_unused() -> None:
    rule = ("", "nodes", "delete")
    grants = {"cluster": frozenset({rule})}
    kept = permissions.Deliberate("cluster", rule, "only the DeleteNode provider deletes nodes")
    assert not permissions.compare([], grants).ok
    assert permissions.compare([], grants, exceptions=[kept]).ok


def test_star_subresources_non_resource_urls_and_aggregation_are_wildcards() -> None:
    role = {
        "kind": "ClusterRole",
        "metadata": {"name": "wide"},
        "rules": [
            {"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]},
    }
    found = permissions.wildcards([role])
    assert len(found) == 3
    assert "ClusterRole wide rules[0].resources contains '*/status'" in found
