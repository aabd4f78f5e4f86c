"""The emulated Karpenter: terminating NodeClaims and Nodes, and launching replacements.

Deleting a NodeClaim (what the operator's Replace step does) makes Karpenter delete the Node;
the Node's `karpenter.sh/termination` finalizer holds it while Karpenter taints it
`karpenter.sh/disrupted:NoSchedule`, evicts its pods through the Eviction API (DaemonSet and
mirror pods are left; a PodDisruptionBudget's 429 is retried), "terminates the instance" and
removes the finalizer; then the NodeClaim's finalizer goes. Deleting the Node directly takes
the same path and deletes the NodeClaim. After `replacement_delay` a replacement NodeClaim and
Node come up (next free name, same pool and zone, new providerID), like Karpenter provisioning
for the pods the old node ran. Karpenter's consolidation, drift and NodeRepair are not
emulated: the operator's ladder must be the only thing acting on faulty nodes.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remediation_emulator.fleet import builder, manifests, resources
from remediation_emulator.fleet.client import ApiError, KubeClient, Obj
from remediation_emulator.fleet.config import FleetConfig
from remediation_emulator.fleet.controller import Controller
from remediation_emulator.fleet.informer import Informer
from remediation_emulator.fleet.manifests import NODECLAIM_FINALIZER, Shape

log = logging.getLogger(__name__)

DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class Launch:
    """A replacement to bring up: where the removed NodeClaim was."""

    zone: str
    replaces: str


def deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def has_finalizer(obj: Obj) -> bool:
    return NODECLAIM_FINALIZER in (obj["metadata"].get("finalizers") or [])


def evictable(pod: Obj) -> bool:
    """Karpenter drains everything but DaemonSet pods, mirror pods and finished pods."""
    meta = pod["metadata"]
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def without_finalizer(obj: Obj) -> dict[str, Any]:
    """A merge patch removing our finalizer, guarded by the resourceVersion it was read at."""
    meta = obj["metadata"]
    remaining = [f for f in meta.get("finalizers") or [] if f != NODECLAIM_FINALIZER]
    return {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": remaining}}


class Karpenter:
    def __init__(
        self,
        client: KubeClient,
        nodes: Informer,
        claims: Informer,
        pods: Informer,
        pods_on: Callable[[str], set[str]],
        shape: Shape,
        config: FleetConfig,
        rng: random.Random,
        now: Callable[[], datetime],
    ) -> None:
        self.controller = Controller("karpenter", self._reconcile, workers=config.workers)
        self.launched: list[str] = []
        """Names of replacement nodes brought up, in order."""
        self._client = client
        self._nodes = nodes
        self._claims = claims
        self._pods = pods
        self._pods_on = pods_on
        self._shape = shape
        self._config = config
        self._rng = rng
        self._now = now
        self._launches: dict[str, Launch] = {}
        self._next_index: int | None = None
        self._daemonset: Obj | None = None
        self._draining: set[str] = set()
        self._terminated: set[str] = set()
        """Uids of NodeClaims whose finalizer we removed (their replacement is scheduled)."""
        nodes.subscribe(self._on_node)
        claims.subscribe(lambda key, old, new: self.controller.enqueue(f"claim/{key}"))
        pods.subscribe(self._on_pod)

    async def run(self) -> None:
        await self.controller.run()

    def _on_node(self, key: str, old: Obj | None, new: Obj | None) -> None:
        self.controller.enqueue(f"node/{key}")
        claim = self._claim_name(new or old or {})
        if claim:
            self.controller.enqueue(f"claim/{claim}")

    def _on_pod(self, key: str, old: Obj | None, new: Obj | None) -> None:
        node = (new or old or {}).get("spec", {}).get("nodeName")
        if node in self._draining and new is None:
            self.controller.enqueue(f"node/{node}")

    def _claim_name(self, node: Obj) -> str | None:
        meta = node.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "NodeClaim":
                return str(ref.get("name"))
        provider = node.get("spec", {}).get("providerID")
        if provider:
            for claim in self._claims.cache.values():
                if claim.get("status", {}).get("providerID") == provider:
                    return str(claim["metadata"]["name"])
        return None

    async def _reconcile(self, key: str) -> float | None:
        kind, _, name = key.partition("/")
        if kind == "node":
            return await self._terminate_node(name)
        if kind == "claim":
            return await self._terminate_claim(name)
        return await self._launch(name)

    # -- node termination ------------------------------------------------------------------

    async def _drain(self, node: Obj) -> float | None:
        """Taint and evict; None once no evictable pod is left, else when to look again."""
        name = node["metadata"]["name"]
        self._draining.add(name)
        taints = node.get("spec", {}).get("taints") or []
        if not any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": [*taints, DISRUPTED_TAINT]},
            }
            await self._client.patch(resources.NODES, name, patch)
        left = 0
        for pod_key in sorted(self._pods_on(name)):
            pod = self._pods.get(pod_key)
            if pod is None or not evictable(pod):
                continue
            left += 1
            if deleting(pod):
                continue
            meta = pod["metadata"]
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            }
            try:
                await self._client.create(
                    resources.PODS,
                    eviction,
                    namespace=meta["namespace"],
                    name=meta["name"],
                    subresource="eviction",
                )
            except ApiError as exc:
                if exc.status == 429:
                    log.info("karpenter: eviction of %s refused: %s", pod_key, exc.message)
                elif exc.status != 404:
                    raise
        if left:
            return self._config.eviction_retry
        self._draining.discard(name)
        return None

    async def _terminate_node(self, name: str) -> float | None:
        node = self._nodes.get(name)
        if (
            node is None
            or not self._config.owns(node)
            or not deleting(node)
            or not has_finalizer(node)
        ):
            if node is None:
                self._draining.discard(name)
            return None
        wait = await self._drain(node)
        if wait is not None:
            return wait
        node = self._nodes.get(name) or node
        claim_name = self._claim_name(node)
        if not await self._unfinalize(resources.NODES, node):
            return self._config.eviction_retry
        claim = self._claims.get(claim_name) if claim_name else None
        if claim is not None and not deleting(claim):
            await self._delete(resources.NODECLAIMS, claim)
        return None

    async def _unfinalize(self, resource: resources.Resource, obj: Obj) -> bool:
        """Remove our finalizer; False when the object changed meanwhile (look again)."""
        try:
            await self._client.patch(resource, obj["metadata"]["name"], without_finalizer(obj))
        except ApiError as exc:
            if exc.status == 409:
                return False
            if exc.status != 404:
                raise
        return True

    async def _delete(self, resource: resources.Resource, obj: Obj) -> None:
        try:
            await self._client.delete(resource, obj["metadata"]["name"], uid=obj["metadata"]["uid"])
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    # -- NodeClaim termination -------------------------------------------------------------

    async def _terminate_claim(self, name: str) -> float | None:
        claim = self._claims.get(name)
        if claim is None or not self._config.owns(claim):
            return None
        if not deleting(claim) or not has_finalizer(claim):
            return None
        node_name = claim.get("status", {}).get("nodeName")
        node = self._nodes.get(node_name) if node_name else None
        if node is not None:
            if has_finalizer(node):
                if not deleting(node):
                    await self._delete(resources.NODES, node)
                return None  # the node's termination finishes first, then wakes us
            wait = await self._drain(node)
            if wait is not None:
                return wait
            await self._delete(resources.NODES, node)
            return None
        uid = str(claim["metadata"]["uid"])
        if uid in self._terminated:
            return None  # a stale cache entry: this claim was already let go
        if not await self._unfinalize(resources.NODECLAIMS, claim):
            return self._config.eviction_retry
        self._terminated.add(uid)
        zone = claim["metadata"].get("labels", {}).get(manifests.ZONE_LABEL, self._shape.zone(0))
        self._launches[name] = Launch(zone=zone, replaces=name)
        self.controller.queue.add_after(f"launch/{name}", self._config.replacement_delay)
        return None

    # -- provisioning ----------------------------------------------------------------------

    def _allocate_index(self) -> int:
        if self._next_index is None:
            pattern = re.compile(rf"^{re.escape(self._shape.node_prefix)}-(\d+)$")
            used = [int(m.group(1)) for n in self._nodes.cache if (m := pattern.match(n))]
            self._next_index = max(used, default=-1) + 1
        while self._shape.node_name(self._next_index) in self._nodes.cache:
            self._next_index += 1
        index = self._next_index
        self._next_index += 1
        return index

    async def _launch(self, replaced: str) -> float | None:
        plan = self._launches.get(replaced)
        if plan is None:
            return None
        if self._daemonset is None:
            self._daemonset = await self._client.get(
                resources.DAEMONSETS, manifests.DEVICE_PLUGIN, self._shape.device_plugin_namespace
            )
        index = self._allocate_index()
        _, node = await builder.launch(
            self._client,
            self._shape,
            index=index,
            zone=plan.zone,
            rng=self._rng,
            daemonset=self._daemonset,
            now=self._now,
        )
        del self._launches[replaced]
        self.launched.append(node["metadata"]["name"])
        log.info(
            "karpenter: launched %s to replace NodeClaim %s", node["metadata"]["name"], replaced
        )
        return None
