"""Drain a node the way `kubectl drain` does: the Eviction API, PodDisruptionBudgets honoured.

Pods that must not or need not be evicted are skipped exactly like kubectl: DaemonSet-owned
pods (their controller would recreate them on the node anyway), mirror pods (static pods the
API cannot delete) and pods already Succeeded/Failed. A 429 from the eviction subresource is a
PodDisruptionBudget saying "not now" (kubectl retries it every 5 s); we report it as blocked,
naming the budget and the pods, and the engine retries at its next wake. The budget's name
comes from the 429's `details.causes[]` entry with reason `DisruptionBudget`, whose message
the API server words "The disruption budget <name> needs N healthy pods and has M currently"
(or "... does not allow evicting pods currently ..."; k8s.io/kubernetes
pkg/registry/core/pod/storage/eviction.go); the budget is in the pod's namespace. A pod
already terminating still counts as remaining until it is gone, but is not evicted again.
`force` deletes the pods instead (the policy's choice after the drain timed out).

kubectl drain flags this matches: `--ignore-daemonsets` (DaemonSet pods are left),
`--delete-emptydir-data` (pods with emptyDir volumes are evicted; their data goes with them),
`--force` (pods no controller owns are evicted too: a remediation cannot wait for someone to
move them) and mirror pods are skipped as kubectl always does. A `DrainPlan` refines this
(`domain/drain.py`): a pod the policy lets complete (AllowCompletion: a Job's pod or a bare
pod) is left until its wait is over and counts as remaining meanwhile; DeleteAfterTimeout
deletes the pod once its wait is over; `gpu_only` moves only pods requesting `nvidia.com/gpu`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from remediation_operator.domain.effects import EVERY_POD, DrainPlan
from remediation_operator.domain.policy import PodHandling
from remediation_operator.k8s import names
from remediation_operator.k8s.client import ApiError, Client, path

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
EVICTION_CONCURRENCY = 16
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
_BUDGET_NAME = re.compile(r"^The disruption budget (\S+) ")
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Drained:
    remaining: int
    blocked_by_pdb: bool = False
    attempted: bool = False
    message: str = ""
    pdbs: tuple[str, ...] = ()
    """`namespace/name` of the PodDisruptionBudgets that refused the last evictions."""
    blocked_pods: tuple[str, ...] = ()
    """`namespace/name` of the pods whose eviction they refused."""


@dataclass(frozen=True)
class _Refusal:
    message: str
    pdbs: tuple[str, ...]
    pods: tuple[str, ...]


def budgets_named(body: Any, namespace: str) -> list[str]:
    """The PodDisruptionBudgets a 429 from the eviction subresource names (`namespace/name`)."""
    details = body.get("details") if isinstance(body, Mapping) else None
    causes = details.get("causes") if isinstance(details, Mapping) else None
    named: list[str] = []
    for cause in causes if isinstance(causes, list) else ():
        if not isinstance(cause, Mapping) or cause.get("reason") != DISRUPTION_BUDGET_CAUSE:
            continue
        found = _BUDGET_NAME.match(str(cause.get("message") or ""))
        if found is not None:
            named.append(f"{namespace}/{found.group(1)}")
    return named


def evictable(pod: dict[str, Any]) -> bool:
    metadata = pod.get("metadata") or {}
    if names.MIRROR_POD in (metadata.get("annotations") or {}):
        return False
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return False
    return not any(
        ref.get("kind") == "DaemonSet" and ref.get("controller")
        for ref in metadata.get("ownerReferences") or []
    )


def uses_gpu(pod: Mapping[str, Any]) -> bool:
    """The pod requests (or limits) `nvidia.com/gpu` in any container (init ones included)."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            amount = str((resources.get(kind) or {}).get(GPU_RESOURCE, "0")).strip()
            if amount not in ("", "0"):
                return True
    return False


def completes(pod: Mapping[str, Any]) -> bool:
    """A Job's pod or a bare pod: it ends by itself (others are restarted by a controller)."""
    refs = [
        r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")
    ]
    return not refs or any(r.get("kind") == "Job" for r in refs)


class Move(Enum):
    EVICT = "evict"
    DELETE = "delete"
    WAIT = "wait"


