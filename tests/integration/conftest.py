"""Fixtures for the operator's integration tests.

Real: the operator process itself (`python -m remediation_operator run`, kopf and all) as a
subprocess; the API emulator serving real HTTP on 127.0.0.1 (watches, patches, the Eviction
subresource, PodDisruptionBudgets, Leases); the emulated fleet's kubelet, node agent, Job
runner and Karpenter talking to it over HTTP. Faked: time is short (policies with second-long
windows, the fleet's FAST profile), and repair probabilities are pinned so outcomes are
deterministic. Tests assert on API objects read from the emulator's store and poll with a
deadline; they never sleep a fixed time before an assertion.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import fleet as fleet_module
from remediation_emulator.fleet.client import Connection
from remediation_emulator.fleet.config import FAST, FleetConfig
from remediation_emulator.fleet.fleet import Fleet
from remediation_emulator.fleet.manifests import Shape
from remediation_emulator.requestlog import Entry

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "remediation-system"
FLEET_USER = "gpu-fleet"
QUARANTINE = "remediation.gpuops.io/quarantine"
FAULT_REASONS = "NvidiaXID(48|62|64|79)Error|NvidiaDoubleBitError|DCGMError"
JOB_TEMPLATE = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "template"},
    "spec": {
        "template": {
            "spec": {
                "containers": [{"name": "reset", "image": "busybox:1.36", "command": ["true"]}]
            }
        }
    },
}


def policy(name: str = "gpu", **spec: Any) -> dict[str, Any]:
    """A fast policy for tests: every window in seconds; `spec` keys override the defaults."""
    body: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
        "startupGrace": "0s",
        "faults": [
            {
                "name": "gpu-xid",
                "match": [
                    {"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}
                ],
                "tolerate": "0s",
                "ladder": [
                    {"action": "Cordon", "escalateAfter": "1s"},
                    {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
                    {"action": "GPUReset", "timeout": "20s", "escalateAfter": "1s"},
                    {"action": "Reboot", "timeout": "20s", "escalateAfter": "1s"},
                    {"action": "Replace", "timeout": "30s"},
                ],
            }
        ],
        "recovery": {"healthyFor": "1s"},
        "actions": {
            "gpuReset": {"executor": "Job"},
            "reboot": {"executor": "Job"},
            "replace": {"provider": "Karpenter"},
        },
    }
    body.update(copy.deepcopy(spec))
    return {
        "apiVersion": "remediation.gpuops.io/v1alpha1",
        "kind": "RemediationPolicy",
        "metadata": {"name": name},
        "spec": body,
    }


def cordon_only(tolerate: str = "0s") -> list[dict[str, Any]]:
    """A fault whose ladder only cordons and then holds (for recovery scenarios)."""
    return [
        {
            "name": "gpu-xid",
            "match": [
                {"type": "AcceleratedHardwareReady", "status": "False", "reason": FAULT_REASONS}
            ],
            "tolerate": tolerate,
            "ladder": [{"action": "Cordon"}],
            "onExhausted": "Hold",
        }
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def eventually(
    check: Callable[[], Any] | Callable[[], Awaitable[Any]],
    *,
    within: float = 20.0,
    what: str = "condition",
    interval: float = 0.1,
) -> Any:
    """Poll `check` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {within}s")
        await asyncio.sleep(interval)


@dataclass
class Operator:
    """One `remediation-operator run` process."""

    identity: str
    process: asyncio.subprocess.Process
    metrics_port: int
    log: Path

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response,
        ):
            return await response.text()

    async def probe(self, path: str) -> int:
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{self.metrics_port}{path}") as response,
            ):
                return response.status
        except aiohttp.ClientError:
            return 0

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), timeout=15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        return self.process.returncode or 0

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()

    def gauge(self, text: str, name: str) -> float | None:
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None


async def launch_operator(
    kubeconfig: Path, namespace: str, tmp: Path, identity: str, *extra: str, number: int = 0
) -> Operator:
    """`python -m remediation_operator run` with short lease timings and the test Job
    templates, against whatever server `kubeconfig` names (the emulator here, the real
    kube-apiserver in tests/e2e)."""
    templates = tmp / "job-templates"
    templates.mkdir(exist_ok=True)
    for file in ("gpu-reset.yaml", "reboot.yaml", "validate.yaml", "diagnose.yaml"):
        (templates / file).write_text(yaml.safe_dump(JOB_TEMPLATE))
    port = free_port()
    log = tmp / f"operator-{identity}-{number}.log"
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1")
    env.pop("POD_NAME", None)
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "remediation_operator",
            "run",
            "--namespace",
            namespace,
            "--identity",
            identity,
            "--metrics-address",
            f"127.0.0.1:{port}",
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "0.5s",
            "--job-templates",
            str(templates),
            "--log-level",
            "debug",
            *extra,
            env=env,
            cwd=str(ROOT),
            stdout=sink,
            stderr=sink,
        )
    return Operator(identity, process, port, log)


