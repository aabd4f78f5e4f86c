"""Creates a GPU fleet through the API: NodeClaims, Nodes, device-plugin and training pods.

Everything goes through HTTP as Karpenter and the kubelet would do it (a NodeClaim, its status
through the status subresource, then the Node owned by it), with many requests in flight so
that 10,000 nodes take seconds, not minutes. `launch` brings up one node and is also what the
emulated Karpenter calls for a replacement.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from remediation_emulator.fleet import manifests, resources
from remediation_emulator.fleet.client import ApiError, KubeClient, Obj
from remediation_emulator.fleet.manifests import Shape

Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Built:
    """What `build` created, and how long it took."""

    nodes: tuple[str, ...]
    nodeclaims: tuple[str, ...]
    pods: int
    seconds: float

    @property
    def nodes_per_second(self) -> float:
        return len(self.nodes) / self.seconds if self.seconds else float("inf")


async def create_or_get(
    client: KubeClient, resource: resources.Resource, body: Obj, namespace: str | None = None
) -> Obj:
    """Create `body`; if it already exists (409 AlreadyExists), return the stored object."""
    try:
        return await client.create(resource, body, namespace=namespace)
    except ApiError as exc:
        if exc.status != 409 or exc.reason != "AlreadyExists":
            raise
        return await client.get(resource, body["metadata"]["name"], namespace)


async def serves(client: KubeClient, resource: resources.Resource) -> bool:
    """Does the server's discovery list this resource?"""
    try:
        found = await client.request("GET", resource.base)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.get("name") == resource.plural for r in found.get("resources", []))


async def install_crds(
    client: KubeClient, crds: Iterable[Obj], *, wait_seconds: float = 10.0, poll: float = 0.05
) -> list[str]:
    """Create CustomResourceDefinitions (existing ones are left as they are) and wait until the
    server serves every one of them; returns their names."""
    pending: list[resources.Resource] = []
    names = []
    for crd in crds:
        await create_or_get(client, resources.CRDS, crd)
        spec = crd["spec"]
        names.append(crd["metadata"]["name"])
        for version in spec["versions"]:
            if version.get("served", True):
                pending.append(
                    resources.Resource(
                        spec["group"],
                        version["name"],
                        spec["names"]["plural"],
                        spec["names"]["kind"],
                        spec["scope"] == "Namespaced",
                    )
                )
    deadline = time.monotonic() + wait_seconds
    for resource in pending:
        while not await serves(client, resource):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the API server did not serve {resource.base}/{resource.plural}"
                )
            await asyncio.sleep(poll)
    return names


async def device_plugin_owner(client: KubeClient, shape: Shape) -> Obj:
    """The device-plugin DaemonSet, created when the server serves DaemonSets."""
    daemonset = manifests.device_plugin_daemonset(shape)
    if await serves(client, resources.DAEMONSETS):
        return await create_or_get(
            client, resources.DAEMONSETS, daemonset, shape.device_plugin_namespace
        )
    raise ApiError(404, "NotFound", "the API server does not serve apps/v1 daemonsets")


async def launch(
    client: KubeClient,
    shape: Shape,
    *,
    index: int,
    zone: str,
    rng: random.Random,
    daemonset: Obj,
    now: Clock = wall_clock,
) -> tuple[Obj, Obj]:
    """Bring up one node as Karpenter does: NodeClaim (named by the server from
    generateName), its status, the owned Node, and the device-plugin pod the DaemonSet would
    place on it. Returns (nodeclaim, node)."""
    claim = await client.create(resources.NODECLAIMS, manifests.nodeclaim(shape, zone))
    name = claim["metadata"]["name"]
    provider = manifests.provider_id(zone, manifests.instance_id(rng))
    node_name = shape.node_name(index)
    status = manifests.nodeclaim_status(shape, node_name, provider, now())
    claim = await client.patch(resources.NODECLAIMS, name, status, subresource="status")
    body = manifests.node(
        shape,
        index=index,
        zone=zone,
        claim=claim,
        provider=provider,
        boot_id=manifests.new_uuid(rng),
        now=now(),
    )
    node = await client.create(resources.NODES, body)
    if not node.get("status", {}).get("conditions"):
        # A server that drops status on create: register it the way the kubelet then does.
        node = await client.patch(
            resources.NODES, node_name, {"status": body["status"]}, subresource="status"
        )
    pod = manifests.device_plugin_pod(shape, daemonset, node_name)
    await client.create(resources.PODS, pod, namespace=shape.device_plugin_namespace)
    return claim, node


async def build(
    client: KubeClient,
    shape: Shape,
    rng: random.Random,
    *,
    now: Clock = wall_clock,
    parallel: int = 64,
) -> Built:
    """Create the whole fleet: namespaces, the NodeClaim CRD, nodes and their workloads."""
    started = time.perf_counter()
    namespaces = {shape.device_plugin_namespace, shape.training_namespace, *shape.extra_namespaces}
    await asyncio.gather(
        *(create_or_get(client, resources.NAMESPACES, manifests.namespace(n)) for n in namespaces)
    )
    await install_crds(client, [manifests.nodeclaim_crd()])
    daemonset = await device_plugin_owner(client, shape)
    gate = asyncio.Semaphore(parallel)
    node_rngs = [random.Random(rng.getrandbits(64)) for _ in range(shape.nodes)]

    async def one(index: int) -> str:
        async with gate:
            claim, _ = await launch(
                client,
                shape,
                index=index,
                zone=shape.zone(index),
                rng=node_rngs[index],
                daemonset=daemonset,
                now=now,
            )
        return str(claim["metadata"]["name"])

    claims = await asyncio.gather(*(one(i) for i in range(shape.nodes)))
    pods = shape.nodes + await _training(client, shape, gate)
    return Built(
        nodes=tuple(shape.node_name(i) for i in range(shape.nodes)),
        nodeclaims=tuple(claims),
        pods=pods,
        seconds=time.perf_counter() - started,
    )


async def _training(client: KubeClient, shape: Shape, gate: asyncio.Semaphore) -> int:
    """Training Jobs spanning `nodes_per_training_job` nodes each, their pods, some PDBs."""
    if shape.training_pods_per_node == 0 or shape.nodes == 0:
        return 0
    group = shape.nodes_per_training_job
    jobs = [
        list(range(start, min(start + group, shape.nodes)))
        for start in range(0, shape.nodes, group)
    ]

    async def one(number: int, members: list[int]) -> int:
        name = f"train-{number:04d}"
        ns = shape.training_namespace
        per_node = shape.training_pods_per_node
        async with gate:
            job = await create_or_get(
                client,
                resources.JOBS,
                manifests.training_job(shape, name, len(members) * per_node),
                ns,
            )
            if shape.pdb_every and number % shape.pdb_every == 0:
                await create_or_get(client, resources.PDBS, manifests.pdb(shape, name), ns)
        count = 0
        for position, index in enumerate(members):
            for slot in range(per_node):
                completion = position * per_node + slot
                pod = manifests.training_pod(shape, job, completion, shape.node_name(index))
                async with gate:
                    await client.create(resources.PODS, pod, namespace=ns)
                count += 1
        return count

    counts = await asyncio.gather(*(one(n, members) for n, members in enumerate(jobs)))
    return sum(counts)
