"""Kubernetes Events, deduplicated the way client-go's event recorder does.

The first occurrence of (object, reason, message, type) creates a core/v1 Event; repeats patch
its `count` and `lastTimestamp` instead of creating new objects, so `kubectl describe node`
shows "x5 over 10m" rather than five lines, and a flapping node cannot flood etcd. Events
about cluster-scoped objects (Nodes, our custom resources) live in the `default` namespace,
where kubelet puts node events and `kubectl describe` looks for them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from remediation_operator.domain import bounds
from remediation_operator.k8s.client import ApiError, Client, path

EVENT_NAMESPACE = "default"
COMPONENT = "remediation-operator"
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    name: str
    api_version: str
    uid: str | None = None
    namespace: str | None = None


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Posts Events as one reporting instance; remembers recent ones to count repeats."""

    def __init__(self, client: Client, instance: str) -> None:
        self._client = client
        self._instance = instance
        self._seen: OrderedDict[tuple[str, ...], tuple[str, str, int]] = OrderedDict()

    async def record(
        self, ref: ObjectRef, reason: str, message: str, type_: str, now: datetime
    ) -> None:
        namespace = ref.namespace or EVENT_NAMESPACE
        key = (ref.kind, ref.namespace or "", ref.name, reason, message, type_)
        seen = self._seen.get(key)
        if seen is not None:
            name, first, count = seen
            try:
                await self._client.patch(
                    path("v1", "events", name, namespace=namespace),
                    {"count": count + 1, "lastTimestamp": _timestamp(now)},
                    kind="merge",
                )
                self._remember(key, (name, first, count + 1))
                return
            except ApiError as error:
                if error.status != 404:
                    raise
        digest = hashlib.sha256("/".join(key).encode() + _timestamp(now).encode()).hexdigest()
        name = f"{ref.name[:200]}.{digest[:16]}"
        involved: dict[str, Any] = {
            "kind": ref.kind,
            "name": ref.name,
            "apiVersion": ref.api_version,
        }
        if ref.uid:
            involved["uid"] = ref.uid
        if ref.namespace:
            involved["namespace"] = ref.namespace
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": bounds.cut(message),
            "type": type_,
            "count": 1,
            "firstTimestamp": _timestamp(now),
            "lastTimestamp": _timestamp(now),
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
        }
        try:
            await self._client.create(path("v1", "events", namespace=namespace), body)
        except ApiError as error:
            if error.status != 409:
                raise
        self._remember(key, (name, _timestamp(now), 1))

    def _remember(self, key: tuple[str, ...], value: tuple[str, str, int]) -> None:
        self._seen[key] = value
        self._seen.move_to_end(key)
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)
