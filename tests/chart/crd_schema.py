"""A CRD's structural OpenAPI schema as a JSON Schema that check-jsonschema can apply.

The API server validates custom resources against the CRD's OpenAPI v3 schema, which is close
to JSON Schema but not the same: `nullable`, `x-kubernetes-preserve-unknown-fields`, and
unknown fields that `kubectl apply` rejects (server-side field validation Strict, its default)
where plain JSON Schema would accept them. This module bridges the two so that example and
rendered policies are checked offline as the API server would check them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def strict(node: Any) -> Any:
    """An OpenAPI v3 (structural CRD) schema node as JSON Schema, with strict field checks.

    `nullable` becomes a "null" type; an object with `properties` and without
    `x-kubernetes-preserve-unknown-fields` rejects unknown fields, as `kubectl apply` does by
    default (server-side field validation Strict). Other `x-kubernetes-*` keys are annotations
    to JSON Schema and are left as they are; CEL rules (`x-kubernetes-validations`) are not
    evaluated here.
    """
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable") is True:
        if "type" in out:
            out["type"] = [out["type"], "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    if (
        "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in node
    ):
        out["additionalProperties"] = False
    return out


def for_resource(crd: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """The JSON Schema (draft 7) a whole custom resource of `crd` must satisfy."""
    spec = crd["spec"]
    version = next(v for v in spec["versions"] if f"{spec['group']}/{v['name']}" == api_version)
    schema: dict[str, Any] = strict(version["schema"]["openAPIV3Schema"])
    properties = dict(schema.get("properties", {}))
    properties["apiVersion"] = {"const": api_version}
    properties["kind"] = {"const": spec["names"]["kind"]}
    properties["metadata"] = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"},
        },
    }
    if spec.get("scope") == "Cluster":
        properties["metadata"]["not"] = {"required": ["namespace"]}
    required = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"{spec['names']['kind']} ({api_version})",
        **schema,
        "properties": properties,
        "required": required,
    }
