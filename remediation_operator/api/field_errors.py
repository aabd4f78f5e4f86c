"""Validation errors that name the field: `spec.faults[0].ladder[2].action: ...`.

Schema errors (from pydantic) and semantic errors (from policy_rules) end up in one list of
FieldError, so `check-policy`, the policy's Accepted condition and the logs all say the same.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError


@dataclass(frozen=True)
class FieldError:
    path: str
    """Where, as `spec.faults[0].ladder[2].action`."""
    message: str
    """What is wrong, and where possible what would be right."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def join(prefix: str, loc: Sequence[int | str]) -> str:
    """`spec` + ("faults", 0, "tolerate") -> `spec.faults[0].tolerate`."""
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _known_fields(schema: dict[str, Any], loc: Sequence[int | str]) -> list[str]:
    """The field names allowed next to `loc`'s last element, walking a structural schema."""
    node: dict[str, Any] | None = schema
    for part in loc[:-1]:
        if node is None:
            return []
        if isinstance(part, int):
            node = node.get("items")
        else:
            node = node.get("properties", {}).get(part) or node.get("additionalProperties")
    return sorted((node or {}).get("properties", {}))


def _message(error: Any, schema: dict[str, Any] | None) -> str:
    kind: str = error["type"]
    loc = error["loc"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        known = _known_fields(schema, loc) if schema else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if known and not close:
            hint = f"; known fields: {', '.join(known)}"
        return f"unknown field{hint}"
    message: str = error["msg"]
    if message.startswith("Value error, "):
        return message.removeprefix("Value error, ")
    if message.startswith("Input should be"):
        return f"{error['input']!r} is not valid: it should be" + message.removeprefix(
            "Input should be"
        )
    if message.startswith("Assertion failed, "):
        return message.removeprefix("Assertion failed, ")
    return message[:1].lower() + message[1:]


def from_validation_error(
    exc: ValidationError, prefix: str, schema: dict[str, Any] | None = None
) -> list[FieldError]:
    """One FieldError per pydantic error, with camelCase paths under `prefix`.

    `schema` (the structural schema of the validated model) lets unknown fields suggest the
    field the author probably meant.
    """
    return [
        FieldError(join(prefix, error["loc"]), _message(error, schema))
        for error in exc.errors(include_url=False)
    ]
