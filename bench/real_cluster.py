"""The cluster side of the benchmark on a real kube-apiserver: nodes, churn and faults over HTTP.

`BENCH_REAL=1 make bench` (or `--real-server`) runs the reaction-latency and CPU parts on a
real server as well as on the emulator. The server is the one `E2E_KUBECONFIG` names, or a
control plane started for the size from `E2E_ASSETS` / `KUBEBUILDER_ASSETS` by the e2e suite's
launcher (`tests/e2e/control_plane.py`), here without kube-controller-manager: no kubelet
renews these Nodes, and its node lifecycle controller would mark all of them NotReady.

Unlike the emulator run, every write of the benchmark goes through the API, as kwok's and a
real fleet's do: the Nodes (real size, `bench_cluster.node`) are created with 32 requests in
flight, churn and faults are strategic-merge patches of `nodes/status`. Latency is taken in
this process, from just before the fault's PATCH is sent to the watch event showing the node
`unschedulable`, on one clock, for the floor and the operator alike, so their ratio compares
like with like. API writes per incident come from the server's own
`apiserver_request_total` (read from /metrics before and after the faults).

The parent drives this process as it drives `bench_cluster.Cluster`: `RealCluster.call`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from bench import bench_cluster
from bench.bench_cluster import GPU_CONDITION, IRRELEVANT, NAMESPACE, WORKLOAD, Spec
from remediation_emulator.fleet import builder, kubeconfig, resources
from remediation_emulator.fleet.client import ApiError, KubeClient, PatchType

ROOT = Path(__file__).resolve().parents[1]
POLICIES = resources.Resource(
    "remediation.gpuops.io", "v1alpha1", "remediationpolicies", "RemediationPolicy", False
)
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
HARNESS_RESOURCES = ("nodes/status", "leases")
"""Writes left out of the operator's count: the harness's churn and faults, Lease renewals."""


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_writes(metrics: str) -> dict[str, int]:
    """Write requests by resource[/subresource] from kube-apiserver's /metrics text."""
    counts: dict[str, int] = {}
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition("} ")
        labels = dict(
            part.split("=", 1) for part in labels_text.split("{", 1)[1].split(",") if "=" in part
        )
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") not in WRITE_VERBS:
            continue
        key = labels.get("resource", "")
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        counts[key] = counts.get(key, 0) + int(float(value))
    return counts


@dataclass
class RealServer:
    client: KubeClient
    spec: Spec
    server_url: str

    def __post_init__(self) -> None:
        self.rng = random.Random(self.spec.seed)
        self.fleet = [f"gpu-{i:05d}" for i in range(self.spec.nodes)]
        self.unused = list(self.fleet)
        self.rng.shuffle(self.unused)
        self.churn_rate = 0.0
        self.churned = 0
        self.pending: dict[str, float] = {}
        self.cordoned: dict[str, float] = {}
        self.settled = asyncio.Event()
        self.version = ""

    async def seed(self) -> None:
        client = self.client
        for namespace in (NAMESPACE, WORKLOAD):
            await builder.create_or_get(
                client, resources.NAMESPACES, {"metadata": {"name": namespace}}
            )
        crds = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]
        await builder.install_crds(client, crds, wait_seconds=60)

        async def one(index: int, name: str) -> None:
            body = bench_cluster.node(name, "fleet", index)
            created = await builder.create_or_get(client, resources.NODES, body)
            if not (created.get("status") or {}).get("conditions"):
                await client.patch(
                    resources.NODES, name, {"status": body["status"]}, subresource="status"
                )

        await asyncio.gather(*(one(i, n) for i, n in enumerate(self.fleet)))
        policy = bench_cluster.policy("fleet", "fleet", [{"action": "Cordon"}])
        await builder.create_or_get(client, POLICIES, policy)
        listed = await client.list(resources.NODES, limit=1)
        self.version = str(listed["metadata"]["resourceVersion"])

    async def observe(self) -> None:
        """Time every cordon of a node with a pending fault (watch, resumed when it ends)."""
        while True:
            try:
                async for event in self.client.watch(
                    resources.NODES, resource_version=self.version, timeout_seconds=300
                ):
                    obj = event.get("object") or {}
                    metadata = obj.get("metadata") or {}
                    self.version = str(metadata.get("resourceVersion") or self.version)
                    name = metadata.get("name")
                    if name in self.pending and (obj.get("spec") or {}).get("unschedulable"):
                        self.cordoned[name] = time.perf_counter() - self.pending.pop(name)
                        if not self.pending:
                            self.settled.set()
            except ApiError as error:
                if error.status == 410:
                    listed = await self.client.list(resources.NODES, limit=1)
                    self.version = str(listed["metadata"]["resourceVersion"])
                else:
                    await asyncio.sleep(0.5)

    async def _status(self, name: str, change: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            await self.client.patch(
                resources.NODES,
                name,
                {"status": {"conditions": [change]}},
                subresource="status",
                patch_type=PatchType.STRATEGIC,
            )

    async def churn(self) -> None:
        """The emulator run's churn, as HTTP patches (at most 16 in flight)."""
        gate = asyncio.Semaphore(16)
        started, done = time.perf_counter(), 0
        tasks: set[asyncio.Task[None]] = set()

        async def send(name: str, change: dict[str, Any]) -> None:
            async with gate:
                await self._status(name, change)
                self.churned += 1

        while True:
            if self.churn_rate <= 0:
                started, done = time.perf_counter(), 0
                await asyncio.sleep(0.05)
                continue
            due = int((time.perf_counter() - started) * self.churn_rate)
            while done < due:
                done += 1
                name = self.fleet[self.rng.randrange(len(self.fleet))]
                if done % 2:
                    change = {"type": "Ready", "status": "True", "lastHeartbeatTime": _stamp()}
                else:
                    status = "True" if self.rng.random() < 0.5 else "False"
                    change = {"type": IRRELEVANT, "status": status, "lastTransitionTime": _stamp()}
                task = asyncio.create_task(send(name, change))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(0.01)

    async def fault(self, name: str) -> None:
        change = {
            "type": GPU_CONDITION,
            "status": "False",
            "reason": "NvidiaXID79Error",
            "message": "GPU has fallen off the bus",
            "lastHeartbeatTime": _stamp(),
            "lastTransitionTime": _stamp(),
        }
        self.pending[name] = time.perf_counter()
        self.settled.clear()
        await self._status(name, change)

    async def faults(self, count: int, rate: float, within: float) -> dict[str, Any]:
        chosen = [self.unused.pop() for _ in range(min(count, len(self.unused)))]
        self.cordoned.clear()
        self.settled.clear()
        sent: list[asyncio.Task[None]] = []
        for name in chosen:
            sent.append(asyncio.create_task(self.fault(name)))
            await asyncio.sleep(self.rng.expovariate(rate))
        await asyncio.gather(*sent)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled.wait(), within)
        missed = [n for n in chosen if n in self.pending]
        for name in missed:
            del self.pending[name]
        return {
            "latencies": [self.cordoned[n] for n in chosen if n in self.cordoned],
            "missed": missed,
        }

    async def heal(self) -> int:
        healed = [n for n in self.fleet if n not in self.unused]
        change = {
            "type": GPU_CONDITION,
            "status": "True",
            "reason": "GPUsHealthy",
            "message": "",
            "lastTransitionTime": _stamp(),
        }
        for name in healed:
            await self._status(name, change)
            with contextlib.suppress(ApiError):
                await self.client.patch(resources.NODES, name, {"spec": {"unschedulable": None}})
        return len(healed)

    async def write_counts(self) -> dict[str, int]:
        response = await self.client.session.get(self.server_url.rstrip("/") + "/metrics")
        async with response:
            text = await response.text()
        return {k: v for k, v in parse_writes(text).items() if k not in HARNESS_RESOURCES}

    async def cleanup(self) -> None:
        """Delete what the benchmark created (for an existing cluster, E2E_KUBECONFIG)."""
        gate = asyncio.Semaphore(32)

        async def delete(name: str) -> None:
            async with gate:
                with contextlib.suppress(ApiError):
                    await self.client.delete(resources.NODES, name)

        await asyncio.gather(*(delete(n) for n in self.fleet))
        with contextlib.suppress(ApiError):
            await self.client.delete(POLICIES, "fleet")


