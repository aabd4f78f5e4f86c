"""Structural-schema pruning, defaulting and validation of custom resources.

A real server drops fields a CRD's openAPIV3Schema does not declare (unless
`x-kubernetes-preserve-unknown-fields`), fills `default`s, and answers 422 for wrong types,
enum values, missing required fields and out-of-range numbers. An emulator that accepted
anything would let the operator write status fields a real cluster silently throws away.
CEL rules (`x-kubernetes-validations`) and `format` checks are not evaluated (see docs); when
schema errors are found in an object whose schema has CEL rules, the "<nil>" cause a real
server adds for its skipped rules is added too.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from remediation_emulator.errors import Cause

Schema = Mapping[str, Any]
_ROOT_KEEP = ("apiVersion", "kind", "metadata")


def prune_and_default(schema: Schema, obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of obj without undeclared fields, with declared defaults filled in."""
    out = _walk(schema, obj, root=True)
    assert isinstance(out, dict)
    return out


def _walk(schema: Schema, value: Any, *, root: bool = False) -> Any:
    if isinstance(value, Mapping):
        props: Mapping[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, item in value.items():
            if root and key in _ROOT_KEEP:
                out[key] = item
            elif key in props:
                out[key] = _walk(props[key], item)
            elif isinstance(additional, Mapping):
                out[key] = _walk(additional, item)
            elif keep_unknown or additional is True:
                out[key] = item
        for key, sub in props.items():
            if key not in out and "default" in sub and not (root and key in _ROOT_KEEP):
                out[key] = _walk(sub, copy.deepcopy(sub["default"]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_walk(schema["items"], item) for item in value]
    return value


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def validate(schema: Schema, obj: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    props: Mapping[str, Any] = schema.get("properties") or {}
    for key, sub in props.items():
        if key in _ROOT_KEEP:
            continue
        if key in obj:
            _check(sub, obj[key], key, causes)
    for key in schema.get("required") or []:
        if key not in obj and key not in _ROOT_KEEP:
            causes.append(Cause("FieldValueRequired", "Required value", key))
    if causes and _has_rules(schema):
        # What a real server adds when schema errors keep its CEL rules from running (the
        # emulator never runs them, but says so the same way).
        causes.append(
            Cause(
                "FieldValueInvalid",
                "Invalid value: null: some validation rules were not checked because the object "
                "was invalid; correct the existing errors to complete validation",
                "<nil>",
            )
        )
    return causes


def _has_rules(schema: Any) -> bool:
    """Whether any node of the schema carries CEL rules (`x-kubernetes-validations`)."""
    if isinstance(schema, Mapping):
        return "x-kubernetes-validations" in schema or any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return str(value)


def _type_name(value: Any) -> str:
    for name, kinds in _TYPES.items():
        if isinstance(value, kinds) and not (
            name in ("integer", "number") and isinstance(value, bool)
        ):
            return name
    return "null"


def _check(schema: Schema, value: Any, path: str, causes: list[Cause]) -> None:
    if value is None:
        if not schema.get("nullable"):
            causes.append(
                Cause(
                    "FieldValueTypeInvalid",
                    f'Invalid value: "null": {path} in body '
                    f'must be of type {schema.get("type", "object")}: "null"',
                    path,
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string") and (
        not isinstance(value, (int, str)) or isinstance(value, bool)
    ):
        causes.append(
            Cause(
                "FieldValueTypeInvalid",
                f"Invalid value: {_describe(value)}: "
                f"{path} in body must be of type integer,string: "
                f'"{_type_name(value)}"',
                path,
            )
        )
        return
    # An int-or-string goes on to the value checks below, each for the type it applies to
    # (`pattern` to the string form, `minimum` to the integer form), as kube-openapi's do.
    wanted = None if schema.get("x-kubernetes-int-or-string") else schema.get("type")
    if wanted in _TYPES:
        ok = isinstance(value, _TYPES[wanted]) and not (
            wanted in ("integer", "number") and isinstance(value, bool)
        )
        if wanted == "integer" and isinstance(value, float) and value.is_integer():
            ok = True
        if not ok:
            causes.append(
                Cause(
                    "FieldValueTypeInvalid",
                    f'Invalid value: "{_type_name(value)}": '
                    f'{path} in body must be of type {wanted}: "{_type_name(value)}"',
                    path,
                )
            )
            return
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(_describe(e) for e in enum)
        causes.append(
            Cause(
                "FieldValueNotSupported",
                f"Unsupported value: {_describe(value)}: supported values: {supported}",
                path,
            )
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    f"Invalid value: {value}: {path} in body "
                    f"should be greater than or equal to {schema['minimum']}",
                    path,
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    f"Invalid value: {value}: {path} in body "
                    f"should be less than or equal to {schema['maximum']}",
                    path,
                )
            )
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(
                Cause(
                    "FieldValueTooLong",
                    f"Too long: may not be more than {schema['maxLength']} bytes",
                    path,
                )
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    f"Invalid value: {_describe(value)}: {path} "
                    f"in body should be at least {schema['minLength']} chars long",
                    path,
                )
            )
        pattern = schema.get("pattern")
        if pattern and not re.search(pattern, value):
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    f"Invalid value: {_describe(value)}: {path} in body should match '{pattern}'",
                    path,
                )
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                Cause(
                    "FieldValueTooMany",
                    f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
                    path,
                )
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    f"Invalid value: {len(value)}: {path} in body "
                    f"should have at least {schema['minItems']} items",
                    path,
                )
            )
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _check(items, item, f"{path}[{i}]", causes)
    if isinstance(value, Mapping):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key, sub in props.items():
            if key in value:
                _check(sub, value[key], f"{path}.{key}", causes)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key, item in value.items():
                if key not in props:
                    _check(additional, item, f"{path}.{key}", causes)
        for key in schema.get("required") or []:
            if key not in value:
                causes.append(Cause("FieldValueRequired", "Required value", f"{path}.{key}"))


def unknown_fields(schema: Schema, obj: Mapping[str, Any]) -> list[str]:
    """Paths the schema does not declare (what `fieldValidation=Strict` rejects)."""
    found: list[str] = []
    _unknown(schema, obj, "", found, root=True)
    return found


def _unknown(
    schema: Schema, value: Any, path: str, found: list[str], *, root: bool = False
) -> None:
    if isinstance(value, Mapping):
        props: Mapping[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or additional is True:
            return
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if root and key in _ROOT_KEEP:
                continue
            if key in props:
                _unknown(props[key], item, child, found)
            elif isinstance(additional, Mapping):
                _unknown(additional, item, child, found)
            else:
                found.append(child)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _unknown(schema["items"], item, f"{path}[{i}]", found)
