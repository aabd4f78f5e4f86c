"""The cluster side of the operator benchmark, run in its own process: emulator, nodes, churn.

The API emulator serves real HTTP to the processes under test (the operator, the floor
watcher). Everything the benchmark itself writes (nodes, pods, node status churn, faults) goes
straight into the emulator's store from this process: those writes produce the same watch
events as HTTP writes, cost the processes under test the same, and keep the benchmark's own
load off the HTTP path. Latencies are taken here, on one clock: from the store write of the
faulty condition to the watch event that shows the node cordoned (the server's commit of the
cordon patch, delivered on the same event loop).

The parent drives this process through a pipe with `Cluster.call(command, *args)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import node_detail

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "remediation-system"
WORKLOAD = "workload"
ROLE = "bench.gpuops.io/role"
GPU_CONDITION = "AcceleratedHardwareReady"
IRRELEVANT = "KernelDeadlock"
FAULT_REASONS = "NvidiaXID(48|62|64|79)Error|NvidiaDoubleBitError|DCGMError"
DRAIN_NODE = "drain-0"


def policy(name: str, role: str, ladder: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "remediation.gpuops.io/v1alpha1",
        "kind": "RemediationPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {ROLE: role}},
            "startupGrace": "0s",
            "faults": [
                {
                    "name": "gpu-xid",
                    "match": [{"type": GPU_CONDITION, "status": "False", "reason": FAULT_REASONS}],
                    "tolerate": "0s",
                    "ladder": ladder,
                    "onExhausted": "Hold",
                }
            ],
            "recovery": {"healthyFor": "1h"},
        },
    }


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, role: str, index: int) -> dict[str, Any]:
    """A GPU Node of real size (about 6.6 KB of JSON, as on EKS with the GPU operator):
    feature-discovery labels, images, managedFields, a full set of conditions and nodeInfo
    (`emulator.fleet.node_detail`). Deterministic but for the timestamps."""
    now = _stamp(datetime.now(UTC))
    conditions = [
        {"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now}
        | {"lastTransitionTime": now}
        for t, s, r, m in (
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            (
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            (
                GPU_CONDITION,
                "True",
                "GPUsHealthy",
                "Monitoring for the Nvidia AcceleratedHardware system is active",
            ),
            (IRRELEVANT, "False", "KernelHasNoDeadlock", "kernel has no deadlock"),
        )
    ]
    zone = f"us-east-1{'abc'[index % 3]}"
    ip = f"10.{(index >> 16) & 0xFF | 0x10}.{(index >> 8) & 0xFF}.{index & 0xFF}"
    capacity = {
        "cpu": "192",
        "memory": "2097152000Ki",
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "32",
        "pods": "110",
    }
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                ROLE: role,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "karpenter.sh/nodepool": f"pool-{index % 4}",
                "karpenter.sh/capacity-type": "on-demand",
                "karpenter.sh/registered": "true",
                "karpenter.sh/initialized": "true",
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "us-east-1",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"providerID": f"aws:///{zone}/i-{index:017x}"},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity, cpu="191450m", memory="2061410304Ki"),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": f"ip-{ip.replace('.', '-')}.ec2.internal"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"ec2{index:029x}",
                "bootID": f"boot-{index}",
                "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.6.20241212",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.32.0-eks-aeac579",
                "kubeProxyVersion": "v1.32.0-eks-aeac579",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    return node_detail.enlarge(body, index)


def pod(name: str, node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": WORKLOAD,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "trainer",
                    "uid": "0c4f1c1e-0000-4000-8000-000000000001",
                    "controller": True,
                }
            ],
        },
        # No grace period: the emulator then deletes an evicted pod at once, so the drain time
        # is the operator's eviction work, not an emulated kubelet's shutdown delay.
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "trainer:1"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@dataclass
class Spec:
    nodes: int
    drain_pods: int
    seed: int = 1


class Server:
    """The emulator plus the benchmark's own writers, on one event loop."""

    def __init__(self, api: ApiServer, spec: Spec) -> None:
        self.api = api
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.fleet = [f"gpu-{i:05d}" for i in range(spec.nodes)]
        self.unused = list(self.fleet)
        self.rng.shuffle(self.unused)
        self.churn_rate = 0.0
        self.churned = 0
        self.pending: dict[str, float] = {}
        self.cordoned: dict[str, float] = {}
        self.emptied: float | None = None
        self.settled = asyncio.Event()
        """Set when no fault waits for its cordon any more."""
        self.drained = asyncio.Event()

    def seed(self) -> None:
        store = self.api.store.raw
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            store.create("customresourcedefinitions", yaml.safe_load(crd.read_text()))
        for namespace in (NAMESPACE, WORKLOAD):
            store.create("namespaces", {"metadata": {"name": namespace}})
        for index, name in enumerate(self.fleet):
            store.create("nodes", node(name, "fleet", index))
        store.create("nodes", node(DRAIN_NODE, "drain", self.spec.nodes))
        for i in range(self.spec.drain_pods):
            store.create("pods", pod(f"trainer-{i:03d}", DRAIN_NODE), WORKLOAD)
        store.create("remediationpolicies", policy("fleet", "fleet", [{"action": "Cordon"}]))
        drain_ladder = [
            {"action": "Cordon", "escalateAfter": "0s"},
            {"action": "Drain", "timeout": "120s"},
        ]
        store.create("remediationpolicies", policy("drain", "drain", drain_ladder))

    async def observe(self) -> None:
        """Time every cordon of a node with a pending fault, and the drain node emptying."""
        store = self.api.store.raw
        nodes = store.watch("nodes", resource_version=str(store.rv))
        pods = store.watch("pods", WORKLOAD, resource_version=str(store.rv))

        async def node_events() -> None:
            while (item := await nodes.queue.get()) is not None:
                _, obj, _ = item
                name = obj["metadata"]["name"]
                if name in self.pending and (obj.get("spec") or {}).get("unschedulable"):
                    self.cordoned[name] = time.perf_counter() - self.pending.pop(name)
                    if not self.pending:
                        self.settled.set()

        async def pod_events() -> None:
            while await pods.queue.get() is not None:
                if self.emptied is None and not store.list("pods", WORKLOAD).items:
                    self.emptied = time.perf_counter()
                    self.drained.set()

        await asyncio.gather(node_events(), pod_events())

    async def churn(self) -> None:
        """Irrelevant node status updates at `churn_rate` per second: heartbeats on Ready and
        flips of a condition no policy watches, as node-problem-detector publishes them."""
        store = self.api.store.raw
        started, done = time.perf_counter(), 0
        while True:
            if self.churn_rate <= 0:
                started, done = time.perf_counter(), 0
                await asyncio.sleep(0.05)
                continue
            due = int((time.perf_counter() - started) * self.churn_rate)
            while done < due:
                done += 1
                name = self.fleet[self.rng.randrange(len(self.fleet))]
                now = _stamp(datetime.now(UTC))
                if done % 2:
                    change = {"type": "Ready", "status": "True", "lastHeartbeatTime": now}
                else:
                    status = "True" if self.rng.random() < 0.5 else "False"
                    change = {"type": IRRELEVANT, "status": status, "lastTransitionTime": now}
                patch = {"status": {"conditions": [change]}}
                store.patch("nodes", name, patch, patch_type="strategic", subresource="status")
                self.churned += 1
            await asyncio.sleep(0.01)

    def fault(self, name: str) -> None:
        now = _stamp(datetime.now(UTC))
        change = {
            "type": GPU_CONDITION,
            "status": "False",
            "reason": "NvidiaXID79Error",
            "message": "GPU has fallen off the bus",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.pending[name] = time.perf_counter()
        self.settled.clear()
        self.api.store.raw.patch(
            "nodes",
            name,
            {"status": {"conditions": [change]}},
            patch_type="strategic",
            subresource="status",
        )

    async def faults(self, count: int, rate: float, within: float) -> dict[str, Any]:
        """Fault `count` fresh nodes at `rate` per second; latencies of those cordoned."""
        chosen = [self.unused.pop() for _ in range(min(count, len(self.unused)))]
        self.cordoned.clear()
        self.settled.clear()
        for name in chosen:
            self.fault(name)
            await asyncio.sleep(self.rng.expovariate(rate))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled.wait(), within)
        missed = [n for n in chosen if n in self.pending]
        for name in missed:
            del self.pending[name]
        return {
            "latencies": [self.cordoned[n] for n in chosen if n in self.cordoned],
            "missed": missed,
        }

    def heal(self) -> int:
        """Make every node faulted so far healthy and schedulable again (between phases)."""
        store = self.api.store.raw
        healed = [n for n in self.fleet if n not in self.unused]
        now = _stamp(datetime.now(UTC))
        change = {
            "type": GPU_CONDITION,
            "status": "True",
            "reason": "GPUsHealthy",
            "message": "",
            "lastTransitionTime": now,
        }
        for name in healed:
            store.patch(
                "nodes",
                name,
                {"status": {"conditions": [change]}},
                patch_type="strategic",
                subresource="status",
            )
            store.patch("nodes", name, {"spec": {"unschedulable": None}})
        return len(healed)

    def writes(self, user: str, since: float) -> dict[str, int]:
        """The API writes `user` made since the wall-clock instant `since`, by resource (and
        subresource), Lease renewals left out (they do not depend on incidents)."""
        counts: dict[str, int] = {}
        for entry in self.api.request_log:
            if entry.user != user or not entry.is_write or entry.time.timestamp() < since:
                continue
            if entry.resource == "leases":
                continue
            key = entry.resource + (f"/{entry.subresource}" if entry.subresource else "")
            counts[key] = counts.get(key, 0) + 1
        return counts

    async def drain(self, within: float) -> dict[str, Any]:
        """Fault the drain node; time until it is cordoned and until its last pod is gone."""
        self.emptied = None
        self.drained.clear()
        started = time.perf_counter()
        self.fault(DRAIN_NODE)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drained.wait(), within)
        evictions = [
            e
            for e in self.api.request_log.matching(verb="create", subresource="eviction")
            if e.namespace == WORKLOAD
        ]
        cordoned = self.cordoned.get(DRAIN_NODE)
        result: dict[str, Any] = {
            "pods": self.spec.drain_pods,
            "emptied": self.emptied is not None,
            "fault_to_empty_s": None if self.emptied is None else self.emptied - started,
            "fault_to_cordon_s": cordoned,
            "evictions": len(evictions),
        }
        if evictions and self.emptied is not None:
            first = evictions[0].time.timestamp() - evictions[0].seconds
            wall_now = datetime.now(UTC).timestamp()
            # The first eviction's start, on the perf_counter clock of `emptied`.
            first_perf = time.perf_counter() - (wall_now - first)
            result["first_eviction_to_empty_s"] = self.emptied - first_perf
        return result