def serve(spec: Spec, admin_kubeconfig: str, cleanup: bool, pipe: Connection) -> None:
    async def main() -> None:
        connection = kubeconfig.load(admin_kubeconfig)
        async with KubeClient(connection, concurrency=48) as client:
            server = RealServer(client, spec, connection.server)
            seeded = time.perf_counter()
            await server.seed()
            background = [
                asyncio.create_task(server.observe()),
                asyncio.create_task(server.churn()),
            ]
            pipe.send({"url": "", "seed_seconds": time.perf_counter() - seeded})
            loop = asyncio.get_running_loop()
            commands: dict[str, Callable[..., Any]] = {
                "churn": lambda rate: setattr(server, "churn_rate", float(rate)),
                "churned": lambda: server.churned,
                "faults": server.faults,
                "heal": server.heal,
                "kubeconfig": lambda *_: admin_kubeconfig,
                "write_mark": server.write_counts,
            }
            while True:
                command, args = await loop.run_in_executor(None, pipe.recv)
                if command == "stop":
                    break
                if command == "writes_since":
                    now, before = await server.write_counts(), args[0]
                    pipe.send(
                        {k: v - before.get(k, 0) for k, v in now.items() if v > before.get(k, 0)}
                    )
                    continue
                result = commands[command](*args)
                if asyncio.iscoroutine(result):
                    result = await result
                pipe.send(result)
            server.churn_rate = 0
            for task in background:
                task.cancel()
            if cleanup:
                await server.cleanup()

    asyncio.run(main())


class RealCluster(bench_cluster.Cluster):
    """The parent's handle on the real-server harness process (same commands as the
    emulator's, but `drain`: there is no kubelet to run the pods a drain would evict)."""

    def __init__(self, spec: Spec, admin_kubeconfig: Path, *, cleanup: bool) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self.process = context.Process(
            target=serve, args=(spec, str(admin_kubeconfig), cleanup, child), daemon=True
        )
        self.process.start()
        if not self._pipe.poll(900):
            raise RuntimeError("the real-server benchmark harness did not seed within 900 s")
        started: dict[str, Any] = self._pipe.recv()
        self.url = started["url"]
        self.seed_seconds = started["seed_seconds"]

    def stop(self) -> None:
        if self.process.is_alive():
            self._pipe.send(("stop", ()))
            self.process.join(timeout=300)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


@contextlib.contextmanager
def real_server(workdir: Path) -> Any:
    """The admin kubeconfig of the real server to benchmark against, or None when none is
    given: E2E_KUBECONFIG (an existing cluster; what the benchmark creates is deleted after),
    else a control plane started from E2E_ASSETS / KUBEBUILDER_ASSETS for the block."""
    from tests.e2e import control_plane  # the e2e suite's launcher, reused

    existing = os.environ.get("E2E_KUBECONFIG")
    if existing:
        yield Path(existing).expanduser().resolve(), True
        return
    assets = control_plane.assets_dir()
    if assets is None:
        yield None, False
        return
    plane = control_plane.ControlPlane(assets, workdir, controller_manager=False)
    try:
        cluster = plane.start()
        yield cluster.kubeconfig, False
    finally:
        plane.stop()
