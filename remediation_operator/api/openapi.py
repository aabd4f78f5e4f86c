"""Turn a pydantic model's JSON schema into a structural OpenAPI v3 schema for a CRD.

The kube-apiserver accepts only "structural" schemas: every node typed, no `$ref`, no
`anyOf`/`oneOf` except the int-or-string form, no `type`/`description`/`nullable` inside
junctors, and `x-kubernetes-preserve-unknown-fields` for opaque objects. pydantic writes
ordinary JSON Schema (`$defs`/`$ref`, `anyOf [T, null]` for optionals, `additionalProperties:
false` for forbidden extras, `title`s), so this module inlines and rewrites it. See
https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

DEFAULT_KEY = "default"
VALIDATIONS_KEY = "x-kubernetes-validations"


class SchemaError(ValueError):
    """The model uses a shape a structural schema cannot express."""


def schema(model: type[BaseModel], *, keep_defaults: bool = False) -> Schema:
    """The structural schema of `model` (camelCase field names).

    Defaults are not part of the CRD (the operator applies them, so a later version's default
    reaches existing objects); they are appended to descriptions as "Default: ...". With
    `keep_defaults` they stay under "default" instead, for the documentation generator.
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Schema] = raw.pop("$defs", {})
    return _convert(raw, defs, keep_defaults)


def render_default(value: Any) -> str | None:
    """A default as a user would write it in YAML, or None when it says nothing useful."""
    if value is None or value == [] or value == {} or isinstance(value, dict):
        return None
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _key_length_rule(names: Schema) -> Schema:
    low, high = names.get("minLength", 0), names.get("maxLength")
    if set(names) - {"minLength", "maxLength"} or high is None:
        raise SchemaError(f"cannot express propertyNames {json.dumps(names)} structurally")
    return {
        "rule": f"self.all(k, size(k) >= {low} && size(k) <= {high})",
        "message": f"keys must be {low} to {high} characters long",
    }


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    ref = node.get("$ref")
    if ref is None:
        return dict(node)
    name = ref.rsplit("/", 1)[-1]
    rest = {k: v for k, v in node.items() if k != "$ref"}
    return {**defs[name], **rest}


def _convert(node: Schema, defs: dict[str, Schema], keep_defaults: bool) -> Schema:
    node = _resolve(node, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        node = {**_resolve(inner, defs), **node}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) != 1 or len(options) == len(node["anyOf"]):
            raise SchemaError(f"cannot express {json.dumps(node['anyOf'])} structurally")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(options[0], defs), **rest, "nullable": True}
        return _convert(node, defs, keep_defaults)

    out: Schema = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "additionalProperties" and value is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
            continue
        if key == "propertyNames":
            # Not allowed in a structural schema: the same bounds on a map's keys, as CEL.
            out.setdefault(VALIDATIONS_KEY, []).append(_key_length_rule(value))
            continue
        if key == VALIDATIONS_KEY:
            out[key] = [*out.get(key, []), *value]
            continue
        if key == "properties":
            out[key] = {name: _convert(child, defs, keep_defaults) for name, child in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _convert(value, defs, keep_defaults)
        elif key == "description":
            out[key] = " ".join(str(value).split())
        else:
            out[key] = value

    if out.get("type") == "string" and "enum" in out and "maxLength" not in out:
        # The longest value, so the API server's CEL cost estimate sees a short string (an
        # unbounded one makes rules over lists of enums cost "more than 100x" the budget).
        out["maxLength"] = max(len(v) for v in out["enum"] if isinstance(v, str))
    if out.get("nullable") and "enum" in out and None not in out["enum"]:
        # The API server checks `enum` even on a null value: go-openapi's (and kube-openapi's)
        # SchemaValidator.Validate runs the type and the common (enum) validators for nil data.
        # So a nullable enum must list null itself, or a status with no step yet is refused.
        # kube-rs/kube#1821 is the same problem.
        out["enum"] = [*out["enum"], None]
    if out.get("x-kubernetes-preserve-unknown-fields") and out.get("type") is None:
        out["type"] = "object"
    if DEFAULT_KEY in out and not keep_defaults:
        shown = render_default(out.pop(DEFAULT_KEY))
        if shown is not None:
            text = out.get("description", "")
            out["description"] = f"{text} Default: {shown}.".strip()
    return out
