"""What the emulator serves: one `ResourceType` per (group, version, plural).

Discovery, routing, validation, tables and the store all read the same description, so a
custom resource created at run time from a CRD is served exactly like a built-in type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrinterColumn:
    """A CRD `additionalPrinterColumns` entry (or a built-in default column)."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    printer_columns: tuple[PrinterColumn, ...] = ()
    builtin: bool = True
    """Built-in types accept strategic merge patch; custom resources answer 415."""
    has_generation: bool = False
    """Whether metadata.generation is maintained (bumped on spec changes)."""
    keeps_status_on_create: bool = False
    """Nodes are created by the kubelet with their status; most types reset it on create."""
    allow_unconditional_update: bool = True
    """PUT without metadata.resourceVersion is allowed (false for custom resources)."""
    selectable_fields: tuple[str, ...] = ()
    """Field selectors beyond metadata.name/namespace (per the real registry strategies)."""
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    """The CRD's openAPIV3Schema for this version, used for pruning and validation."""
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: objects are shared by every version of a group's resource."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"
