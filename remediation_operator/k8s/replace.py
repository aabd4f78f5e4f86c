"""Give a node back: hand it to Karpenter, delete the Node, or ask a human.

Karpenter owns the machine's lifecycle: deleting the node's NodeClaim (found through the
Node's ownerReference, else by `status.providerID == spec.providerID`, as Karpenter itself
links them) makes Karpenter drain, terminate and, when pods are pending, provision a
replacement. The step is done when the NodeClaim (or, for the other providers, the Node) is
gone: observed, not assumed. A node Karpenter cannot replace (it has no NodeClaim, or the
NodeClaim CRD is not installed at all) is refused at once with the reason (`NoNodeClaim`),
never reported as replaced and never left to wait out the step's timeout.
"""

from __future__ import annotations

from typing import Any

from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import ReplaceProvider
from remediation_operator.k8s import names, nodes
from remediation_operator.k8s.client import ApiError, Client, path


class NoNodeClaim(LookupError):  # noqa: N818 - read as replace.NoNodeClaim
    """The node has neither a NodeClaim ownerReference nor a NodeClaim with its providerID, or
    the NodeClaim CRD is not installed."""


def _no_claim(node: str) -> NoNodeClaim:
    return NoNodeClaim(
        f"node {node} has no NodeClaim (no karpenter.sh ownerReference and no NodeClaim"
        " with its providerID); use the DeleteNode or Manual replace provider"
    )


def _no_karpenter(node: str) -> NoNodeClaim:
    return NoNodeClaim(
        f"cannot replace node {node} through Karpenter: the NodeClaim CRD"
        f" ({names.KARPENTER_GROUP_VERSION} {names.NODECLAIMS}) is not installed; use the"
        " DeleteNode or Manual replace provider"
    )


async def karpenter_installed(client: Client) -> bool:
    """Whether the API server serves NodeClaims (a 404 on their list: the CRD is absent)."""
    try:
        await client.get(_claim_path(), limit=1)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True


def _claim_path(name: str | None = None) -> str:
    return path(names.KARPENTER_GROUP_VERSION, names.NODECLAIMS, name)


async def _node(client: Client, node: str) -> dict[str, Any] | None:
    try:
        return await nodes.read(client, node)
    except ApiError as error:
        if error.status == 404:
            return None
        raise


async def find_nodeclaim(client: Client, node: dict[str, Any]) -> dict[str, Any] | None:
    """The node's NodeClaim object, or None if there is none (any more)."""
    for ref in (node.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "NodeClaim" and str(ref.get("apiVersion", "")).startswith(
            "karpenter.sh/"
        ):
            try:
                return await client.get(_claim_path(ref["name"]))
            except ApiError as error:
                if error.status != 404:
                    raise
    provider_id = (node.get("spec") or {}).get("providerID")
    if not provider_id:
        return None
    try:
        claims = await client.get(_claim_path())
    except ApiError as error:
        if error.status == 404:  # the NodeClaim CRD is not installed: no Karpenter
            return None
        raise
    for claim in claims.get("items") or []:
        if isinstance(claim, dict) and (claim.get("status") or {}).get("providerID") == provider_id:
            return dict(claim)
    return None


async def replace(client: Client, node: str, provider: ReplaceProvider) -> None:
    body = await _node(client, node)
    if body is None:
        return
    if provider is ReplaceProvider.Manual:
        await nodes.label(client, node, names.REPLACE_REQUESTED, "true")
        return
    if provider is ReplaceProvider.DeleteNode:
        try:
            await client.delete(nodes.node_path(node))
        except ApiError as error:
            if error.status != 404:
                raise
        return
    claim = await find_nodeclaim(client, body)
    if claim is None:
        if not await karpenter_installed(client):
            raise _no_karpenter(node)
        raise _no_claim(node)
    try:
        await client.delete(_claim_path(claim["metadata"]["name"]))
    except ApiError as error:
        if error.status != 404:
            raise


async def status(client: Client, node: str, provider: ReplaceProvider) -> Progress:
    body = await _node(client, node)
    if body is None:
        return Progress.Succeeded
    if provider is ReplaceProvider.Manual:
        labels = (body.get("metadata") or {}).get("labels") or {}
        return Progress.InProgress if labels.get(names.REPLACE_REQUESTED) else Progress.Absent
    if provider is ReplaceProvider.DeleteNode:
        deleting = (body.get("metadata") or {}).get("deletionTimestamp")
        return Progress.InProgress if deleting else Progress.Absent
    claim = await find_nodeclaim(client, body)
    if claim is None:
        if not await karpenter_installed(client):
            raise _no_karpenter(node)
        if _had_claim(body):
            # The NodeClaim the Node names is gone while the Node lingers: Karpenter is done.
            return Progress.Succeeded
        raise _no_claim(node)
    deleting = (claim.get("metadata") or {}).get("deletionTimestamp")
    return Progress.InProgress if deleting else Progress.Absent


def _had_claim(node: dict[str, Any]) -> bool:
    return any(
        ref.get("kind") == "NodeClaim"
        for ref in (node.get("metadata") or {}).get("ownerReferences") or []
    )
