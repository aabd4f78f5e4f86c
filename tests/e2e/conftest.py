"""Fixtures for the end-to-end scenarios on a real kube-apiserver.

Real: kube-apiserver, etcd and kube-controller-manager (Job, disruption, garbage-collector and
namespace controllers), started once per session by `real_cluster` (tests/e2e/control_plane.py)
or an existing cluster from E2E_KUBECONFIG; the operator process (`python -m
remediation_operator run`, exactly as tests/integration start it); the emulated fleet's kubelet,
node agent, Karpenter and Job-pod runner as clients of the real server over TLS with their own
client certificate, as kwok plays kubelets for nodes without machines. Faked: time is short
(policies with second-long windows, the fleet's FAST profile) and repair probabilities are
pinned, as in tests/integration. Each test gets its own operator namespace, node names and
workload namespace, and everything it created is deleted afterwards, so tests share one server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_emulator.fleet import fleet as fleet_module
from remediation_emulator.fleet import kubeconfig as fleet_kubeconfig
from remediation_emulator.fleet.config import FleetConfig
from remediation_emulator.fleet.fleet import Fleet
from remediation_emulator.fleet.manifests import Shape
from tests.e2e.control_plane import AdminClient, ApiError, RealCluster
from tests.integration.conftest import (
    CONFIG,
    ROOT,
    Operator,
    eventually,
    launch_operator,
)
from tests.integration.conftest import policy as integration_policy

FLEET_USER = "e2e-fleet"
GROUP = "remediation.gpuops.io"
REMEDIATIONS = f"/apis/{GROUP}/v1alpha1/remediations"
POLICIES = f"/apis/{GROUP}/v1alpha1/remediationpolicies"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
E2E_CONFIG: FleetConfig = CONFIG.with_(job_controller=True, adopt_all_nodes=False)
"""The fleet on a real server: the real Job controller runs Jobs (the fleet runs their pods),
and only nodes the fleet itself created are played."""

_numbers = itertools.count(1)
RUN = secrets.token_hex(2)
"""Part of every name a scenario makes, so runs against one existing cluster never collide."""


@pytest.fixture(scope="session")
def fleet_user(real_cluster: RealCluster) -> Path:
    """A kubeconfig for the fleet: its own client certificate bound to cluster-admin (it plays
    the kubelet, Karpenter and a node agent), or the admin kubeconfig on an existing cluster."""
    if not real_cluster.managed:
        return real_cluster.kubeconfig
    real_cluster.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "e2e-fleet"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": FLEET_USER}
            ],
        }
    )
    return real_cluster.user_kubeconfig(FLEET_USER)


@pytest.fixture(scope="session")
def crds_installed(real_cluster: RealCluster) -> None:
    real_cluster.admin.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))


@dataclass
class Scenario:
    """One test's slice of the real cluster: its namespace, its fleet and its operators."""

    cluster: RealCluster
    fleet: Fleet
    namespace: str
    """The operator's namespace (Lease, Jobs) for this test."""
    shape: Shape
    tmp: Path
    operators: list[Operator] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    """Namespaces this test created besides its own (deleted afterwards)."""
    policies: set[str] = field(default_factory=set)
    """RemediationPolicies this test applied (deleted afterwards)."""

    @property
    def admin(self) -> AdminClient:
        return self.cluster.admin

    # The operator ---------------------------------------------------------------------------

    async def start_operator(
        self,
        identity: str = "operator-a",
        *extra: str,
        kubeconfig: Path | None = None,
        namespace: str | None = None,
        wait_ready: bool = True,
    ) -> Operator:
        operator = await launch_operator(
            kubeconfig or self.cluster.kubeconfig,
            namespace or self.namespace,
            self.tmp,
            identity,
            *extra,
            number=len(self.operators),
        )
        self.operators.append(operator)
        if wait_ready:
            await eventually(
                lambda: self._ready(operator), within=30, what=f"operator {identity} ready"
            )
        return operator

    async def _ready(self, operator: Operator) -> bool:
        if operator.process.returncode is not None:
            pytest.fail(f"operator exited early:\n{operator.log.read_text()[-3000:]}")
        return await operator.probe("/readyz") == 200

    async def leader(self) -> Operator:
        """The replica that holds this test's Lease (by the Lease's holderIdentity)."""

        def holder() -> Operator | None:
            lease = self.admin.find(
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}"
                "/leases/remediation-operator"
            )
            name = ((lease or {}).get("spec") or {}).get("holderIdentity")
            alive = [o for o in self.operators if o.process.returncode is None]
            return next((o for o in alive if o.identity == name), None)

        found: Operator = await eventually(holder, within=30, what="a leader")
        return found

    def extra_namespace(self, suffix: str) -> str:
        """Create `<namespace>-<suffix>` for this test (deleted afterwards)."""
        name = f"{self.namespace}-{suffix}"
        self.admin.ensure_namespace(name)
        self.namespaces.append(name)
        return name

    # Objects --------------------------------------------------------------------------------

    def policy(self, name: str = "gpu", **spec: Any) -> dict[str, Any]:
        """tests/integration's fast policy, selecting only this test's nodes (so a scenario
        never touches another test's nodes, nor real GPU nodes of an existing cluster)."""
        selector = {"matchLabels": {"karpenter.sh/nodepool": self.shape.nodepool}}
        return integration_policy(name, **{"nodeSelector": selector, **spec})

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "RemediationPolicy":
            self.policies.add(obj["metadata"]["name"])
        return self.admin.apply(obj)

    def node_names(self) -> list[str]:
        return [self.shape.node_name(i) for i in range(self.shape.nodes)]

    def node(self, name: str) -> dict[str, Any] | None:
        return self.admin.find(f"/api/v1/nodes/{name}")

    def remediations(self, node: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.admin.get(REMEDIATIONS)["items"]
        return [r for r in items if node is None or r["spec"]["nodeName"] == node]

    def remediation(self, node: str) -> dict[str, Any] | None:
        """The newest Remediation of `node` that has a status."""
        mine = [r for r in self.remediations(node) if r.get("status")]
        mine.sort(key=lambda r: r["metadata"]["creationTimestamp"])
        return mine[-1] if mine else None

    def phase(self, node: str) -> str | None:
        remediation = self.remediation(node)
        return remediation["status"].get("phase") if remediation else None

    def pods(self, namespace: str, node: str | None = None) -> list[dict[str, Any]]:
        params = {"fieldSelector": f"spec.nodeName={node}"} if node else {}
        items: list[dict[str, Any]] = self.admin.get(
            f"/api/v1/namespaces/{namespace}/pods", **params
        )["items"]
        return items

    def jobs(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.admin.get(
            f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        )["items"]
        return items

    def events(self, name: str, kind: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.admin.get(
            "/api/v1/events", fieldSelector=f"involvedObject.name={name}"
        )["items"]
        return [e for e in items if kind is None or e["involvedObject"].get("kind") == kind]

    def event_reasons(self, name: str, kind: str | None = None) -> set[str]:
        return {e["reason"] for e in self.events(name, kind)}

    def dump(self) -> str:
        parts = [f"--- {o.identity}\n{o.log.read_text()[-6000:]}" for o in self.operators]
        for r in self.remediations():
            parts.append(yaml.safe_dump(r.get("status"), sort_keys=False)[:3000])
        return "\n".join(parts)

    # Teardown -------------------------------------------------------------------------------

    async def stop_operators(self) -> None:
        for operator in self.operators:
            await operator.stop()

    def clean_up(self) -> None:
        """Delete what this test made (finalizers removed: nothing plays Karpenter any more).
        On a cluster this run started, every policy and Remediation goes (whichever suite
        left them); on an existing cluster only this test's own."""
        admin = self.admin
        ours = self.shape.node_prefix + "-"
        for policy in admin.get(POLICIES)["items"]:
            name = policy["metadata"]["name"]
            if self.cluster.managed or name in self.policies:
                admin.delete(f"{POLICIES}/{name}")
        for remediation in self.remediations():
            name = remediation["metadata"]["name"]
            if not self.cluster.managed and not remediation["spec"]["nodeName"].startswith(ours):
                continue
            if remediation["metadata"].get("finalizers"):
                admin.patch(f"{REMEDIATIONS}/{name}", {"metadata": {"finalizers": None}})
            admin.delete(f"{REMEDIATIONS}/{name}")
        for claim in admin.get(NODECLAIMS)["items"] if _serves(admin, NODECLAIMS) else []:
            labels = claim["metadata"].get("labels") or {}
            if labels.get("karpenter.sh/nodepool") != self.shape.nodepool:
                continue
            path = f"{NODECLAIMS}/{claim['metadata']['name']}"
            with contextlib.suppress(ApiError):
                admin.patch(path, {"metadata": {"finalizers": None}})
            admin.delete(path)
        for node in admin.get("/api/v1/nodes")["items"]:
            name = node["metadata"]["name"]
            if not name.startswith(ours):
                continue
            with contextlib.suppress(ApiError):
                admin.patch(f"/api/v1/nodes/{name}", {"metadata": {"finalizers": None}})
            admin.delete(f"/api/v1/nodes/{name}")
        for namespace in (self.namespace, self.shape.training_namespace, *self.namespaces):
            admin.delete(f"/api/v1/namespaces/{namespace}")


def _serves(admin: AdminClient, path: str) -> bool:
    try:
        admin.get(path, limit="1")
    except ApiError:
        return False
    return True


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fleet(shape=Shape, config=FleetConfig): the emulated fleet for this test"
    )


@pytest.fixture
async def scenario(
    real_cluster: RealCluster,
    fleet_user: Path,
    crds_installed: None,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Scenario]:
    """A fleet of 3 GPU nodes on the real server (the test's `fleet` marker may change it)."""
    if not real_cluster.has_controller_manager:
        pytest.skip("e2e scenarios need kube-controller-manager in E2E_ASSETS (Jobs, PDB status)")
    name = f"e2e{RUN}-{next(_numbers)}"
    namespace = f"{name}-operator"
    shape = Shape(
        nodes=3,
        node_prefix=f"{name}-gpu",
        nodepool=name,
        nodes_per_training_job=3,
        pdb_every=0,
        training_namespace=f"{name}-training",
        device_plugin_namespace="e2e-gpu-operator",
        extra_namespaces=(namespace,),
    )
    config = E2E_CONFIG
    marker = request.node.get_closest_marker("fleet")
    if marker is not None:
        changes = marker.kwargs.get("shape", {})
        shape = dataclasses.replace(shape, **changes)
        config = marker.kwargs.get("config", config)
    if real_cluster.managed:  # another suite's policies would claim this test's nodes too
        for leftover in real_cluster.admin.get(POLICIES)["items"]:
            real_cluster.admin.delete(f"{POLICIES}/{leftover['metadata']['name']}")
    # A real server refuses pods in a namespace until the controller-manager has made its
    # `default` ServiceAccount (about a second after the namespace): make the namespaces first.
    for ns in {shape.device_plugin_namespace, shape.training_namespace, *shape.extra_namespaces}:
        real_cluster.admin.ensure_namespace(ns)
        real_cluster.admin.wait_for(
            lambda ns=ns: real_cluster.admin.find(
                f"/api/v1/namespaces/{ns}/serviceaccounts/default"
            ),
            what=f"the default ServiceAccount of namespace {ns}",
        )
    connection = fleet_kubeconfig.load(fleet_user)
    async with fleet_module.running(connection, shape=shape, config=config) as fleet:
        scenario = Scenario(real_cluster, fleet, namespace, shape, tmp_path)
        try:
            yield scenario
        finally:
            if request.node.stash.get(_FAILED, False):
                print(scenario.dump())
            await scenario.stop_operators()
    scenario.clean_up()
