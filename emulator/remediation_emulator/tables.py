"""Server-side printing: the `Table` kubectl asks for with `Accept: ...;as=Table;g=meta.k8s.io`.

For custom resources the columns come from the CRD's `additionalPrinterColumns`, evaluated with
the JSONPath subset CRDs use (`.a.b`, `.a[0]`, `.a[*]`, `.a[?(@.k=="v")].b`); `date` columns
are rendered as ages ("5m") by the server, as the real CRD table convertor does. Built-in
types get the columns kubectl users know (nodes: Status/Roles/Age/Version; pods:
Ready/Status/Restarts/Age).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from remediation_emulator.resources import PrinterColumn, ResourceType

Obj = dict[str, Any]
NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace. Is required when creating resources.",
    "priority": 0,
}
# A field name may contain escaped dots (`.metadata.labels.node\.kubernetes\.io/zone`), as in
# the JSONPath of kubectl and the apiserver's printer columns (k8s.io/client-go/util/jsonpath).
_TOKEN = re.compile(
    r"\.((?:[A-Za-z0-9_\-/]|\\\.)+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]"
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """All values at `path` (the CRD printer-column subset of JSONPath)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    values = [obj]
    position = 0
    while position < len(path):
        match = _TOKEN.match(path, position)
        if match is None:
            return []
        position = match.end()
        nxt: list[Any] = []
        for value in values:
            if match.group(1) is not None:
                field = match.group(1).replace("\\.", ".")
                if isinstance(value, dict) and field in value:
                    nxt.append(value[field])
            elif match.group(2) is not None:
                if isinstance(value, list):
                    if match.group(2) == "*":
                        nxt.extend(value)
                    elif int(match.group(2)) < len(value):
                        nxt.append(value[int(match.group(2))])
            elif isinstance(value, list):
                key, wanted = match.group(3), match.group(4)
                nxt.extend(
                    item
                    for item in value
                    if isinstance(item, dict) and str(_dig(item, key)) == wanted
                )
        values = nxt
    return values


def _dig(obj: Obj, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)  # type: ignore[assignment]
    return obj


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        rest = days % 365
        return f"{days // 365}y" if rest == 0 else f"{days // 365}y{rest}d"
    return f"{hours // (24 * 365)}y"


def _age(value: Any, now: datetime) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((now - moment).total_seconds())


def _cell(column: PrinterColumn, obj: Obj, now: datetime) -> Any:
    found = jsonpath(obj, column.json_path)
    if not found:
        return None
    value = found[0]
    if column.type == "date":
        return _age(value, now)
    if column.type == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if column.type == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _node_status(obj: Obj) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = "Unknown"
    if ready is not None:
        status = {"True": "Ready", "False": "NotReady"}.get(ready.get("status"), "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(obj: Obj) -> str:
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    return ",".join(r for r in roles if r) or "<none>"


def _pod_ready(obj: Obj) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(obj: Obj) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    return str(status.get("reason") or status.get("phase") or "Unknown")


def _restarts(obj: Obj) -> int:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


Computed = Callable[[Obj, datetime], Any]


def _builtin_columns(rtype: ResourceType) -> list[tuple[dict[str, Any], Computed]] | None:
    def column(name: str, type_: str, priority: int = 0) -> dict[str, Any]:
        return {
            "name": name,
            "type": type_,
            "format": "",
            "description": name,
            "priority": priority,
        }

    def created(o: Obj, now: datetime) -> Any:
        return _age(o["metadata"].get("creationTimestamp"), now)

    if rtype.key == ("", "nodes"):
        return [
            (column("Status", "string"), lambda o, _: _node_status(o)),
            (column("Roles", "string"), lambda o, _: _node_roles(o)),
            (column("Age", "string"), created),
            (
                column("Version", "string"),
                lambda o, _: ((o.get("status") or {}).get("nodeInfo") or {}).get(
                    "kubeletVersion", ""
                ),
            ),
            (
                column("Internal-IP", "string", 1),
                lambda o, _: next(
                    (
                        a.get("address")
                        for a in (o.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"
                    ),
                    "<none>",
                ),
            ),
        ]
    if rtype.key == ("", "pods"):
        return [
            (column("Ready", "string"), lambda o, _: _pod_ready(o)),
            (column("Status", "string"), lambda o, _: _pod_status(o)),
            (column("Restarts", "string"), lambda o, _: str(_restarts(o))),
            (column("Age", "string"), created),
            (
                column("IP", "string", 1),
                lambda o, _: (o.get("status") or {}).get("podIP") or "<none>",
            ),
            (
                column("Node", "string", 1),
                lambda o, _: (o.get("spec") or {}).get("nodeName") or "<none>",
            ),
        ]
    return None


def render(
    rtype: ResourceType,
    objects: list[Obj],
    now: datetime,
    *,
    resource_version: str,
    continue_token: str = "",
    include_object: str = "Metadata",
) -> Obj:
    """A meta.k8s.io/v1 Table of objects (one row per object)."""
    builtin = _builtin_columns(rtype)
    definitions: list[dict[str, Any]] = [NAME_COLUMN]
    getters: list[Computed] = []
    if builtin is not None:
        for definition, getter in builtin:
            definitions.append(definition)
            getters.append(getter)
    else:
        columns = list(rtype.printer_columns) or [
            PrinterColumn("Age", "date", ".metadata.creationTimestamp")
        ]
        for col in columns:
            definitions.append(
                {
                    "name": col.name,
                    # Cells of a date column are ages either way; the real built-in printers
                    # declare them "string", the CRD table convertor keeps the column's "date".
                    "type": "string" if col.type == "date" and rtype.builtin else col.type,
                    "format": col.format,
                    "description": col.description or col.name,
                    "priority": col.priority,
                }
            )
            getters.append(lambda o, now, c=col: _cell(c, o, now))  # type: ignore[misc]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [obj["metadata"]["name"], *(g(obj, now) for g in getters)]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
