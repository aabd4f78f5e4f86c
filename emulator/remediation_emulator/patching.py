"""The three patch formats of the real server: JSON merge, JSON patch and strategic merge.

Patches never mutate their input: stored objects are shared between the store, the watch
history and responses, so every function returns a new object (sharing untouched subtrees).

Strategic merge follows k8s.io/apimachinery/pkg/util/strategicpatch for the built-in list
fields that carry `patchStrategy:"merge"` in k8s.io/api (checked against core/v1 types.go):
conditions by `type`, containers/volumes/env by `name`, ownerReferences by `uid`, finalizers
and podCIDRs as primitive sets. `NodeSpec.Taints` and `PodSpec.Tolerations` have no patch
strategy in k8s.io/api, so a strategic patch replaces those lists whole, as on a real cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from remediation_emulator import errors

JSON = Any

# Lists merged by key, matched on the end of the field path (list indices left out).
_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("containers", "env"): "name",
    ("initContainers", "env"): "name",
    ("containers", "ports"): "containerPort",
    ("initContainers", "ports"): "containerPort",
    ("containers", "volumeMounts"): "mountPath",
    ("initContainers", "volumeMounts"): "mountPath",
    ("containers", "volumeDevices"): "devicePath",
}
# Lists of primitives with patchStrategy merge: a patch adds values instead of replacing.
_PRIMITIVE_SETS = {("metadata", "finalizers"), ("spec", "podCIDRs")}


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386 JSON merge patch: objects merge, `null` deletes, everything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    base: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = merge_patch(base.get(key), value)
    return base


# -- JSON patch (RFC 6902) ------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f'JSON pointer "{path}" must start with "/"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _patch_error(message: str) -> errors.ApiError:
    return errors.ApiError(422, "Invalid", message)


def _parent(doc: JSON, parts: list[str], path: str) -> JSON:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict):
            if part not in node:
                raise _patch_error(f"doc is missing path: {path!r}: missing value")
            node = node[part]
        elif isinstance(node, list):
            node = node[_index(node, part, path, allow_end=False)]
        else:
            raise _patch_error(f"doc is missing path: {path!r}: missing value")
    return node


def _index(node: list[Any], part: str, path: str, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(node)
    if not part.isdigit():
        raise _patch_error(f"invalid array index {part!r} in {path!r}")
    idx = int(part)
    if idx > len(node) or (idx == len(node) and not allow_end):
        raise _patch_error(f"unable to access invalid index: {idx} in {path!r}")
    return idx


def _get(doc: JSON, path: str) -> JSON:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _patch_error(f"doc is missing path: {path!r}: missing value")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, allow_end=False)]
    raise _patch_error(f"doc is missing path: {path!r}: missing value")


def _add(doc: JSON, path: str, value: JSON) -> JSON:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise _patch_error(f"doc is missing path: {path!r}: missing value")
    return doc


def _remove(doc: JSON, path: str) -> JSON:
    parts = _pointer(path)
    if not parts:
        raise _patch_error("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _patch_error(f"unable to remove nonexistent key: {last}: missing value")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, path, allow_end=False)]
    else:
        raise _patch_error(f"doc is missing path: {path!r}: missing value")
    return doc


def json_patch(target: JSON, operations: JSON) -> JSON:
    """RFC 6902: add/remove/replace/move/copy/test; a failed `test` is a 422."""
    if not isinstance(operations, list):
        raise errors.bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise errors.bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _add(_remove(doc, path), path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            value = _get(doc, op["from"])
            doc = _add(_remove(doc, op["from"]), path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise _patch_error(f"testing value {path} failed: test failed")
        else:
            raise errors.bad_request(f"Unexpected kind: {kind}")
    return doc


# -- Strategic merge patch ------------------------------------------------------------------


def _merge_key(path: tuple[str, ...]) -> str | None:
    return _MERGE_KEYS.get(path[-2:]) if len(path) >= 2 else None


def strategic_merge(target: JSON, patch: JSON, path: tuple[str, ...] = ()) -> JSON:
    """Apply a strategic merge patch to a built-in object."""
    if not isinstance(patch, Mapping):
        return patch
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    base: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        base = {k: v for k, v in base.items() if k in retain}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(value or [])
            base[field] = [v for v in base.get(field) or [] if v not in drop]
            continue
        child = (*path, key)
        if value is None:
            base.pop(key, None)
        elif isinstance(value, list):
            merged = _merge_list(base.get(key), value, child)
            if merged is None:
                base.pop(key, None)
            else:
                base[key] = merged
        elif isinstance(value, Mapping):
            merged = strategic_merge(base.get(key), value, child)
            if merged is None:
                base.pop(key, None)
            else:
                base[key] = merged
        else:
            base[key] = value
    return base


def _merge_list(current: JSON, patch: list[Any], path: tuple[str, ...]) -> list[Any] | None:
    existing: list[Any] = list(current) if isinstance(current, list) else []
    for item in patch:
        if isinstance(item, Mapping) and item.get("$patch") == "replace":
            return [i for i in patch if not (isinstance(i, Mapping) and "$patch" in i)]
    if path[-2:] in _PRIMITIVE_SETS:
        return existing + [v for v in patch if v not in existing]
    key = _merge_key(path)
    if key is None:
        return list(patch)
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise errors.bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        position = next(
            (
                i
                for i, e in enumerate(existing)
                if isinstance(e, Mapping) and e.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del existing[position]
            continue
        if position is None:
            existing.append(strategic_merge(None, item, path))
        else:
            existing[position] = strategic_merge(existing[position], item, path)
    return existing
