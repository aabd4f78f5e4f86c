"""Fixtures for proving the chart's RBAC is least privilege.

Real: the chart rendered by helm (`helm template`, default values), the operator process
(`python -m remediation_operator run`, kopf and all), the API emulator over HTTP with its
request log and, where a test asks for it, its RBAC authorizer enforcing the rendered
ClusterRole/ClusterRoleBinding/Role/RoleBinding; the emulated fleet (kubelet, Job runner, node
agent, Karpenter). The operator authenticates as the chart's ServiceAccount
(`system:serviceaccount:<namespace>:<name>`). Faked: short policy windows and the fleet's FAST
profile (see tests/integration/conftest.py); the fleet's own user is bound to an all-powerful
test ClusterRole, since it stands in for the kubelet, Karpenter and the Job controller.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import fleet as fleet_module
from remediation_emulator.fleet.client import Connection
from remediation_emulator.fleet.manifests import Shape
from tests.chart import chart_check
from tests.integration.conftest import CONFIG, FLEET_USER, ROOT, Cluster, Operator

Document = dict[str, Any]
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
RESOURCES = {
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}


@dataclass(frozen=True)
class Chart:
    """The chart's rendered RBAC objects and who the operator is."""

    docs: tuple[Document, ...]
    namespace: str
    user: str
    """The ServiceAccount's username, as the API server authenticates its token."""
    executor_namespace: str = ""
    """Where the GPU-reset and reboot Jobs run (`--executor-namespace` of the Deployment)."""

    @property
    def roles(self) -> list[Document]:
        return [d for d in self.docs if d.get("kind") in ("ClusterRole", "Role")]

    @property
    def rbac_objects(self) -> list[Document]:
        return [d for d in self.docs if d.get("kind") in RBAC_KINDS]


@pytest.fixture(scope="session")
def chart() -> Chart:
    try:
        tools = chart_check.Tools.find()
    except chart_check.ToolMissingError as missing:
        pytest.skip(f"chart tools missing, run `make chart-check` to install them: {missing}")
    docs = tuple(chart_check.render(tools))
    accounts = chart_check.objects(docs, "ServiceAccount")
    assert len(accounts) == 1, "the chart renders exactly one ServiceAccount"
    account = accounts[0]["metadata"]
    namespace = account["namespace"]
    [deployment] = chart_check.objects(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    [executors] = [a.split("=", 1)[1] for a in args if a.startswith("--executor-namespace=")]
    user = f"system:serviceaccount:{namespace}:{account['name']}"
    return Chart(docs, namespace, user, executors)


@dataclass
class ChartCluster(Cluster):
    """The shared emulator cluster, whose operators run with the chart's executor namespace."""

    executor_namespace: str = ""

    async def start_operator(self, identity: str = "operator-a", *extra: str) -> Operator:
        flags = ("--executor-namespace", self.executor_namespace)
        return await super().start_operator(identity, *flags, *extra)


@dataclass
class AsServiceAccount(ApiServer):
    """The emulator handle, except that every operator kubeconfig names the ServiceAccount.

    The shared `Cluster.start_operator` writes a kubeconfig for the replica's identity; here
    each replica keeps its identity (Lease holder) but authenticates as the chart's account.
    """

    account: str = ""

    def write_kubeconfig(self, path: str | os.PathLike[str], *, user: str = "admin") -> Path:
        return super().write_kubeconfig(path, user=self.account)


FLEET_ROLE: Document = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "test-emulated-fleet"},
    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
}
FLEET_BINDING: Document = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "test-emulated-fleet"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "test-emulated-fleet",
    },
    "subjects": [{"kind": "User", "name": FLEET_USER, "apiGroup": "rbac.authorization.k8s.io"}],
}


@asynccontextmanager
async def running_cluster(
    tmp: Path, chart: Chart, *, enforce: bool, shape: Shape
) -> AsyncIterator[Cluster]:
    """Emulator (+ the chart's RBAC objects, enforced if `enforce`) + fleet; operators stopped
    on exit (their logs are printed if the block raised)."""
    async with apiserver.serve(rbac=enforce) as api:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            api.store.create("customresourcedefinitions", yaml.safe_load(crd.read_text()))
        for name in (chart.namespace, chart.executor_namespace):
            if api.store.find("namespaces", name) is None:
                namespace_object = {"apiVersion": "v1", "kind": "Namespace"}
                api.store.create("namespaces", namespace_object | {"metadata": {"name": name}})
        for obj in [*chart.rbac_objects, FLEET_ROLE, FLEET_BINDING]:
            namespace = obj["metadata"].get("namespace")
            api.store.create(RESOURCES[obj["kind"]], obj, namespace)
        fields = {f.name: getattr(api, f.name) for f in dataclasses.fields(ApiServer)}
        handle = AsServiceAccount(**fields, account=chart.user)
        connection = Connection(
            api.url, headers={"Authorization": f"Bearer {api.token(FLEET_USER)}"}
        )
        # The kind agent: the scenarios' transient fault recovers when its condition clears
        # with the hardware (the real agents' stays until they restart, D74).
        kind = CONFIG.with_(agent="kind")
        async with fleet_module.running(connection, shape=shape, config=kind) as fleet:
            cluster = ChartCluster(handle, fleet, tmp, executor_namespace=chart.executor_namespace)
            try:
                yield cluster
            except BaseException:
                print(cluster.dump())
                raise
            finally:
                for operator in cluster.operators:
                    await operator.stop()
