"""The emulator's state: every object, the global resourceVersion, and the write rules.

All API semantics live here, below HTTP, so tests and fixtures can use `api.store` directly
and see exactly what a client would: uid, creationTimestamp, a global monotonically increasing
resourceVersion, generation bumped on spec changes only, optimistic concurrency (409),
status subresources, finalizers and deletionTimestamp, graceful deletion of bound pods,
and a watch event for every change. Stored objects are never mutated in place: a write builds
a new dict, so the history ring, open watches and responses can share them safely.

Everything runs on the event loop thread; no locks are needed because no method awaits.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_emulator import (
    builtin_rules,
    builtin_types,
    crds,
    errors,
    names,
    patching,
    schema,
    zero_values,
)
from remediation_emulator.resources import ResourceType
from remediation_emulator.selectors import (
    EVERYTHING,
    NO_FIELDS,
    FieldSelector,
    LabelSelector,
    parse_fields,
    parse_labels,
)
from remediation_emulator.watch import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    History,
    Watcher,
    with_rv,
)

Obj = dict[str, Any]
Key = tuple[str, str]
Observer = Callable[[ResourceType, Event], None]
Objects = list[Obj]  # `list` is also a Store method name

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
DEFAULT_POD_GRACE_SECONDS = 30


def timestamp(moment: datetime) -> str:
    """RFC 3339 with second precision, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str = ""
    remaining: int | None = None


