"""Start-up that says what is wrong, on a real kube-apiserver (and the same on the emulator):
run with `--namespace` naming a namespace that does not exist, the operator cannot create its
Lease (the real server answers 404; namespaces are not created on demand). It must not sit
silent: an error log line names the reason and what to do, once and not once per retry;
`/readyz` fails with the reason; `gpuops_remediation_leader_election_errors_total` counts it;
and once the namespace exists it leads without a restart. A Lease that RBAC forbids is
reported the same way."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tests.e2e.conftest import Scenario
from tests.e2e.test_rbac import in_namespace
from tests.integration.conftest import Cluster, Operator, eventually, launch_operator
from tests.integration.conftest import cluster as cluster  # the emulator (a fixture)
from tests.integration.test_recovery import stays
from tests.rbac.conftest import Chart
from tests.rbac.conftest import chart as chart  # the rendered chart (a fixture)

ERRORS = "gpuops_remediation_leader_election_errors_total"


def log_lines(operator: Operator) -> list[dict[str, Any]]:
    lines = []
    for text in operator.log.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except ValueError:
            continue
    return lines


def lease_errors(operator: Operator, reason: str) -> list[dict[str, Any]]:
    return [
        line
        for line in log_lines(operator)
        if line.get("event") == "leader_election_failed" and line.get("reason") == reason
    ]


def counted(metrics: str, reason: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'{ERRORS}{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def readyz(operator: Operator) -> tuple[int, str]:
    url = f"http://127.0.0.1:{operator.metrics_port}/readyz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def reported_and_healed(
    operator: Operator, namespace: str, create_namespace: Callable[[], Awaitable[None] | None]
) -> None:
    await eventually(
        lambda: lease_errors(operator, "NamespaceNotFound"), within=30, what="an error line"
    )
    line = lease_errors(operator, "NamespaceNotFound")[0]
    assert line["level"] == "error"
    assert f"namespace {namespace!r} does not exist" in line["message"]
    assert f"kubectl create namespace {namespace}" in line["message"]
    status, text = await readyz(operator)
    assert status == 503
    assert namespace in text
    # Retried every 0.5 s, counted every time, logged once (until 30 s pass or it changes).
    await eventually(
        lambda: _count_at_least(operator, "NamespaceNotFound", 4), what="retries counted"
    )
    assert len(lease_errors(operator, "NamespaceNotFound")) == 1
    assert not any(line.get("event") == "leadership_acquired" for line in log_lines(operator))

    done = create_namespace()
    if done is not None:
        await done

    await eventually(
        lambda: any(line.get("event") == "leadership_acquired" for line in log_lines(operator)),
        within=30,
        what="leadership once the namespace exists",
    )
    await eventually(lambda: _ready(operator), what="ready again")
    assert any(line.get("event") == "leader_election_recovered" for line in log_lines(operator))


async def _count_at_least(operator: Operator, reason: str, count: int) -> bool:
    return counted(await operator.metrics(), reason) >= count


async def _ready(operator: Operator) -> bool:
    return (await readyz(operator))[0] == 200


async def test_a_missing_lease_namespace_is_reported_and_heals_on_a_real_server(
    scenario: Scenario,
) -> None:
    e2e = scenario
    namespace = f"{e2e.namespace}-missing"
    operator = await e2e.start_operator(namespace=namespace, wait_ready=False)
    assert e2e.admin.find(f"/api/v1/namespaces/{namespace}") is None

    def create() -> None:
        e2e.admin.ensure_namespace(namespace)

    try:
        await reported_and_healed(operator, namespace, create)
    finally:
        e2e.admin.delete(f"/api/v1/namespaces/{namespace}")


async def test_a_missing_lease_namespace_is_reported_and_heals_on_the_emulator(
    cluster: Cluster,
) -> None:
    namespace = "not-created-yet"
    kubeconfig = cluster.api.write_kubeconfig(cluster.tmp / "kubeconfig", user="operator-a")
    operator = await launch_operator(kubeconfig, namespace, cluster.tmp, "operator-a")
    cluster.operators.append(operator)  # stopped by the fixture

    def create() -> None:
        cluster.api.store.create(
            "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )

    await reported_and_healed(operator, namespace, create)


async def test_a_lease_forbidden_by_rbac_is_reported(scenario: Scenario, chart: Chart) -> None:
    """The chart's ClusterRole without its Role: nodes and policies may be read, the Lease
    may not be written."""
    e2e = scenario
    account = None
    for doc in chart.docs:
        if doc.get("kind") in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            e2e.admin.apply(in_namespace(dict(doc), {chart.namespace: e2e.namespace}))
            if doc["kind"] == "ServiceAccount":
                account = doc["metadata"]["name"]
    assert account is not None
    kubeconfig = e2e.cluster.service_account_kubeconfig(e2e.namespace, account)
    operator = await e2e.start_operator(kubeconfig=kubeconfig, wait_ready=False)

    await eventually(lambda: lease_errors(operator, "Forbidden"), within=30, what="an error line")
    line = lease_errors(operator, "Forbidden")[0]
    assert line["level"] == "error"
    assert "coordination.k8s.io leases" in line["message"]
    assert "forbidden" in line["message"]  # the server's own words are carried along
    status, text = await readyz(operator)
    assert status == 503
    assert "not allowed" in text
    assert counted(await operator.metrics(), "Forbidden") >= 1
    await stays(
        lambda: not any(line.get("event") == "leadership_acquired" for line in log_lines(operator)),
        1.0,
        "it led without a Lease",
    )
