"""The CRD -> JSON Schema bridge keeps the API server's meaning (tests/chart/crd_schema.py)."""

from __future__ import annotations

from typing import Any

from tests.chart import crd_schema


def test_nullable_becomes_a_null_type() -> None:
    assert crd_schema.strict({"type": "string", "nullable": True}) == {"type": ["string", "null"]}
    int_or_string = {"anyOf": [{"type": "integer"}, {"type": "string"}], "nullable": True}
    assert crd_schema.strict(int_or_string)["anyOf"][-1] == {"type": "null"}


def test_objects_reject_unknown_fields_unless_they_preserve_them() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert crd_schema.strict(closed)["additionalProperties"] is False
    open_ = {**closed, "x-kubernetes-preserve-unknown-fields": True}
    assert "additionalProperties" not in crd_schema.strict(open_)
    a_map = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert crd_schema.strict(a_map) == a_map
    nested = {"type": "object", "properties": {"inner": closed}}
    assert crd_schema.strict(nested)["properties"]["inner"]["additionalProperties"] is False


def _crd(scope: str) -> dict[str, Any]:
    return {
        "spec": {
            "group": "example.io",
            "scope": scope,
            "names": {"kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {"spec": {"type": "object"}},
                        }
                    },
                }
            ],
        }
    }


def test_a_resource_schema_pins_api_version_kind_and_scope() -> None:
    schema = crd_schema.for_resource(_crd("Cluster"), "example.io/v1")
    assert schema["properties"]["apiVersion"] == {"const": "example.io/v1"}
    assert schema["properties"]["kind"] == {"const": "Widget"}
    assert schema["required"] == ["apiVersion", "kind", "metadata", "spec"]
    assert schema["properties"]["metadata"]["not"] == {"required": ["namespace"]}
    assert schema["additionalProperties"] is False
    namespaced = crd_schema.for_resource(_crd("Namespaced"), "example.io/v1")
    assert "not" not in namespaced["properties"]["metadata"]
