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
- status: conditions (all of them, as they are: a policy may start watching any type),
  nodeInfo.bootID, and `nvidia.com/gpu` of capacity and allocatable (recovery needs the GPUs
  advertised again, docs/decisions.md D68).

Dropped: managedFields, images, the other resources of capacity and allocatable, addresses,
daemonEndpoints, the rest of nodeInfo, spec.podCIDR(s), other writers' annotations. Any
value of an unexpected type is kept as it is, so `engine.nodes` judges a hostile object
exactly as before. A field the operator starts reading must be added here:
tests/performance/test_node_trim.py holds `to_view` and the cordon's patch on a trimmed Node
to those on the full one.

Most events are heartbeats: of what is kept, only some conditions and the resourceVersion
moved (`heartbeat` finds them, comparing without building anything). The node cache then does
not trim the event at all but brings its stored body up to date in place (`refresh`): no new
objects (docs/performance.md, item 19). A field kept here must be compared by `heartbeat` as
well; the tests change each kept field in turn and require `heartbeat` to see it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from remediation_operator.engine.nodes import GPU_RESOURCE

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
KEPT_RESOURCES = ("capacity", "allocatable")
"""status parts of which only `GPU_RESOURCE` is kept."""
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


def _resources(value: object, before: object) -> object:
    """Of a capacity or allocatable mapping, `nvidia.com/gpu` only (`before`'s dict when it
    did not change); odd content as it is."""
    if type(value) is not dict and not isinstance(value, Mapping):
        return value
    kept = {GPU_RESOURCE: value[GPU_RESOURCE]} if GPU_RESOURCE in value else {}
    if before is not None and kept == before:
        return before
    return kept


def _conditions(raw: object, before: object) -> object:
    """The conditions with shared strings, the ones equal to `before`'s at the same place
    being `before`'s objects (a heartbeat rebuilds one condition, not all of them)."""
    if type(raw) is not list:
        return raw
    if type(before) is not list or len(before) != len(raw):
        return [_strings(c) for c in raw]
    out: list[object] = []
    changed = False
    for new, old in zip(raw, before, strict=True):
        if new == old:
            out.append(old)
        else:
            out.append(_renewed(new, old))
            changed = True
    return out if changed else before


Moved = tuple[int, ...]
"""Places in `status.conditions` whose condition changed (`heartbeat`)."""


def heartbeat(stored: Mapping[str, Any], body: Mapping[str, Any]) -> Moved | None:
    """Where `body` differs from `stored` (the node's trimmed body), when that is a heartbeat.

    A heartbeat: of what `trim` keeps (the `nvidia.com/gpu` counts included), nothing differs
    but the resourceVersion and some conditions, each keeping its place, its type and its set
    of fields. Returns those places (empty: nothing moved), or None for any other update (and
    for odd content: a part that is not a mapping). Reads only, builds nothing: the node cache
    then brings `stored` up to date in place (`refresh`) and `engine.nodes.classify_moved` and
    `engine.condition_clock` judge the update from those places alone. (Equal means `==`: a
    field whose value turned from 1 to true is not seen to move; the API server's schema
    never gives these fields either.)

    Written for speed (it runs for every Node event): plain loops, `type(x) is dict`, one
    helper for the field-by-field comparison metadata and spec share (`_same_fields`)."""
    if body.get("apiVersion") != stored.get("apiVersion") or body.get("kind") != stored.get("kind"):
        return None
    metadata, kept = body.get("metadata"), stored.get("metadata")
    spec, small = body.get("spec"), stored.get("spec")
    status, known = body.get("status"), stored.get("status")
    if (
        type(metadata) is not dict
        or type(kept) is not dict
        or type(spec) is not dict
        or type(small) is not dict
        or type(status) is not dict
        or type(known) is not dict
    ):
        return None
    if not _same_fields(metadata, kept, _COMPARED_METADATA):
        return None
    if "annotations" in metadata:
        notes, ours = metadata["annotations"], kept.get("annotations")
        if type(notes) is not dict or type(ours) is not dict:
            return None
        count = 0
        for key, note in notes.items():
            if type(key) is str and key.startswith(KEPT_ANNOTATION_PREFIXES):
                if key not in ours or ours[key] != note:
                    return None
                count += 1
        if count != len(ours):
            return None
    elif "annotations" in kept:
        return None
    if not _same_fields(spec, small, KEPT_SPEC):
        return None
    if "nodeInfo" in status:
        info, was = status["nodeInfo"], known.get("nodeInfo")
        if type(info) is not dict or type(was) is not dict:
            return None
        if "bootID" in info:
            if "bootID" not in was or info["bootID"] != was["bootID"]:
                return None
        elif was:
            return None
    elif "nodeInfo" in known:
        return None
    for part in KEPT_RESOURCES:
        if part in status:
            resources, was = status[part], known.get(part)
            if type(resources) is not dict or type(was) is not dict:
                return None
            if GPU_RESOURCE in resources:
                if GPU_RESOURCE not in was or resources[GPU_RESOURCE] != was[GPU_RESOURCE]:
                    return None
            elif GPU_RESOURCE in was:
                return None
        elif part in known:
            return None
    conditions, before = status.get("conditions"), known.get("conditions")
    if type(conditions) is not list or type(before) is not list:
        return None
    if len(conditions) != len(before):
        return None
    moved: list[int] = []
    for place, new in enumerate(conditions):
        old = before[place]
        if new != old:
            if (
                type(new) is not dict
                or type(old) is not dict
                or len(new) != len(old)
                or new.get("type") != old.get("type")
            ):
                return None
            for key in new:
                if key not in old:
                    return None
            moved.append(place)
    return tuple(moved)


