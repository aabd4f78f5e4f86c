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

from remediation_operator.engine import nodes as node_views

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


def _pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    # Loops, not comprehensions, here and below: this runs for every Node event, and on
    # Python 3.11 each comprehension is a function call of its own (docs/performance.md).
    out = {}
    for key in keys:
        if key in source:
            out[key] = source[key]
    return out


_intern = sys.intern


def _strings(value: object) -> object:
    """A mapping rebuilt with shared keys and string values; anything else as it is.

    Label keys and values, condition field names, types, reasons, messages and heartbeat
    instants repeat across thousands of Nodes, but each JSON document parses into its own
    copies: shared, a trimmed real-size Node takes about 4 KB of memory instead of 10."""
    if not isinstance(value, Mapping):
        return value
    return {
        (_intern(k) if type(k) is str else k): (_intern(v) if type(v) is str else v)
        for k, v in value.items()
    }


_CONDITION_FIELDS = {
    key: key
    for key in ("type", "status", "reason", "message", "lastHeartbeatTime", "lastTransitionTime")
}
"""A condition's field names, as shared strings (`_renewed`)."""


def _renewed(new: object, old: object) -> object:
    """A changed condition with `old`'s string objects where a field kept its value.

    Not `_strings`: `sys.intern` is a lookup in the interpreter's table of every interned
    string, cold on every event (about 10 us of a 230 us event, docs/performance.md), while
    `old`'s values are the shared ones already and the new heartbeat instant is not worth
    sharing."""
    if type(new) is not dict or type(old) is not dict:
        return _strings(new)
    out = {}
    for key, value in new.items():
        if key in old:
            was = old[key]
            if was == value:
                value = was
        out[_CONDITION_FIELDS.get(key, key)] = value
    return out


def _annotations(value: object, before: object) -> object:
    """Our group's and Karpenter's annotations (`before`'s dict when they did not change)."""
    if type(value) is not dict and not isinstance(value, Mapping):
        return value  # odd content: `engine.nodes` treats it as no annotations, as before
    kept = {}
    for key, note in value.items():
        if type(key) is str and key.startswith(KEPT_ANNOTATION_PREFIXES):
            kept[key] = note
    if before is not None and kept == before:
        return before
    return _strings(kept)


def _conditions(raw: object, before: object) -> tuple[object, tuple[int, ...] | None]:
    """The conditions with shared strings, the ones equal to `before`'s at the same place
    being `before`'s objects (a heartbeat rebuilds one condition, not all of them); and the
    places that moved, when the two lists can be compared place by place and each moved
    condition kept its type (else None)."""
    if type(raw) is not list:
        return raw, None
    if type(before) is not list or len(before) != len(raw):
        return [_strings(c) for c in raw], None
    out: list[object] = []
    moved: list[int] = []
    kept_types = True
    for place, (new, old) in enumerate(zip(raw, before, strict=True)):
        if new == old:
            out.append(old)
        else:
            out.append(_renewed(new, old))
            moved.append(place)
            if type(new) is not dict or type(old) is not dict or new.get("type") != old.get("type"):
                kept_types = False
    if not moved:
        return before, ()
    return out, (tuple(moved) if kept_types else None)


def trim(body: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A new, smaller Node body holding only the fields listed in the module docstring.

    `previous`: the node's last trimmed body, if any: see `trim_against`."""
    return trim_against(body, previous)[0]


Moved = tuple[int, ...]
"""Places in `status.conditions` whose condition changed (`trim_against`)."""


def trim_against(
    body: Mapping[str, Any], previous: Mapping[str, Any] | None
) -> tuple[dict[str, Any], Moved | None]:
    """`body` trimmed, and what moved since `previous` (the node's last trimmed body).

    Parts equal to `previous`'s are `previous`'s objects (labels, annotations, spec, nodeInfo,
    each condition): a heartbeat costs one rebuilt condition instead of a copy of every label
    and condition. The second value is the places in `status.conditions` that changed, when
    nothing else `engine.nodes` reads did (metadata but its resourceVersion, spec, nodeInfo,
    the number of conditions) and each of those conditions is a mapping that kept its type;
    None when something else did, or there is no `previous`. `engine.nodes.classify` then
    judges the update from those places alone, and `engine.condition_clock` times them
    alone. (Equal means `==`: a field whose value turned from 1 to true would keep the 1; the
    API server's schema never gives these fields either.)

    Never raises: a part that is not a mapping is kept as it is (the readers ignore it).
    Written for speed (it runs for every Node event): `type(x) is dict` before the slower
    abstract-class check, loops rather than comprehensions (each of which is a function call
    of its own on Python 3.11), no helper calls where a line does."""
    before = previous if previous is not None else _EMPTY
    same = previous is not None  # so far, nothing but conditions (and the version) moved
    out: dict[str, Any] = {}
    if "apiVersion" in body:
        out["apiVersion"] = body["apiVersion"]
    if "kind" in body:
        out["kind"] = body["kind"]
    metadata = body.get("metadata")
    if type(metadata) is dict or isinstance(metadata, Mapping):
        known = before.get("metadata")
        if type(known) is not dict:
            known = _EMPTY
            same = False
        kept = _pick(metadata, KEPT_METADATA)
        if "labels" in kept:
            labels = known.get("labels")
            if labels is None or kept["labels"] != labels:
                labels = _strings(kept["labels"])
                same = False
            kept["labels"] = labels
        if "annotations" in metadata:
            notes = known.get("annotations")
            kept["annotations"] = _annotations(metadata["annotations"], notes)
            if kept["annotations"] is not notes:
                same = False
        if same:
            # (labels and annotations were judged above: `known`'s objects when unchanged)
            same = node_views.equal_except(known, kept, _VERSION)
        out["metadata"] = kept
    else:
        same = False
        if "metadata" in body:
            out["metadata"] = metadata
    spec = body.get("spec")
    if type(spec) is dict or isinstance(spec, Mapping):
        small = _pick(spec, KEPT_SPEC)
        known = before.get("spec")
        if known is not None and small == known:
            small = known
        else:
            same = False
        out["spec"] = small
    else:
        same = False
        if "spec" in body:
            out["spec"] = spec
    moved: Moved | None = None
    status = body.get("status")
    if type(status) is dict or isinstance(status, Mapping):
        known = before.get("status")
        if type(known) is not dict:
            known = _EMPTY
            same = False
        small = {}
        if "conditions" in status:
            small["conditions"], moved = _conditions(status["conditions"], known.get("conditions"))
        elif "conditions" in known:
            same = False
        if "nodeInfo" in status:
            info = status["nodeInfo"]
            was = known.get("nodeInfo")
            if type(info) is dict or isinstance(info, Mapping):
                boot = {"bootID": info["bootID"]} if "bootID" in info else {}
                info = was if was is not None and boot == was else boot
            if info is not was:
                same = False
            small["nodeInfo"] = info
        elif "nodeInfo" in known:
            same = False
        out["status"] = small
    else:
        same = False
        if "status" in body:
            out["status"] = status
    return out, (moved if same else None)


_EMPTY: Mapping[str, Any] = {}
_VERSION = frozenset({"resourceVersion"})
"""Metadata every write changes: not a change the readers see."""