def move(pod: Mapping[str, Any], plan: DrainPlan) -> Move:
    """What the drain does with `pod` now: the first rule selecting it decides."""
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace", "default")
    labels = metadata.get("labels") or {}
    for index, rule in enumerate(plan.rules):
        if not rule.selects(namespace, labels):
            continue
        over = index in plan.expired
        if rule.handling is PodHandling.AllowCompletion:
            return Move.EVICT if over or not completes(pod) else Move.WAIT
        if rule.handling is PodHandling.DeleteAfterTimeout:
            return Move.DELETE if over else Move.WAIT
        return Move.EVICT
    return Move.EVICT


async def pods_on(client: Client, node: str, plan: DrainPlan = EVERY_POD) -> list[dict[str, Any]]:
    listed = await client.get(path("v1", "pods"), fieldSelector=f"spec.nodeName={node}")
    return [
        p for p in listed.get("items") or [] if evictable(p) and (not plan.gpu_only or uses_gpu(p))
    ]


class Drainer:
    """Evicts and remembers, per node, whether it tried and whether a PDB refused last."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._attempted: set[str] = set()
        self._blocked: dict[str, _Refusal] = {}

    async def status(self, node: str, plan: DrainPlan = EVERY_POD) -> Drained:
        remaining = await pods_on(self._client, node, plan)
        blocked = self._blocked.get(node) if remaining else None
        if blocked is None:
            return Drained(
                remaining=len(remaining),
                attempted=node in self._attempted,
                message=_left(remaining, plan),
            )
        return Drained(
            remaining=len(remaining),
            blocked_by_pdb=True,
            attempted=node in self._attempted,
            message=blocked.message,
            pdbs=blocked.pdbs,
            blocked_pods=blocked.pods,
        )

    async def evict(self, node: str, force: bool, plan: DrainPlan = EVERY_POD) -> Drained:
        """Evict every evictable pod of the node, EVICTION_CONCURRENCY at a time.

        kubectl drain evicts all pods at once, one goroutine per pod
        (k8s.io/kubectl/pkg/drain `evictPods`); a bounded number in flight keeps a 110-pod
        node well under a second of round trips without flooding the API server.
        """
        self._attempted.add(node)
        refused: list[tuple[str, list[str]]] = []
        gate = asyncio.Semaphore(EVICTION_CONCURRENCY)

        async def one(pod: dict[str, Any]) -> None:
            how = Move.DELETE if force else move(pod, plan)
            if how is Move.WAIT:
                return  # the policy lets it finish; it counts as remaining meanwhile
            async with gate:
                await self._evict_one(pod, how is Move.DELETE, refused)

        await asyncio.gather(*(one(pod) for pod in await pods_on(self._client, node, plan)))
        if refused:
            pods = tuple(sorted(pod for pod, _ in refused))
            pdbs = tuple(sorted({pdb for _, named in refused for pdb in named}))
            by = f"PodDisruptionBudget {', '.join(pdbs)}" if pdbs else "a PodDisruptionBudget"
            self._blocked[node] = _Refusal(
                f"eviction of {', '.join(pods[:3])}{' and others' if len(pods) > 3 else ''}"
                f" refused by {by}",
                pdbs,
                pods,
            )
        else:
            self._blocked.pop(node, None)
        return await self.status(node, plan)

    async def _evict_one(
        self, pod: dict[str, Any], force: bool, refused: list[tuple[str, list[str]]]
    ) -> None:
        metadata = pod["metadata"]
        if metadata.get("deletionTimestamp"):
            return
        name, namespace = metadata["name"], metadata.get("namespace", "default")
        try:
            if force:
                await self._client.delete(path("v1", "pods", name, namespace=namespace))
            else:
                await self._client.create(
                    path("v1", "pods", name, namespace=namespace, subresource="eviction"),
                    {
                        "apiVersion": "policy/v1",
                        "kind": "Eviction",
                        "metadata": {"name": name, "namespace": namespace},
                    },
                )
        except ApiError as error:
            if error.status == 429:
                refused.append((f"{namespace}/{name}", budgets_named(error.body, namespace)))
            elif error.status != 404:
                raise


def _left(pods: list[dict[str, Any]], plan: DrainPlan = EVERY_POD) -> str:
    if not pods:
        return "no GPU pod remains" if plan.gpu_only else "no evictable pod remains"
    waiting = [p for p in pods if move(p, plan) is Move.WAIT]
    shown = ", ".join(
        f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}" for p in pods[:3]
    )
    left = f"{len(pods)} pod(s) left to evict: {shown}{' ...' if len(pods) > 3 else ''}"
    if waiting:
        left += f" ({len(waiting)} allowed to complete first)"
    return left