def _same_fields(raw: Mapping[str, Any], kept: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    """Each of `keys` is in both or in neither, with equal values."""
    for key in keys:
        if key in raw:
            if key not in kept or raw[key] != kept[key]:
                return False
        elif key in kept:
            return False
    return True


def refresh(stored: Mapping[str, Any], body: Mapping[str, Any], moved: Moved) -> None:
    """Bring `stored` to what `trim(body)` would be, in place, where `heartbeat` said they
    differ: the resourceVersion and the fields that changed in the moved conditions.

    Why in place: at 10,000 nodes a heartbeat that built a new trimmed body (five containers
    and the condition) cost about 0.1 of the floor's CPU more than one that changes two
    values, most of it not in the trim itself but in the JSON parsing and freeing of the
    events that followed: every object kept from an event is a long-lived object among that
    event's garbage, and the allocator's pools fill with them (docs/performance.md, item 19).
    The cache's bodies are its own (readers never keep one across an await), and so is what
    this changes: the metadata and condition mappings of a trimmed body are built by `trim`,
    never the caller's objects."""
    metadata = stored["metadata"]
    version = body["metadata"].get("resourceVersion", _ABSENT)
    if version is _ABSENT:
        metadata.pop("resourceVersion", None)
    else:
        metadata["resourceVersion"] = version
    before = stored["status"]["conditions"]
    after = body["status"]["conditions"]
    for place in moved:
        old = before[place]
        for key, value in after[place].items():
            if old[key] != value:
                old[key] = value


def trim(body: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A new, smaller Node body holding only the fields listed in the module docstring.

    `previous`: the node's last trimmed body, if any. Parts equal to `previous`'s are
    `previous`'s objects (labels, annotations, spec, nodeInfo, each condition), so that a
    node's successive bodies share what did not change.

    Never raises: a part that is not a mapping is kept as it is (the readers ignore it)."""
    before = previous if previous is not None else _EMPTY
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
        kept = _pick(metadata, KEPT_METADATA)
        if "labels" in kept:
            labels = known.get("labels")
            if labels is None or kept["labels"] != labels:
                labels = _strings(kept["labels"])
            kept["labels"] = labels
        if "annotations" in metadata:
            kept["annotations"] = _annotations(metadata["annotations"], known.get("annotations"))
        out["metadata"] = kept
    elif "metadata" in body:
        out["metadata"] = metadata
    spec = body.get("spec")
    if type(spec) is dict or isinstance(spec, Mapping):
        small = _pick(spec, KEPT_SPEC)
        known = before.get("spec")
        out["spec"] = known if known is not None and small == known else small
    elif "spec" in body:
        out["spec"] = spec
    status = body.get("status")
    if type(status) is dict or isinstance(status, Mapping):
        known = before.get("status")
        if type(known) is not dict:
            known = _EMPTY
        trimmed = {}
        if "conditions" in status:
            trimmed["conditions"] = _conditions(status["conditions"], known.get("conditions"))
        if "nodeInfo" in status:
            info = status["nodeInfo"]
            if type(info) is dict or isinstance(info, Mapping):
                was = known.get("nodeInfo")
                boot = {"bootID": info["bootID"]} if "bootID" in info else {}
                info = was if was is not None and boot == was else boot
            trimmed["nodeInfo"] = info
        for part in KEPT_RESOURCES:
            if part in status:
                trimmed[part] = _resources(status[part], known.get(part))
        out["status"] = trimmed
    elif "status" in body:
        out["status"] = status
    return out


_EMPTY: Mapping[str, Any] = {}
_ABSENT = object()
_COMPARED_METADATA = tuple(key for key in KEPT_METADATA if key != "resourceVersion")
"""What a heartbeat leaves as it was: every kept metadata field but the version, which every
write changes."""
