"""What the operator changes on a Node: cordon, release, do-not-disrupt, agent requests.

Every write reads the Node first and sends a JSON merge patch carrying the resourceVersion it
read, so a concurrent change by kubelet, Karpenter or an administrator makes the write fail
with 409 and be recomputed instead of silently overwriting theirs. Taints are written as the
whole list: JSON merge patch replaces lists (RFC 7386), which removes our taint reliably
without depending on a strategic-merge key for `spec.taints`. Each operation is idempotent:
a node already in the wanted state is not written at all. A cordon may start from the
caller's watched copy of the Node instead of a read (the reaction-time hot path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from remediation_operator.k8s import names
from remediation_operator.k8s.client import ApiError, Client, path

_ATTEMPTS = 5


def node_path(node: str) -> str:
    return path("v1", "nodes", node)


async def read(client: Client, node: str) -> dict[str, Any]:
    return await client.get(node_path(node))


def _taints(body: dict[str, Any]) -> list[dict[str, Any]]:
    taints = (body.get("spec") or {}).get("taints") or []
    return [t for t in taints if isinstance(t, dict)]


def is_ours(taint: dict[str, Any]) -> bool:
    return taint.get("key") == names.QUARANTINE_TAINT and taint.get("effect") == "NoSchedule"


async def _update(
    client: Client,
    node: str,
    change: Callable[[dict[str, Any]], dict[str, Any] | None],
    known: Mapping[str, Any] | None = None,
) -> None:
    """Read, compute a merge patch (None: nothing to do), write with the resourceVersion.

    `known`: the caller's copy of the Node (its watch cache); the first attempt starts from it
    instead of a read, saving a round trip. The resourceVersion precondition makes a stale
    copy harmless: 409, then read and retry as usual.
    """
    for attempt in range(_ATTEMPTS):
        if attempt == 0 and known is not None and (known.get("metadata") or {}).get("name"):
            body = dict(known)  # `change` only reads it
        else:
            body = await read(client, node)
        patch = change(body)
        if patch is None:
            return
        patch.setdefault("metadata", {})["resourceVersion"] = body["metadata"]["resourceVersion"]
        try:
            await client.patch(node_path(node), patch, kind="merge")
            return
        except ApiError as error:
            if error.status != 409 or attempt == _ATTEMPTS - 1:
                raise


def _pointed(taints: list[dict[str, Any]], value: str) -> list[dict[str, Any]] | None:
    """The taint list with our quarantine taint's value set to `value`; None when it carries
    no taint of ours or already says so."""
    if all(t.get("value") == value for t in taints if is_ours(t)):
        return None
    return [{**t, "value": value} if is_ours(t) else t for t in taints]


async def cordon(
    client: Client, node: str, fault: str, policy: str, known: Mapping[str, Any] | None = None
) -> None:
    """Cordon and taint in one write, with the node's own proof of who did it.

    The same patch records `quarantined-by: <policy>` and, only when this write is the one
    that flips spec.unschedulable, `uncordon-on-release: "true"`. The engine cordons before it
    writes the Remediation (docs/decisions.md D14), so after a crash in between, these
    annotations are how the next leader knows the cordon was ours and whether to undo it. The
    same write sets `karpenter.sh/do-not-disrupt` (D56), which the release removes.
    Deciding "we flipped it" here, on the body the resourceVersion precondition pins, is
    exact: an administrator's cordon racing ours makes our write fail with 409 and re-read.

    A node that already carries our quarantine for another policy (whose incident yielded it,
    D76) is taken over in this one write: `quarantined-by` and the taint's value change to this
    policy and fault, `uncordon-on-release` stays as the first cordon wrote it, and the node
    is never schedulable in between.
    """
    value = fault[:63]

    def change(body: dict[str, Any]) -> dict[str, Any] | None:
        taints = _taints(body)
        ours = [t for t in taints if is_ours(t)]
        unschedulable = bool((body.get("spec") or {}).get("unschedulable"))
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        owner = annotations.get(names.QUARANTINED_BY)
        pointed = _pointed(taints, value)
        if unschedulable and ours and owner in (None, "", policy) and pointed is None:
            return None
        spec: dict[str, Any] = {"unschedulable": True}
        if not ours:
            taint = {"key": names.QUARANTINE_TAINT, "value": value, "effect": "NoSchedule"}
            spec["taints"] = [*taints, taint]
        elif pointed is not None:
            spec["taints"] = pointed
        marks: dict[str, Any] = {}
        if owner != policy:
            marks[names.QUARANTINED_BY] = policy
        if not unschedulable:
            marks[names.UNCORDON_ON_RELEASE] = "true"
        if annotations.get(names.DO_NOT_DISRUPT) != "true":
            # The cordon keeps the node from Karpenter's consolidation (D56); written here, the
            # ProtectFromConsolidation that follows finds it set and writes nothing.
            marks[names.DO_NOT_DISRUPT] = "true"
        patch: dict[str, Any] = {"spec": spec}
        if marks:
            patch["metadata"] = {"annotations": marks}
        return patch

    await _update(client, node, change, known)


async def requarantine(client: Client, node: str, fault: str, policy: str) -> None:
    """Point the quarantine a node carries at the fault its incident follows now (the taint's
    value, and `quarantined-by`), after the incident moved onto a more severe fault (D58,
    D77). Cordons nothing: a node without our taint is not written."""
    value = fault[:63]

    def change(body: dict[str, Any]) -> dict[str, Any] | None:
        taints = _taints(body)
        if not any(is_ours(t) for t in taints):
            return None
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        pointed = _pointed(taints, value)
        patch: dict[str, Any] = {}
        if pointed is not None:
            patch["spec"] = {"taints": pointed}
        if annotations.get(names.QUARANTINED_BY) != policy:
            patch["metadata"] = {"annotations": {names.QUARANTINED_BY: policy}}
        return patch or None

    await _update(client, node, change)


async def release(client: Client, node: str, uncordon: bool) -> None:
    def change(body: dict[str, Any]) -> dict[str, Any] | None:
        taints = _taints(body)
        kept = [t for t in taints if not is_ours(t)]
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        labels = (body.get("metadata") or {}).get("labels") or {}
        unschedulable = bool((body.get("spec") or {}).get("unschedulable"))
        patch: dict[str, Any] = {}
        spec: dict[str, Any] = {}
        if len(kept) != len(taints):
            spec["taints"] = kept or None
        if uncordon and unschedulable:
            spec["unschedulable"] = None
        if spec:
            patch["spec"] = spec
        ours = (
            names.DO_NOT_DISRUPT,
            names.AGENT_REQUEST,
            names.QUARANTINED_BY,
            names.UNCORDON_ON_RELEASE,
        )
        drop = [k for k in ours if k in annotations]
        if drop:
            patch["metadata"] = {"annotations": dict.fromkeys(drop)}
        if names.REPLACE_REQUESTED in labels:
            patch.setdefault("metadata", {})["labels"] = {names.REPLACE_REQUESTED: None}
        return patch or None

    await _update(client, node, change)


async def annotate(client: Client, node: str, key: str, value: str | None) -> None:
    """Set (or with None remove) one annotation, skipping the write when already so."""

    def change(body: dict[str, Any]) -> dict[str, Any] | None:
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if annotations.get(key) == value:
            return None
        return {"metadata": {"annotations": {key: value}}}

    await _update(client, node, change)


async def label(client: Client, node: str, key: str, value: str | None) -> None:
    def change(body: dict[str, Any]) -> dict[str, Any] | None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        if labels.get(key) == value:
            return None
        return {"metadata": {"labels": {key: value}}}

    await _update(client, node, change)


async def protect_from_consolidation(client: Client, node: str, on: bool) -> None:
    await annotate(client, node, names.DO_NOT_DISRUPT, "true" if on else None)
