"""Safe in-process access to the store for test fixtures (`api.store`).

Objects going in and out are deep-copied, so a test that edits a returned dict cannot corrupt
the server's state (the store shares objects between its history, watches and responses).
Resources are named as kubectl names them: "nodes", "pods", "remediations",
"nodeclaims.karpenter.sh". Every write has the same semantics and watch events as over HTTP.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from remediation_emulator import errors
from remediation_emulator.eviction import Disruption
from remediation_emulator.store import Store

Obj = dict[str, Any]


class StoreAccess:
    def __init__(self, store: Store, disruption: Disruption) -> None:
        self.raw = store
        """The underlying store (objects are shared: never mutate what it returns)."""
        self._disruption = disruption

    @property
    def resource_version(self) -> int:
        return self.raw.rv

    def create(
        self,
        resource: str,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
    ) -> Obj:
        return copy.deepcopy(
            self.raw.create(resource, copy.deepcopy(dict(obj)), namespace, dry_run=dry_run)
        )

    def get(self, resource: str, name: str, namespace: str | None = None) -> Obj:
        return copy.deepcopy(self.raw.get(resource, name, namespace))

    def find(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        """Like get, but None when the object does not exist."""
        try:
            return self.get(resource, name, namespace)
        except errors.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[Obj]:
        result = self.raw.list(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return copy.deepcopy(result.items)

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        """patch_type: "merge" (JSON merge), "json" (RFC 6902) or "strategic"."""
        return copy.deepcopy(
            self.raw.patch(
                resource,
                name,
                copy.deepcopy(patch),
                namespace,
                patch_type=patch_type,
                subresource=subresource,
                dry_run=dry_run,
            )
        )

    def replace(
        self,
        resource: str,
        name: str,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> Obj:
        return copy.deepcopy(
            self.raw.replace(
                resource, name, copy.deepcopy(dict(obj)), namespace, subresource=subresource
            )
        )

    def delete(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
    ) -> Obj | None:
        """Delete; returns the object if it still exists (finalizers, graceful pod), else None."""
        obj, gone = self.raw.delete(
            resource, name, namespace, grace_period_seconds=grace_period_seconds
        )
        return None if gone else copy.deepcopy(obj)

    def evict(self, name: str, namespace: str) -> None:
        """Evict a pod as POST pods/NAME/eviction would (raises ApiError 429 on a PDB)."""
        code, status = self._disruption.evict(
            namespace, name, {"metadata": {"name": name, "namespace": namespace}}
        )
        if code >= 400:
            raise errors.ApiError(code, str(status.get("reason", "")), str(status.get("message")))

    def compact(self) -> None:
        """Forget the watch history: older resourceVersions now get 410 Gone."""
        self.raw.compact()

    def drop_watches(self, resource: str) -> int:
        """Close every open watch of a resource; returns how many were closed."""
        return self.raw.drop_watches(resource)