class Collection:
    """The objects of one resource (all versions share it), sorted like etcd keys."""

    def __init__(self, rtype: ResourceType, history_size: int) -> None:
        self.rtype = rtype
        self.objects: dict[Key, Obj] = {}
        self.keys: list[Key] = []
        self.history = History(history_size)
        self.by_node: dict[str, set[Key]] | None = {} if rtype.key == ("", "pods") else None

    def range(self, namespace: str | None, after: Key | None) -> Iterator[Key]:
        """Keys in order, in one namespace or all, strictly after `after`."""
        start = bisect.bisect_right(self.keys, after) if after is not None else 0
        if namespace is not None:
            start = max(start, bisect.bisect_left(self.keys, (namespace, "")))
        for i in range(start, len(self.keys)):
            key = self.keys[i]
            if namespace is not None and key[0] != namespace:
                return
            yield key

    def count(self, namespace: str | None) -> int:
        if namespace is None:
            return len(self.keys)
        lo = bisect.bisect_left(self.keys, (namespace, ""))
        hi = bisect.bisect_left(self.keys, (namespace + "\x00", ""))
        return hi - lo

    def put(self, key: Key, obj: Obj) -> None:
        old = self.objects.get(key)
        if old is None:
            bisect.insort(self.keys, key)
        self.objects[key] = obj
        if self.by_node is not None:
            self._index(key, old, obj)

    def remove(self, key: Key) -> None:
        old = self.objects.pop(key, None)
        if old is None:
            return
        del self.keys[bisect.bisect_left(self.keys, key)]
        if self.by_node is not None:
            self._index(key, old, None)

    def _index(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        assert self.by_node is not None
        before = ((old or {}).get("spec") or {}).get("nodeName") or ""
        after = ((new or {}).get("spec") or {}).get("nodeName") or ""
        if before == after and new is not None:
            return
        if old is not None and before:
            keys = self.by_node.get(before)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_node[before]
        if new is not None and after:
            self.by_node.setdefault(after, set()).add(key)


class Store:
    """In-process API state. Methods raise `errors.ApiError` exactly where the server would."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = system_clock,
        history_size: int = 20_000,
    ) -> None:
        self.clock = clock
        self.history_size = history_size
        self.rv = 0
        self.compacted_rv = 0
        self.observers: list[Observer] = []
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._resolved: dict[str, ResourceType] = {}
        self._collections: dict[tuple[str, str], Collection] = {}
        for rtype in builtin_types.BUILTIN_TYPES:
            self._register(rtype)
        for namespace in builtin_types.DEFAULT_NAMESPACES:
            self.create("namespaces", {"metadata": {"name": namespace}})

    # -- types ---------------------------------------------------------------------------

    def _register(self, rtype: ResourceType, *, storage: bool = True) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype
        self._resolved.clear()
        existing = self._collections.get(rtype.key)
        if existing is None:
            self._collections[rtype.key] = Collection(rtype, self.history_size)
        elif storage:
            existing.rtype = rtype

    def _unregister_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[key]
        self._resolved.clear()
        collection = self._collections.pop((group, plural), None)
        if collection is not None:
            collection.history.close_all()

    def types(self) -> list[ResourceType]:
        """Every served (group, version, resource), built-ins first."""
        return list(self._types.values())

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def resolve(self, resource: str | ResourceType) -> ResourceType:
        """A type from `nodes`, `pods`, `remediations`, `remediations.remediation.gpuops.io`,
        a kind or a short name (the storage version when a group serves several)."""
        if isinstance(resource, ResourceType):
            return resource
        cached = self._resolved.get(resource)
        if cached is not None:
            return cached
        plural, _, group = resource.partition(".")
        candidates = [
            c.rtype
            for c in self._collections.values()
            if (
                (group == "" or c.rtype.group == group)
                and resource.lower()
                in {c.rtype.plural, c.rtype.singular, c.rtype.kind.lower(), *c.rtype.short_names}
            )
            or (group and c.rtype.group == group and c.rtype.plural == plural)
        ]
        if not candidates:
            raise errors.ApiError(
                404, "NotFound", f'the server doesn\'t have a resource type "{resource}"'
            )
        candidates.sort(key=lambda t: (t.group != "", t.group))  # the core group wins ties
        self._resolved[resource] = candidates[0]
        return candidates[0]

    def collection(self, rtype: ResourceType) -> Collection:
        found = self._collections.get(rtype.key)
        if found is None:
            raise errors.not_found(rtype.plural, rtype.group, "")
        return found

    # -- reads ---------------------------------------------------------------------------

    def get(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> Obj:
        rtype = self.resolve(resource)
        obj = self.collection(rtype).objects.get(self._key(rtype, namespace, name))
        if obj is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return present(rtype, obj)

    def list(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
    ) -> ListResult:
        rtype = self.resolve(resource)
        coll = self.collection(rtype)
        labels = self._labels(label_selector)
        fields = self._fields(rtype, field_selector)
        namespace = namespace if rtype.namespaced else None
        list_rv = self.rv
        after: Key | None = None
        if continue_token:
            list_rv, after = self._decode_continue(continue_token)
        elif resource_version_match == "Exact" and resource_version not in ("", "0"):
            wanted = parse_rv(resource_version)
            if wanted != self.rv:
                # No MVCC snapshots here: only the current revision can be served exactly.
                raise errors.gone(f"too old resource version: {wanted} ({self.rv})")
        elif resource_version_match not in ("", "NotOlderThan", "Exact"):
            raise errors.bad_request(f"unsupported resourceVersionMatch {resource_version_match!r}")
        keys: Iterable[Key]
        node = fields.exact("spec.nodeName") if coll.by_node is not None else None
        if node is not None and coll.by_node is not None:
            indexed = sorted(coll.by_node.get(node, ()))
            keys = [
                k
                for k in indexed
                if (namespace is None or k[0] == namespace) and (after is None or k > after)
            ]
        else:
            keys = coll.range(namespace, after)
        items: list[Obj] = []
        token = ""
        last: Key | None = None
        iterator = iter(keys)
        for key in iterator:
            obj = coll.objects[key]
            if (labels.empty or labels.matches(obj["metadata"].get("labels"))) and (
                fields.empty or fields.matches(obj)
            ):
                items.append(present(rtype, obj))
                last = key
                if limit and len(items) >= limit:
                    break
        remaining: int | None = None
        more = limit and len(items) >= limit and last is not None
        if (
            more
            and last is not None
            and any(True for _ in self._after(coll, namespace, last, node))
        ):
            token = self._encode_continue(list_rv, last)
            if labels.empty and fields.empty and node is None:
                remaining = coll.count(namespace) - self._position(coll, namespace, last)
        return ListResult(items, str(list_rv), token, remaining)

    def _after(
        self, coll: Collection, namespace: str | None, last: Key, node: str | None
    ) -> Iterable[Key]:
        if node is not None and coll.by_node is not None:
            return [
                k
                for k in coll.by_node.get(node, ())
                if k > last and (namespace is None or k[0] == namespace)
            ]
        return coll.range(namespace, last)

    def _position(self, coll: Collection, namespace: str | None, last: Key) -> int:
        """How many keys of the namespace (or all) are at or before `last`."""
        end = bisect.bisect_right(coll.keys, last)
        if namespace is None:
            return end
        return end - bisect.bisect_left(coll.keys, (namespace, ""))

    def _encode_continue(self, rv: int, last: Key) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": [last[0], last[1]]})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def _decode_continue(self, token: str) -> tuple[int, Key]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rv, start = int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error) as exc:
            raise errors.bad_request(f"continue key is not valid: {exc}") from exc
        if rv < self.compacted_rv:
            raise errors.gone(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter, or use the continue "
                "token in this response to retrieve the remainder of the results. Continuing "
                "with the provided token results in an inconsistent list - objects that were "
                "created, modified, or deleted between the time the first chunk was returned "
                "and now may show up in the list."
            )
        return rv, start

    def watch(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        resource_version: str = "",
    ) -> Watcher:
        """Open a watch. "" and "0" start with ADDED for every current object; a number
        resumes after that version (410 Gone if the history no longer reaches back)."""
        rtype = self.resolve(resource)
        coll = self.collection(rtype)
        watcher = Watcher(
            namespace if rtype.namespaced else None,
            self._labels(label_selector),
            self._fields(rtype, field_selector),
        )
        if resource_version in ("", "0"):
            for key in coll.range(watcher.namespace, None):
                obj = coll.objects[key]
                if watcher.selects(obj):
                    watcher.queue.put_nowait((ADDED, present(rtype, obj), None))
        else:
            since = parse_rv(resource_version)
            if since < coll.history.dropped_upto:
                raise errors.gone(
                    f"too old resource version: {since} ({coll.history.dropped_upto})"
                )
            for event in coll.history.since(since):
                watcher.offer(event)
        coll.history.add(watcher)
        return watcher

    def unwatch(self, resource: str | ResourceType, watcher: Watcher) -> None:
        rtype = self.resolve(resource)
        coll = self._collections.get(rtype.key)
        if coll is not None:
            coll.history.discard(watcher)
        watcher.closed = True

    def drop_watches(self, resource: str | ResourceType) -> int:
        """Close every open watch of a resource (clients see the stream end)."""
        coll = self.collection(self.resolve(resource))
        count = len(coll.history.watchers)
        coll.history.close_all()
        return count

    def compact(self) -> None:
        """Forget all history, like etcd compaction: older watches and continues get 410."""
        self.compacted_rv = self.rv
        for coll in self._collections.values():
            coll.history.compact(self.rv)

    # -- writes --------------------------------------------------------------------------

    def create(
        self,
        resource: str | ResourceType,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        field_validation: str = "",
    ) -> Obj:
        rtype = self.resolve(resource)
        coll = self.collection(rtype)
        if not isinstance(body, Mapping):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._strict(rtype, body, field_validation)
        obj: Obj = dict(body)
        self._check_kind(rtype, obj)
        meta: Obj = dict(obj.get("metadata") or {})
        namespace = self._namespace_for_write(rtype, namespace, meta)
        if meta.get("resourceVersion"):
            raise errors.internal("resourceVersion should not be set on objects to be created")
        name = meta.get("name") or ""
        if not name:
            prefix = meta.get("generateName") or ""
            if not prefix:
                raise errors.invalid(
                    rtype.kind,
                    rtype.group,
                    "",
                    [
                        errors.Cause(
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                            "metadata.name",
                        )
                    ],
                )
            name = names.generate(prefix)
            while self._key(rtype, namespace, name) in coll.objects:
                name = names.generate(prefix)
        causes = names.check(name, label=rtype.key == ("", "namespaces"))
        if causes:
            raise errors.invalid(rtype.kind, rtype.group, name, causes)
        key = self._key(rtype, namespace, name)
        if key in coll.objects:
            raise errors.already_exists(rtype.plural, rtype.group, name)
        meta["name"] = name
        if rtype.namespaced:
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timestamp(self.clock())
        for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(server_field, None)
        if self._tracks_generation(rtype):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        meta = _omit_empty(meta)
        obj["metadata"] = meta
        obj = {"apiVersion": coll.rtype.api_version, "kind": rtype.kind, **obj}
        obj["apiVersion"], obj["kind"] = coll.rtype.api_version, rtype.kind
        if rtype.has_status and not rtype.keeps_status_on_create:
            obj.pop("status", None)
        obj = self._defaults_on_create(rtype, obj)
        self._validate(rtype, obj, None)
        if dry_run:
            return present(rtype, {**obj, "metadata": {**meta, "resourceVersion": str(self.rv)}})
        return present(rtype, self._commit(coll, key, ADDED, obj, None))

    def replace(
        self,
        resource: str | ResourceType,
        name: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "",
    ) -> Obj:
        """PUT: replace the object (or only its status, with subresource="status")."""
        rtype = self.resolve(resource)
        coll = self.collection(rtype)
        if not isinstance(body, Mapping):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._strict(rtype, body, field_validation)
        self._check_kind(rtype, body)
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        if rtype.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        key = self._key(rtype, namespace, name)
        old = coll.objects.get(key)
        if old is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        wanted = meta.get("resourceVersion")
        if not wanted and not rtype.allow_unconditional_update:
            raise errors.invalid(
                rtype.kind,
                rtype.group,
                name,
                [
                    errors.Cause(
                        "FieldValueInvalid",
                        "Invalid value: 0: must be specified for an update",
                        "metadata.resourceVersion",
                    )
                ],
            )
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, name, errors.STALE_OBJECT)
        new = self._prepare_update(rtype, old, body, subresource)
        return self._finish_update(rtype, coll, key, old, new, dry_run)

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "",
    ) -> Obj:
        """PATCH with patch_type "merge", "json" or "strategic" (built-in types only)."""
        rtype = self.resolve(resource)
        coll = self.collection(rtype)
        key = self._key(rtype, namespace, name)
        old = coll.objects.get(key)
        if patch_type == "strategic" and not rtype.builtin:
            raise errors.unsupported_media_type("application/strategic-merge-patch+json")
        if old is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        current = present(rtype, old)
        if patch_type == "merge":
            if not isinstance(body, Mapping):
                raise errors.bad_request(
                    "json: cannot unmarshal array into Go value of type map[string]interface {}"
                )
            patched = patching.merge_patch(current, body)
        elif patch_type == "json":
            patched = patching.json_patch(current, body)
        elif patch_type == "strategic":
            if not isinstance(body, Mapping):
                raise errors.bad_request(
                    "json: cannot unmarshal array into Go value of type map[string]interface {}"
                )
            patched = patching.strategic_merge(current, body)
        else:
            raise errors.unsupported_media_type(patch_type)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), Mapping):
            raise errors.bad_request("the patch removed the object's metadata")
        self._strict(rtype, patched, field_validation)
        meta = patched["metadata"]
        if (
            meta.get("resourceVersion")
            and meta["resourceVersion"] != old["metadata"]["resourceVersion"]
        ):
            raise errors.conflict(rtype.plural, rtype.group, name, errors.STALE_OBJECT)
        if meta.get("name") != name:
            raise errors.invalid(
                rtype.kind,
                rtype.group,
                name,
                [
                    errors.Cause(
                        "FieldValueInvalid",
                        f'Invalid value: "{meta.get("name")}": field is immutable',
                        "metadata.name",
                    )
                ],
            )
        new = self._prepare_update(rtype, old, patched, subresource)
        return self._finish_update(rtype, coll, key, old, new, dry_run)

    def delete(
        self,
        resource: str | ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        preconditions: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete; returns (the object as it now is, whether it is gone).

        With finalizers, or for a pod bound to a node and a grace period above zero, the
        object only gets a deletionTimestamp; it goes when the last finalizer is removed /
        when it is deleted again with gracePeriodSeconds=0 (the kubelet's job).
        """
        rtype = self.resolve(resource)
        coll = self.collection(rtype)
        key = self._key(rtype, namespace, name)
        old = coll.objects.get(key)
        if old is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        meta = old["metadata"]
        if preconditions:
            if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
                raise errors.conflict(
                    rtype.plural,
                    rtype.group,
                    name,
                    f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                    f"UID in object meta: {meta['uid']}",
                )
            wanted = preconditions.get("resourceVersion")
            if wanted and wanted != meta["resourceVersion"]:
                raise errors.conflict(
                    rtype.plural,
                    rtype.group,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {wanted}, "
                    f"ResourceVersion in object meta: {meta['resourceVersion']}",
                )
        if grace_period_seconds is not None and grace_period_seconds < 0:
            grace_period_seconds = 1
        grace = self._grace(rtype, old, grace_period_seconds)
        finalizers = meta.get("finalizers") or []
        if rtype.key == ("", "namespaces") and not dry_run:
            self._empty_namespace(name)
        if grace == 0 and not finalizers:
            if dry_run:
                return present(rtype, old), True
            gone = self._commit(coll, key, DELETED, old, old)
            return present(rtype, gone), True
        now = self.clock()
        new_meta = dict(meta)
        current_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") is None or (
            current_grace is not None and grace < current_grace
        ):
            new_meta["deletionTimestamp"] = timestamp(now + timedelta(seconds=grace))
            new_meta["deletionGracePeriodSeconds"] = grace
        if rtype.key == ("", "namespaces"):
            new = {
                **old,
                "metadata": new_meta,
                "status": {**(old.get("status") or {}), "phase": "Terminating"},
            }
        else:
            new = {**old, "metadata": new_meta}
        if new == old or dry_run:
            return present(rtype, new), False
        if grace == 0 and not finalizers:
            return present(rtype, self._commit(coll, key, DELETED, new, old)), True
        return present(rtype, self._commit(coll, key, MODIFIED, new, old)), False

    def delete_collection(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> Objects:
        rtype = self.resolve(resource)
        found = self.list(
            rtype, namespace, label_selector=label_selector, field_selector=field_selector
        )
        out: Objects = []
        for obj in found.items:
            meta = obj["metadata"]
            deleted, _ = self.delete(
                rtype,
                meta["name"],
                meta.get("namespace"),
                grace_period_seconds=grace_period_seconds,
                dry_run=dry_run,
            )
            out.append(deleted)
        return out

    # -- write internals -------------------------------------------------------------------

    def _grace(self, rtype: ResourceType, obj: Obj, requested: int | None) -> int:
        """Only pods bound to a node and not finished delete gracefully (as the pod strategy)."""
        if rtype.key != ("", "pods"):
            return 0
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return requested
        configured = spec.get("terminationGracePeriodSeconds")
        return int(configured) if configured is not None else DEFAULT_POD_GRACE_SECONDS

    def _empty_namespace(self, namespace: str) -> None:
        """The namespace controller's work, done at once: remove everything inside."""
        for coll in list(self._collections.values()):
            if not coll.rtype.namespaced:
                continue
            for key in list(coll.range(namespace, None)):
                obj = coll.objects[key]
                self._commit(coll, key, DELETED, obj, obj)

    def _prepare_update(
        self, rtype: ResourceType, old: Obj, incoming: Mapping[str, Any], subresource: str
    ) -> Obj:
        if subresource and subresource not in rtype.subresources:
            raise errors.not_found(
                f"{rtype.plural}/{subresource}", rtype.group, old["metadata"]["name"]
            )
        old_meta = old["metadata"]
        if subresource == "status":
            new = dict(old)
            if incoming.get("status") is None:
                new.pop("status", None)
            else:
                new["status"] = incoming["status"]
            return new
        new = dict(incoming)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        meta = dict(incoming.get("metadata") or {})
        for fixed in (
            "name",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        if rtype.namespaced:
            meta["namespace"] = old_meta["namespace"]
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rtype.kind,
                    rtype.group,
                    old_meta["name"],
                    [
                        errors.Cause(
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being "
                            "deleted, "
                            f"found new finalizers {sorted(added)!r}",
                            "metadata.finalizers",
                        )
                    ],
                )
        meta = _omit_empty(meta)
        new["metadata"] = meta
        if rtype.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if self._tracks_generation(rtype) and _spec_of(new) != _spec_of(old):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        return new

    def _finish_update(
        self, rtype: ResourceType, coll: Collection, key: Key, old: Obj, new: Obj, dry_run: bool
    ) -> Obj:
        new = self._apply_schema(rtype, new)
        self._validate(rtype, new, old)
        meta = new["metadata"]
        if new == old:
            return present(rtype, old)  # a no-op write changes nothing and sends no event
        if dry_run:
            return present(rtype, new)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            return present(rtype, self._commit(coll, key, DELETED, new, old))
        return present(rtype, self._commit(coll, key, MODIFIED, new, old))

    def _commit(self, coll: Collection, key: Key, type_: str, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        obj = with_rv(obj, self.rv)
        if type_ == DELETED:
            coll.remove(key)
        else:
            coll.put(key, obj)
        event = Event(self.rv, type_, obj, old if type_ != DELETED else None)
        coll.history.record(event)
        if coll.rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_changed(type_, obj)
        for observer in self.observers:
            observer(coll.rtype, event)
        return obj

    def _crd_changed(self, type_: str, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        if type_ == DELETED:
            self._unregister_group_resource(group, plural)
            return
        served = crds.resource_types(crd)
        for stale in [k for k in self._types if k[0] == group and k[2] == plural]:
            if stale not in {(t.group, t.version, t.plural) for t in served}:
                del self._types[stale]
        for rtype in served:
            self._register(rtype, storage=False)
        storage = crds.storage_type(crd)
        if storage is not None:
            self._collections[storage.key].rtype = storage
        self._resolved.clear()

    def _defaults_on_create(self, rtype: ResourceType, obj: Obj) -> Obj:
        if rtype.key == ("", "pods"):
            obj["status"] = {"phase": "Pending"}  # the pod strategy resets status on create
        elif rtype.key == ("", "namespaces"):
            obj["spec"] = {"finalizers": ["kubernetes"], **(obj.get("spec") or {})}
            obj["status"] = {"phase": "Active"}
        elif rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            obj["status"] = crds.accepted_status(obj, self.clock())
        return self._apply_schema(rtype, builtin_rules.defaults(rtype, obj))

    def _apply_schema(self, rtype: ResourceType, obj: Obj) -> Obj:
        storage = self.collection(rtype).rtype
        if storage.schema is None:
            return zero_values.fill(storage, obj)
        return schema.prune_and_default(storage.schema, obj)

    def _validate(self, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
        storage = self.collection(rtype).rtype
        name = obj["metadata"]["name"]
        causes: list[errors.Cause] = []
        if storage.schema is not None:
            causes += schema.validate(storage.schema, obj)
        causes += builtin_rules.validate(rtype, obj, old)
        if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            causes += crds.validate(obj, old)
        if causes:
            raise errors.invalid(storage.kind, storage.group, name, causes)

    def _strict(self, rtype: ResourceType, body: Mapping[str, Any], mode: str) -> None:
        """fieldValidation=Strict: fields the CRD schema does not declare are a 400."""
        storage = self.collection(rtype).rtype
        if mode != "Strict" or storage.schema is None:
            return
        unknown = schema.unknown_fields(storage.schema, body)
        if unknown:
            listed = ", ".join(f'unknown field "{path}"' for path in unknown)
            raise errors.bad_request(
                f'{rtype.kind} in version "{rtype.version}" cannot be handled as a '
                f"{rtype.kind}: strict decoding error: {listed}"
            )

    def _check_kind(self, rtype: ResourceType, body: Mapping[str, Any]) -> None:
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rtype.api_version})"
            )

    def _namespace_for_write(self, rtype: ResourceType, namespace: str | None, meta: Obj) -> str:
        if not rtype.namespaced:
            meta.pop("namespace", None)
            return ""
        given = meta.get("namespace")
        if namespace and given and given != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        namespace = namespace or given or ""
        if not namespace:
            raise errors.bad_request("an empty namespace may not be set during creation")
        ns = self._collections[("", "namespaces")].objects.get(("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", "", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                f'{rtype.plural} "{meta.get("name") or meta.get("generateName", "")}" is '
                f"forbidden: unable to create new content in namespace {namespace} because it is "
                "being terminated",
                rtype.plural,
                rtype.group,
                meta.get("name", ""),
            )
        return namespace

    def _tracks_generation(self, rtype: ResourceType) -> bool:
        return rtype.has_generation or not rtype.builtin

    def _key(self, rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rtype.namespaced else "", name)

    def _labels(self, selector: str | LabelSelector | None) -> LabelSelector:
        if isinstance(selector, LabelSelector):
            return selector
        return parse_labels(selector) if selector else EVERYTHING

    def _fields(self, rtype: ResourceType, selector: str | FieldSelector | None) -> FieldSelector:
        if isinstance(selector, FieldSelector):
            return selector
        return parse_fields(selector, rtype.selectable_fields) if selector else NO_FIELDS


def _omit_empty(meta: Obj) -> Obj:
    """ObjectMeta fields are all `omitempty`: empty labels, finalizers... are not returned."""
    return {k: v for k, v in meta.items() if v is not None and v != {} and v != []}


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything generation tracks: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def present(rtype: ResourceType, obj: Obj) -> Obj:
    """The object as served at rtype's version (custom resources may serve several)."""
    if obj.get("apiVersion") == rtype.api_version:
        return obj
    return {**obj, "apiVersion": rtype.api_version}


def parse_rv(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {value!r}") from None
    if parsed < 0:
        raise errors.bad_request(f"invalid resource version: {value!r}")
    return parsed
