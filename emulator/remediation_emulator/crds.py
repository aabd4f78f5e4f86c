"""CustomResourceDefinitions: turning a posted CRD into served resource types.

The real apiextensions-apiserver validates the CRD, serves each `served` version under
/apis/<group>/<version>, and its controllers set the `NamesAccepted` and `Established`
conditions within moments. Here that happens in the same write, so a client that waits for
`Established` (as kubectl and kopf do) never waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from remediation_emulator.errors import Cause
from remediation_emulator.resources import PrinterColumn, ResourceType


def _version_type(crd: Mapping[str, Any], version: Mapping[str, Any]) -> ResourceType:
    spec = crd["spec"]
    names = spec["names"]
    subresources = version.get("subresources") or {}
    columns = tuple(
        PrinterColumn(
            name=c.get("name", ""),
            type=c.get("type", "string"),
            json_path=c.get("jsonPath", ""),
            description=c.get("description", ""),
            priority=int(c.get("priority") or 0),
            format=c.get("format", ""),
        )
        for c in version.get("additionalPrinterColumns") or []
    )
    selectable = tuple(
        f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or [] if "jsonPath" in f
    )
    return ResourceType(
        group=spec["group"],
        version=version["name"],
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        kind=names["kind"],
        namespaced=spec.get("scope") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=frozenset(k for k in ("status", "scale") if k in subresources),
        printer_columns=columns,
        builtin=False,
        has_generation=True,
        allow_unconditional_update=False,
        selectable_fields=selectable,
        schema=(version.get("schema") or {}).get("openAPIV3Schema"),
    )


def resource_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """One type per served version."""
    return [_version_type(crd, v) for v in crd["spec"].get("versions") or [] if v.get("served")]


def storage_type(crd: Mapping[str, Any]) -> ResourceType | None:
    for version in crd["spec"].get("versions") or []:
        if version.get("storage"):
            return _version_type(crd, version)
    return None


def accepted_status(crd: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": stamp,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": stamp,
            },
        ],
        "storedVersions": [
            v["name"] for v in spec.get("versions") or [] if v.get("storage") and "name" in v
        ],
    }


def validate(crd: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Cause]:
    """The checks of apiextensions validation that a malformed CRD would hit first."""
    causes: list[Cause] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group", ""), names.get("plural", ""), names.get("kind", "")
    if not group or "." not in group:
        causes.append(
            Cause(
                "FieldValueInvalid",
                f'Invalid value: "{group}": should be a domain with at least one dot',
                "spec.group",
            )
        )
    if not plural:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.names.plural"))
    if not kind:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.names.kind"))
    name = crd["metadata"]["name"]
    if plural and group and name != f"{plural}.{group}":
        causes.append(
            Cause(
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                "metadata.name",
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            Cause(
                "FieldValueNotSupported",
                f'Unsupported value: "{spec.get("scope")}": '
                'supported values: "Cluster", "Namespaced"',
                "spec.scope",
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            Cause(
                "FieldValueRequired",
                "Required value: must have exactly one version marked as storage version",
                "spec.versions",
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            Cause(
                "FieldValueInvalid",
                "Invalid value: must have exactly one version marked as storage version",
                "spec.versions",
            )
        )
    for i, version in enumerate(versions):
        if not (version.get("schema") or {}).get("openAPIV3Schema"):
            causes.append(
                Cause(
                    "FieldValueRequired",
                    "Required value: schemas are required",
                    f"spec.versions[{i}].schema.openAPIV3Schema",
                )
            )
    if old is not None:
        old_spec = old.get("spec") or {}
        if old_spec.get("scope") != spec.get("scope"):
            causes.append(
                Cause("FieldValueInvalid", "Invalid value: field is immutable", "spec.scope")
            )
        if old_spec.get("group") != group:
            causes.append(
                Cause("FieldValueInvalid", "Invalid value: field is immutable", "spec.group")
            )
    return causes
