"""The field reference in docs/policy.md, generated from the same models as the CRDs.

Only the part between the two markers is generated; the hand-written introduction around it is
kept. A test regenerates it and fails on any difference, so the documented defaults are the
ones the operator applies.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from remediation_operator.api import field_types, openapi
from remediation_operator.api.policy import RemediationPolicySpec, RemediationPolicyStatus
from remediation_operator.api.remediation import RemediationSpec, RemediationStatus
from remediation_operator.domain import durations

BEGIN = "<!-- BEGIN GENERATED REFERENCE: `remediation-operator crds --docs`; do not edit below -->"
END = "<!-- END GENERATED REFERENCE -->"

SECTIONS: tuple[tuple[str, str, type[BaseModel]], ...] = (
    ("RemediationPolicy `spec`", "spec", RemediationPolicySpec),
    ("RemediationPolicy `status` (written by the operator)", "status", RemediationPolicyStatus),
    ("Remediation `spec`", "spec", RemediationSpec),
    ("Remediation `status` (written by the operator)", "status", RemediationStatus),
)


class MarkersMissingError(ValueError):
    """The document lacks the markers that delimit the generated part."""


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = node.get("type", "")
    if kind == "string":
        if node.get("pattern") == durations.PATTERN:
            return "duration"
        if node.get("format") == "date-time":
            return "time"
        if "enum" in node:
            return "enum"
        return "string"
    if kind == "array":
        return f"list of {_plural(_type(node.get('items', {})))}"
    if kind == "object":
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return "object (free-form)"
        if isinstance(node.get("additionalProperties"), dict):
            return f"map of {_plural(_type(node['additionalProperties']))}"
        return "object"
    return str(kind)


def _plural(kind: str) -> str:
    return {
        "object": "objects",
        "string": "strings",
        "integer": "integers",
        "enum": "enums",
        "duration": "durations",
    }.get(kind, kind)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _details(node: dict[str, Any], required: bool) -> str:
    parts = [node.get("description", "")]
    if "enum" in node:
        values = [v for v in node["enum"] if v is not None]
        parts.append("One of " + ", ".join(f"`{v}`" for v in values) + ".")
    items = node.get("items", {})
    if "enum" in items:
        parts.append("Each one of " + ", ".join(f"`{v}`" for v in items["enum"]) + ".")
    if "pattern" in node and node.get("pattern") != durations.PATTERN:
        parts.append(f"Pattern `{node['pattern']}`.")
    if "minimum" in node:
        parts.append(f"Minimum {node['minimum']}.")
    if "maximum" in node:
        parts.append(f"Maximum {node['maximum']}.")
    if "minItems" in node:
        parts.append(f"At least {node['minItems']} item(s).")
    if "maxItems" in node:
        parts.append(f"At most {node['maxItems']} items.")
    if "maxProperties" in node:
        parts.append(f"At most {node['maxProperties']} entries.")
    if node.get("pattern") == durations.PATTERN:
        parts.append(f"At most {field_types.MAX_DURATION_TEXT}.")
    elif "maxLength" in node and "enum" not in node:
        parts.append(f"At most {node['maxLength']} characters.")
    if required:
        parts.append("**Required.**")
    return " ".join(p for p in parts if p)


def _rows(node: dict[str, Any], path: str, out: list[str]) -> None:
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}"
        default = openapi.render_default(child.get(openapi.DEFAULT_KEY))
        out.append(
            f"| `{here}` | {_type(child)} | {_cell(f'`{default}`' if default else '')} |"
            f" {_cell(_details(child, name in required))} |"
        )
        if child.get("type") == "array" and "properties" in child.get("items", {}):
            _rows(child["items"], f"{here}[]", out)
        elif "properties" in child:
            _rows(child, here, out)
        elif isinstance(child.get("additionalProperties"), dict):
            _rows(child["additionalProperties"], f"{here}.<key>", out)


def render() -> str:
    """The generated reference, markers included."""
    lines = [BEGIN, ""]
    for title, root, model in SECTIONS:
        lines += [
            f"### {title}",
            "",
            "| Field | Type | Default | Description |",
            "|---|---|---|---|",
        ]
        _rows(openapi.schema(model, keep_defaults=True), root, lines)
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def update(document: str) -> str:
    """`document` with its generated part replaced by the current one."""
    start = document.find(BEGIN)
    end = document.find(END)
    if start < 0 or end < start:
        raise MarkersMissingError(f"the document must contain the lines\n{BEGIN}\nand\n{END}")
    return document[:start] + render() + document[end + len(END) :].lstrip("\n")