def serve(spec: Spec, pipe: Connection) -> None:
    """The process body: seed the store, then answer the parent's commands until "stop"."""

    async def main() -> None:
        async with apiserver.serve(port=0, log_size=50_000, history_size=50_000) as api:
            server = Server(api, spec)
            seeded = time.perf_counter()
            server.seed()
            background = [
                asyncio.create_task(server.observe()),
                asyncio.create_task(server.churn()),
            ]
            pipe.send({"url": api.url, "seed_seconds": time.perf_counter() - seeded})
            loop = asyncio.get_running_loop()
            commands: dict[str, Callable[..., Any]] = {
                "churn": lambda rate: setattr(server, "churn_rate", float(rate)),
                "churned": lambda: server.churned,
                "faults": server.faults,
                "drain": server.drain,
                "heal": server.heal,
                "write_mark": time.time,
                "writes_since": lambda since: server.writes("operator", since),
            }
            while True:
                command, args = await loop.run_in_executor(None, pipe.recv)
                if command == "stop":
                    break
                if command == "kubeconfig":
                    pipe.send(str(api.write_kubeconfig(args[0], user=args[1])))
                    continue
                result = commands[command](*args)
                if asyncio.iscoroutine(result):
                    result = await result
                pipe.send(result)
            for task in background:
                task.cancel()

    asyncio.run(main())


class Cluster:
    """The parent's handle on the cluster process."""

    def __init__(self, spec: Spec) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self.process = context.Process(target=serve, args=(spec, child), daemon=True)
        self.process.start()
        if not self._pipe.poll(600):
            raise RuntimeError("the benchmark cluster did not start within 600 s")
        started: dict[str, Any] = self._pipe.recv()
        self.url: str = started["url"]
        self.seed_seconds: float = started["seed_seconds"]

    def call(self, command: str, *args: Any) -> Any:
        self._pipe.send((command, args))
        return self._pipe.recv()

    def stop(self) -> None:
        if self.process.is_alive():
            self._pipe.send(("stop", ()))
            self.process.join(timeout=15)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
