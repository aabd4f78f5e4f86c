"""Keep only what the operator reads of a Node, as each one arrives from the list or the watch.

A real GPU Node is about 6.6 KB of JSON (images, managedFields, feature-discovery labels,
capacity, addresses); parsed into Python dicts it is several times that, and the node cache
holds the newest body of every node. At 10,000 nodes that was most of the operator's memory
(about 34 MB per 1,000 real-size nodes against a real server; docs/performance.md). Like a
controller-runtime cache `TransformFunc` (`cache.TransformStripManagedFields`,
kubernetes-sigs/controller-runtime#2791) or client-go's `SharedInformer.SetTransform`
(kubernetes/kubernetes#107507), `trim` runs before a body is stored, so the full object is
garbage as soon as the page or watch event that carried it is.

What is kept is every field the operator reads of a cached Node, found by reading
`engine/nodes.py` (`to_view`, `classify`), `k8s/nodes.py` (the cordon starts from the cached
copy), `handlers/node_cache.py` and `handlers/runtime.py` (name, uid, labels):

- metadata: name, uid, resourceVersion (the cordon's precondition), creationTimestamp,
  deletionTimestamp, labels (all: any selector may use any label), ownerReferences (small;
  `k8s/replace.py` reads them, from a fresh read today), and the annotations of our own
  group (`remediation.gpuops.io/*`: quarantined-by, uncordon-on-release, agent-ack,
  agent-request, exclude, ...) and Karpenter's (`karpenter.sh/*`, do-not-disrupt);
- spec: unschedulable, taints (whole: the cordon writes the list back with ours added),
  providerID;
- status: conditions (all of them, as they are: a policy may start watching any type) and
  nodeInfo.bootID.

Dropped: managedFields, images, capacity, allocatable, addresses, daemonEndpoints, the rest of
nodeInfo, spec.podCIDR(s), other writers' annotations. Any value of an unexpected type is
kept as it is, so `engine.nodes` judges a hostile object exactly as before. A field the
operator starts reading must be added here: tests/performance/test_node_trim.py holds
`to_view` and the cordon's patch on a trimmed Node to those on the full one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

KEPT_METADATA = (
    "name",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "ownerReferences",
)
KEPT_SPEC = ("unschedulable", "taints", "providerID")
KEPT_ANNOTATION_PREFIXES = ("remediation.gpuops.io/", "karpenter.sh/")
"""Annotation keys the operator reads or writes on Nodes all start with one of these."""
KEPT_TOP = ("apiVersion", "kind")


def _pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: source[k] for k in keys if k in source}


def _shared(value: object) -> object:
    """The one shared copy of a string (`sys.intern`); anything else as it is."""
    return sys.intern(value) if type(value) is str else value


def _strings(value: object) -> object:
    """A mapping rebuilt with shared keys and string values; anything else as it is.

    Label keys and values, condition field names, types, reasons, messages and heartbeat
    instants repeat across thousands of Nodes, but each JSON document parses into its own
    copies: shared, a trimmed real-size Node takes about 4 KB of memory instead of 10."""
    if not isinstance(value, Mapping):
        return value
    return {_shared(k): _shared(v) for k, v in value.items()}


def _annotations(value: object) -> object:
    if not isinstance(value, Mapping):
        return value  # odd content: `engine.nodes` treats it as no annotations, as before
    return {
        _shared(k): _shared(v)
        for k, v in value.items()
        if isinstance(k, str) and k.startswith(KEPT_ANNOTATION_PREFIXES)
    }


def trim(body: Mapping[str, Any]) -> dict[str, Any]:
    """A new, smaller Node body holding only the fields listed in the module docstring.

    Never raises: a part that is not a mapping is kept as it is (the readers ignore it)."""
    out = _pick(body, KEPT_TOP)
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        kept = _pick(metadata, KEPT_METADATA)
        if "labels" in kept:
            kept["labels"] = _strings(kept["labels"])
        if "annotations" in metadata:
            kept["annotations"] = _annotations(metadata["annotations"])
        out["metadata"] = kept
    elif "metadata" in body:
        out["metadata"] = metadata
    spec = body.get("spec")
    if isinstance(spec, Mapping):
        out["spec"] = _pick(spec, KEPT_SPEC)
    elif "spec" in body:
        out["spec"] = spec
    status = body.get("status")
    if isinstance(status, Mapping):
        small: dict[str, Any] = {}
        if "conditions" in status:
            raw = status["conditions"]
            small["conditions"] = [_strings(c) for c in raw] if isinstance(raw, list) else raw
        if "nodeInfo" in status:
            info = status["nodeInfo"]
            small["nodeInfo"] = _pick(info, ("bootID",)) if isinstance(info, Mapping) else info
        out["status"] = small
    elif "status" in body:
        out["status"] = status
    return out
