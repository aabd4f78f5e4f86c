"""A bounded log of the requests served, recorded the way RBAC sees them.

Tests assert on it ("the operator patched this node once", "no writes from the second
replica"), and a later RBAC test derives the operator's needed permissions from it, so each
entry carries the authorisation attributes: verb (get/list/watch/create/update/patch/delete/
deletecollection), API group, resource, subresource, namespace, name and the user.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Entry:
    time: datetime
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    user: str
    path: str
    """The URL path, for non-resource requests (discovery) where resource is empty."""
    seconds: float = 0.0
    """Time the server spent on the request (for a watch: until the stream started)."""

    @property
    def is_write(self) -> bool:
        return self.verb in ("create", "update", "patch", "delete", "deletecollection")


class RequestLog:
    """List-like (len, iteration, indexing) and bounded: old entries fall off the front."""

    def __init__(self, size: int = 100_000) -> None:
        self._entries: deque[Entry] = deque(maxlen=size)

    def append(self, entry: Entry) -> None:
        self._entries.append(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries))

    def __getitem__(self, index: int) -> Entry:
        return self._entries[index]

    def clear(self) -> None:
        self._entries.clear()

    def matching(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        user: str | None = None,
        code: int | None = None,
    ) -> list[Entry]:
        """Entries equal to every given attribute."""
        wanted = {
            "verb": verb,
            "resource": resource,
            "subresource": subresource,
            "name": name,
            "namespace": namespace,
            "user": user,
            "code": code,
        }
        return [
            e
            for e in list(self._entries)
            if all(v is None or getattr(e, k) == v for k, v in wanted.items())
        ]
