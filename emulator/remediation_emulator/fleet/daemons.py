"""The DaemonSets of the node daemons that hold GPU state: the device plugin and the agent.

The operator restarts them on a node after a repair (docs/decisions.md D71) by deleting their
pods, as a person would with `kubectl delete pod`. On a real cluster the DaemonSet controller
(kube-controller-manager) puts a new pod on the node once the old one is gone, and the new
process starts from scratch: the NVIDIA device plugin with every GPU healthy again
(NVIDIA/k8s-device-plugin `internal/rm/health.go`: the unhealthy mark lives as long as the
process), the EKS node monitoring agent writing `AcceleratedHardwareReady=True` on start and
detecting again a fault that is still there (aws/eks-node-monitoring-agent
`pkg/manager/node_exporter.go`), node-problem-detector replaying only its `lookback` of the
kernel log (kubernetes/node-problem-detector `logwatchers/kmsg/log_watcher_linux.go`).

The emulator runs no DaemonSet controller, so this plays it for those DaemonSets only: one
pod per node the fleet owns; when a pod is gone (deleted and removed by the kubelet after its
grace period) a new one is created on the node. On a real control plane (`job_controller`:
kube-controller-manager runs) its DaemonSet controller does that instead. Either way, a pod
of the daemon appearing on a node that ran one before is a new process, and the node's agent
model is told so (`NodeAgent.restart_device_plugin`, `restart_agent`). The kubelet then runs
it (Running and Ready). The device plugin's pod is not put back on a node labelled
`nvidia.com/gpu.deploy.device-plugin=false`: the GPU Operator's stop label is the node
program's to play (`node_program.place_device_plugin`).

Which pods: the device plugin as the GPU Operator names it (`app=nvidia-device-plugin-
daemonset` in the fleet's device-plugin namespace, gpu-operator/assets/state-device-plugin/
0500_daemonset.yaml); with `agent: eks`, the EKS add-on's agent in kube-system
(`app.kubernetes.io/name=eks-node-monitoring-agent`, its chart's selector label); with
`agent: npd`, node-problem-detector as this project's chart runs it
(`app.kubernetes.io/name=remediation-operator-node-problem-detector` in
`remediation-system-node-problem-detector`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remediation_emulator.fleet import manifests, resources
from remediation_emulator.fleet.agent import NodeAgent
from remediation_emulator.fleet.builder import create_or_get, serves
from remediation_emulator.fleet.client import ApiError, KubeClient, Obj
from remediation_emulator.fleet.config import FleetConfig
from remediation_emulator.fleet.controller import Controller
from remediation_emulator.fleet.informer import Informer
from remediation_emulator.fleet.node_program import DEVICE_PLUGIN_LABEL
from remediation_emulator.fleet.placement import ByNode

log = logging.getLogger(__name__)

_TRANSIENT = frozenset({409, 429, 500, 502, 503, 504})
"""Statuses a retry may get past: a conflict (not AlreadyExists, which `create_or_get` takes),
throttling, a server error."""


@dataclass(frozen=True)
class Daemon:
    """One DaemonSet whose pods the fleet keeps on its nodes."""

    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    image: str
    restarted: Callable[[NodeAgent, str], None]
    """What a new process of it on the node means for the node's agent model."""

    def selects(self, pod: Obj) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return meta.get("namespace") == self.namespace and all(
            labels.get(k) == v for k, v in self.labels.items()
        )


EKS_AGENT = Daemon(
    "eks-agent",
    "kube-system",
    "eks-node-monitoring-agent",
    {"app.kubernetes.io/name": "eks-node-monitoring-agent"},
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/eks-node-monitoring-agent:v1.4.0",
    NodeAgent.restart_agent,
)
NPD = Daemon(
    "npd",
    "remediation-system-node-problem-detector",
    "remediation-operator-node-problem-detector",
    {"app.kubernetes.io/name": "remediation-operator-node-problem-detector"},
    "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19",
    NodeAgent.restart_agent,
)


DEVICE_PLUGIN = "device-plugin"


def device_plugin(shape: manifests.Shape) -> Daemon:
    return Daemon(
        DEVICE_PLUGIN,
        shape.device_plugin_namespace,
        manifests.DEVICE_PLUGIN,
        {"app": manifests.DEVICE_PLUGIN},
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        NodeAgent.restart_device_plugin,
    )


def daemons_of(config: FleetConfig, shape: manifests.Shape) -> tuple[Daemon, ...]:
    """The device plugin always; the agent's own pod for the real-agent profiles."""
    agent = {"eks": (EKS_AGENT,), "npd": (NPD,)}.get(config.agent, ())
    return (device_plugin(shape), *agent)


def daemonset(daemon: Daemon) -> Obj:
    labels = dict(daemon.labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": daemon.name, "namespace": daemon.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": daemon.name, "image": daemon.image}],
                },
            },
        },
    }