@dataclass
class Cluster:
    api: ApiServer
    fleet: Fleet
    tmp: Path
    operators: list[Operator] = field(default_factory=list)

    # The operator -------------------------------------------------------------------------

    async def start_operator(self, identity: str = "operator-a", *extra: str) -> Operator:
        kubeconfig = self.tmp / f"kubeconfig-{identity}"
        self.api.write_kubeconfig(kubeconfig, user=identity)
        operator = await launch_operator(
            kubeconfig, NAMESPACE, self.tmp, identity, *extra, number=len(self.operators)
        )
        self.operators.append(operator)
        await eventually(
            lambda: self._ready(operator), within=30, what=f"operator {identity} ready"
        )
        return operator

    async def _ready(self, operator: Operator) -> bool:
        if operator.process.returncode is not None:
            pytest.fail(f"operator exited early:\n{operator.log.read_text()[-3000:]}")
        return await operator.probe("/readyz") == 200

    # Objects ---------------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        resource = {"RemediationPolicy": "remediationpolicies"}.get(kind, kind)
        name = obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace")
        existing = self.api.store.find(resource, name, namespace)
        if existing is None:
            return self.api.store.create(resource, obj, namespace)
        return self.api.store.patch(resource, name, {"spec": obj["spec"]}, namespace)

    def node(self, name: str) -> dict[str, Any] | None:
        return self.api.store.find("nodes", name)

    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.api.store.list("nodes"))

    def remediations(self, node: str | None = None) -> list[dict[str, Any]]:
        items = self.api.store.list("remediations")
        return [r for r in items if node is None or r["spec"]["nodeName"] == node]

    def remediation(self, node: str) -> dict[str, Any] | None:
        """The newest Remediation of `node` that has a status."""
        mine = [r for r in self.remediations(node) if r.get("status")]
        mine.sort(key=lambda r: r["metadata"]["creationTimestamp"])
        return mine[-1] if mine else None

    def phase(self, node: str) -> str | None:
        remediation = self.remediation(node)
        return remediation["status"].get("phase") if remediation else None

    def events(self, name: str, kind: str | None = None) -> list[dict[str, Any]]:
        items = self.api.store.list("events")
        return [
            e
            for e in items
            if e["involvedObject"].get("name") == name
            and (kind is None or e["involvedObject"].get("kind") == kind)
        ]

    def event_reasons(self, name: str, kind: str | None = None) -> set[str]:
        return {e["reason"] for e in self.events(name, kind)}

    def policy_status(self, name: str = "gpu") -> dict[str, Any]:
        status: dict[str, Any] = self.api.store.get("remediationpolicies", name).get("status") or {}
        return status

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        conditions = self.policy_status(name).get("conditions") or []
        return next((c for c in conditions if c.get("type") == type_), None)

    def writes_by(self, user: str) -> list[Entry]:
        return [e for e in self.api.request_log if e.is_write and e.user == user]

    def dump(self) -> str:
        parts = [f"--- {o.identity}\n{o.log.read_text()[-6000:]}" for o in self.operators]
        for r in self.remediations():
            parts.append(yaml.safe_dump(r.get("status"), sort_keys=False)[:3000])
        writes = [e for e in self.api.request_log if e.is_write and e.resource == "nodes"]
        parts += [f"{e.time} {e.user} {e.verb} {e.name}/{e.subresource} {e.code}" for e in writes]
        return "\n".join(parts)


def is_cordoned_by_us(node: dict[str, Any] | None) -> bool:
    if node is None:
        return False
    spec = node.get("spec") or {}
    ours = [t for t in spec.get("taints") or [] if t.get("key") == QUARANTINE]
    return bool(spec.get("unschedulable")) and bool(ours)


def has_our_taint(node: dict[str, Any] | None) -> bool:
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return any(t.get("key") == QUARANTINE for t in taints)


CONFIG: FleetConfig = FAST.with_(reset_clears=0.0, reboot_clears=0.0, heartbeat_period=0.5)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fleet(shape=Shape, config=FleetConfig): the emulated fleet for this test"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


async def _cluster(
    tmp_path: Path, shape: Shape, config: FleetConfig, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    async with apiserver.serve() as api:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            api.store.create("customresourcedefinitions", yaml.safe_load(crd.read_text()))
        connection = Connection(
            api.url, headers={"Authorization": f"Bearer {api.token(FLEET_USER)}"}
        )
        async with fleet_module.running(connection, shape=shape, config=config) as fleet:
            cluster = Cluster(api, fleet, tmp_path)
            try:
                yield cluster
            finally:
                if request.node.stash.get(_FAILED, False):
                    print(cluster.dump())
                for operator in cluster.operators:
                    await operator.stop()


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """Emulator + fleet (3 nodes unless the test's `fleet_shape` marker says otherwise)."""
    marker = request.node.get_closest_marker("fleet")
    shape = Shape(nodes=3, nodes_per_training_job=3, pdb_every=0)
    config = CONFIG
    if marker is not None:
        shape = marker.kwargs.get("shape", shape)
        config = marker.kwargs.get("config", config)
    async for value in _cluster(tmp_path, shape, config, request):
        yield value
