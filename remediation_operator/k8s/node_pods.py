"""The pods on a node that hold stale state about its GPUs, listed and restarted (D71).

Both supported health agents keep a fault condition until their process restarts (the EKS
node monitoring agent writes its condition healthy only when it starts; node-problem-detector
keeps a kernel-log condition until it restarts), and the NVIDIA device plugin keeps a GPU it
saw fail unhealthy for the life of its process (shared/reference/real-nodes.md). After a
repair, the operator restarts them on that node: a plain DELETE of the pod, not an eviction
(they are DaemonSet pods a drain leaves; their DaemonSet recreates them on the node).

A pod created at or after the restart instant is never deleted, so a repeat of the restart
(after a crash of the operator between its record and its effect) restarts nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from remediation_operator.api.timestamps import parse_optional
from remediation_operator.domain.fleet import NodePod
from remediation_operator.domain.policy import RestartTarget
from remediation_operator.domain.selectors import LabelSelector, Operator
from remediation_operator.k8s.client import ApiError, Client, path


def label_selector(selector: LabelSelector) -> str:
    """The selector in the API's `labelSelector` query syntax (`a=b,c in (d,e),!f`)."""
    terms = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    for requirement in selector.match_expressions:
        values = ",".join(requirement.values)
        match requirement.operator:
            case Operator.IN:
                terms.append(f"{requirement.key} in ({values})")
            case Operator.NOT_IN:
                terms.append(f"{requirement.key} notin ({values})")
            case Operator.EXISTS:
                terms.append(requirement.key)
            case Operator.DOES_NOT_EXIST:
                terms.append(f"!{requirement.key}")
    return ",".join(terms)


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _pod(target: int, pod: Mapping[str, Any]) -> NodePod | None:
    metadata = pod.get("metadata") or {}
    created = parse_optional(metadata.get("creationTimestamp"))
    if created is None:
        return None
    return NodePod(
        target=target,
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        created_at=created,
        ready=_ready(pod),
        deleting=metadata.get("deletionTimestamp") is not None,
    )


async def _listed(client: Client, node: str, target: RestartTarget) -> list[dict[str, Any]]:
    listed = await client.get(
        path("v1", "pods", namespace=target.namespace),
        fieldSelector=f"spec.nodeName={node}",
        labelSelector=label_selector(target.selector),
    )
    return list(listed.get("items") or [])


async def list_pods(client: Client, node: str, targets: Sequence[RestartTarget]) -> list[NodePod]:
    """Every pod on `node` each target selects, tagged with the first target selecting it."""
    listings = await asyncio.gather(*(_listed(client, node, t) for t in targets))
    seen: set[tuple[str, str]] = set()
    out: list[NodePod] = []
    for index, items in enumerate(listings):
        for item in items:
            pod = _pod(index, item)
            if pod is None or (pod.namespace, pod.name) in seen:
                continue
            seen.add((pod.namespace, pod.name))
            out.append(pod)
    return out


async def restart(
    client: Client, node: str, targets: Sequence[RestartTarget], created_before: datetime
) -> list[str]:
    """Delete the selected pods created before `created_before` (not those terminating
    already); return them as `namespace/name`. A pod gone already counts as restarted."""
    pods = await list_pods(client, node, targets)
    doomed = [p for p in pods if not p.deleting and p.created_at < created_before]

    async def one(pod: NodePod) -> None:
        try:
            await client.delete(path("v1", "pods", pod.name, namespace=pod.namespace))
        except ApiError as error:
            if error.status != 404:  # gone already: the restart we asked for happened
                raise

    await asyncio.gather(*(one(p) for p in doomed))
    return [f"{p.namespace}/{p.name}" for p in doomed]