def pod(daemon: Daemon, owner: Obj, node: str) -> Obj:
    """The DaemonSet's pod on one node: controller-owned (a drain leaves it), tolerates
    everything, node-critical, 30 s to terminate."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": daemon.name, "image": daemon.image}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{daemon.name}-",
            "namespace": daemon.namespace,
            "labels": {**daemon.labels, "pod-template-generation": "1"},
            "ownerReferences": [manifests.owner(owner)],
        },
        "spec": spec,
    }


class NodeDaemons:
    """One pod of each daemon per owned node; a pod gone is replaced and its process restarted
    in the agent model. Work-queue keys are `<kind>:<node>`."""

    def __init__(
        self,
        client: KubeClient,
        nodes: Informer,
        pods: Informer,
        agent: NodeAgent,
        config: FleetConfig,
        shape: manifests.Shape,
    ) -> None:
        self.controller = Controller("daemons", self._reconcile, workers=config.workers)
        self._client = client
        self._nodes = nodes
        self._pods = pods
        self._agent = agent
        self._config = config
        self._daemons = {d.kind: d for d in daemons_of(config, shape)}
        self._owners: dict[str, Obj] = {}
        self._by_node: dict[str, ByNode] = {kind: ByNode() for kind in self._daemons}
        self._placed: set[tuple[str, str]] = set()
        """(node, kind) that had a pod of the daemon: a pod appearing there again is a new
        process of it."""
        self.restarts: dict[tuple[str, str], int] = {}
        """By (node, daemon kind): how many of its pods there were replaced."""
        pods.subscribe(self._on_pod)
        nodes.subscribe(self._on_node)

    def _on_pod(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for kind, daemon in self._daemons.items():
            body = new or old
            if body is None or not daemon.selects(body):
                continue
            if new is not None and _unbound_for(new) is not None:
                self.controller.enqueue(BIND_PREFIX + key)
            node = ((new or {}).get("spec") or {}).get("nodeName")
            self._by_node[kind].place(key, node)
            was = ((old or {}).get("spec") or {}).get("nodeName")
            if node and not was:  # created on the node, or bound to it (a new process)
                if (node, kind) in self._placed:
                    # A new pod where one ran before: a new process (whoever created it: this
                    # controller, or a real DaemonSet controller on a real control plane).
                    self.restarts[(node, kind)] = self.restarts.get((node, kind), 0) + 1
                    log.info("daemons: %s restarted on %s", daemon.name, node)
                    daemon.restarted(self._agent, node)
                self._placed.add((node, kind))
            if new is None and old is not None:
                gone_from = (old.get("spec") or {}).get("nodeName")
                if gone_from:
                    self.controller.enqueue(f"{kind}:{gone_from}")

    def _on_node(self, key: str, old: Obj | None, new: Obj | None) -> None:
        if old is None and new is not None:
            for kind in self._placing:
                self.controller.enqueue(f"{kind}:{key}")

    @property
    def _placing(self) -> list[str]:
        """The daemons placed here on a new node: the agents. The device plugin's first pod
        is the builder's (and Karpenter's launch), so only its replacements are made here."""
        return [kind for kind in self._daemons if kind != DEVICE_PLUGIN]

    async def run(self) -> None:
        await self._install()
        await self._nodes.synced.wait()
        await self._pods.synced.wait()
        for node in list(self._nodes.cache):
            for kind in self._placing:
                self.controller.enqueue(f"{kind}:{node}")
        await self.controller.run()

    async def _install(self) -> None:
        """Create the namespaces and DaemonSets, retrying what a busy or faulty API server
        refuses for a while (a conflict, throttling, a 5xx: the fault injector plays them),
        as a controller's requeue would; anything else is a bug and raised."""
        delay = 0.05
        while True:
            try:
                if not await serves(self._client, resources.DAEMONSETS):
                    return
                for kind, daemon in self._daemons.items():
                    namespace = manifests.namespace(daemon.namespace)
                    await create_or_get(self._client, resources.NAMESPACES, namespace)
                    self._owners[kind] = await create_or_get(
                        self._client, resources.DAEMONSETS, daemonset(daemon), daemon.namespace
                    )
                return
            except ApiError as error:
                if error.status not in _TRANSIENT:
                    raise
                log.info("installing the node daemons: %s; retrying in %.2fs", error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _reconcile(self, key: str) -> float | None:
        if key.startswith(BIND_PREFIX):
            await self._bind(key[len(BIND_PREFIX) :])
            return None
        if self._config.job_controller:
            return None  # a real kube-controller-manager runs the DaemonSet controller
        kind, _, name = key.partition(":")
        daemon, owner = self._daemons[kind], self._owners.get(kind)
        node = self._nodes.get(name)
        if owner is None or node is None or not self._config.owns(node):
            return None
        labels = node["metadata"].get("labels") or {}
        if kind == DEVICE_PLUGIN and labels.get(DEVICE_PLUGIN_LABEL) == "false":
            return None  # the GPU Operator keeps it off this node (the node program's part)
        if self._by_node[kind].on(name):
            return None
        try:
            body = pod(daemon, owner, name)
            await self._client.create(resources.PODS, body, namespace=daemon.namespace)
        except ApiError as error:
            if error.status != 404:  # the node's namespace went away: nothing to run there
                raise
        return None  # the new process starts when the watch shows its pod (`_on_pod`)

    async def _bind(self, key: str) -> None:
        """Play the scheduler for a DaemonSet pod of ours that the real DaemonSet controller
        created (it pins the pod to its node by node affinity and leaves the binding to
        kube-scheduler, which the e2e control plane does not run)."""
        found = self._pods.get(key)
        node = _unbound_for(found) if found is not None else None
        if found is None or node is None:
            return
        owned = self._nodes.get(node)
        if owned is None or not self._config.owns(owned):
            return
        meta = found["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self._client.create(
                resources.PODS,
                binding,
                namespace=meta["namespace"],
                name=meta["name"],
                subresource="binding",
            )
        except ApiError as error:
            if error.status not in (404, 409):  # gone, or bound meanwhile
                raise


BIND_PREFIX = "bind:"
"""Work-queue keys of pods to bind are `bind:<namespace>/<name>`."""


def _unbound_for(pod: Obj) -> str | None:
    """The node an unbound pod is pinned to by `metadata.name` node affinity, as the
    DaemonSet controller writes it (None: bound already, or not so pinned)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and len(values) == 1:
                return str(values[0])
    return None
