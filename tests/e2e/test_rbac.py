"""Least privilege on a real authorizer: the operator runs the whole ladder authenticated as
the chart's ServiceAccount (a real token from the TokenRequest API), with only the chart's
rendered ClusterRole/ClusterRoleBinding/Roles/RoleBindings (the Lease in the operator's
namespace, the executor Jobs in their own), enforced by kube-apiserver's RBAC authorizer.
Every request it needs is allowed (the ladder completes) and it is never refused one (no 403
in its log)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import Scenario
from tests.e2e.control_plane import AdminClient, ApiError
from tests.e2e.test_ladder import nodes_of
from tests.integration.conftest import eventually, has_our_taint
from tests.rbac.conftest import Chart
from tests.rbac.conftest import chart as chart  # the rendered chart (a fixture)

ACCOUNT_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def in_namespace(doc: dict[str, Any], moves: dict[str, str]) -> dict[str, Any]:
    """A rendered object moved from the chart's namespaces to this test's (`moves`: old ->
    new, for the object and for its subjects)."""
    moved = copy.deepcopy(doc)
    namespace = moved["metadata"].get("namespace")
    if namespace in moves:
        moved["metadata"]["namespace"] = moves[namespace]
    for subject in moved.get("subjects") or []:
        if subject.get("namespace") in moves:
            subject["namespace"] = moves[subject["namespace"]]
    return moved


async def test_the_chart_rbac_is_enough_for_the_whole_ladder_on_a_real_authorizer(
    scenario: Scenario, chart: Chart
) -> None:
    e2e = scenario
    executors = e2e.extra_namespace("executors")
    moves = {chart.namespace: e2e.namespace, chart.executor_namespace: executors}
    account = None
    for doc in chart.docs:
        if doc.get("kind") in ACCOUNT_KINDS:
            e2e.admin.apply(in_namespace(dict(doc), moves))
            if doc["kind"] == "ServiceAccount":
                account = doc["metadata"]["name"]
    assert account is not None
    kubeconfig = e2e.cluster.service_account_kubeconfig(e2e.namespace, account)
    # The token is the ServiceAccount's and the authorizer enforces its roles.
    with pytest.raises(ApiError) as refused:
        AdminClient(kubeconfig).get("/api/v1/secrets")
    assert refused.value.status == 403
    node = e2e.node_names()[0]
    claim = (e2e.node(node) or {})["metadata"]["ownerReferences"][0]["name"]
    e2e.apply(e2e.policy())
    operator = await e2e.start_operator(
        "operator-a", "--executor-namespace", executors, kubeconfig=kubeconfig
    )

    e2e.fleet.inject(node, "xid-62")

    await eventually(lambda: e2e.phase(node) == "Succeeded", within=120, what="replaced")
    status = (e2e.remediation(node) or {})["status"]
    assert status["reason"] == "NodeReplaced"
    assert [s["action"] for s in status["steps"]] == [
        "Cordon",
        "Drain",
        "GPUReset",
        "Reboot",
        "Replace",
    ]
    assert e2e.admin.find(f"/apis/karpenter.sh/v1/nodeclaims/{claim}") is None
    await eventually(lambda: len(nodes_of(e2e)) == 3, within=30, what="a replacement node")
    assert not any(has_our_taint(n) for n in nodes_of(e2e))
    log = operator.log.read_text()
    # The real server words every RBAC refusal "... is forbidden: User ... cannot ...".
    assert "forbidden" not in log.lower(), log[-3000:]
