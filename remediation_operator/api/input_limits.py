"""Limits on a policy's shape, checked before any parsing (issue 24, D52).

Schema validation, the operator's own model and kopf all walk a policy recursively; a policy
nested 900 levels deep (a `jobTemplate` is free-form) raised a RecursionError inside kopf, and
check-policy printed a traceback at depth 3,000. So a policy's spec is walked once without
recursion and refused, with the field path, when it nests deeper than `MAX_DEPTH`, holds more
than `MAX_VALUES` values or a string longer than `MAX_STRING`. The schema's own list bounds
(faults, matches, budgets...) then apply as usual. The API server itself accepts objects up to
1.5 MiB (etcd) nested up to 10,000 levels, which the operator process can read
(handlers.process raises Python's recursion limit for it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from remediation_operator.api.field_errors import FieldError

MAX_DEPTH = 32
"""Levels of mappings and lists in a spec: a Job template inside a policy needs about 15."""
MAX_VALUES = 20_000
"""Values (mappings, lists, scalars) in a spec."""
MAX_STRING = 64 * 1024
"""Characters in any one string of a spec (a Job template's script, for instance)."""
MAX_FILE_BYTES = 3 * 1024 * 1024
"""check-policy reads files up to the API server's request limit (3 MiB)."""
_SHOWN_LEVELS = 6
RECURSION_LIMIT = 40_000
"""Python frames allowed, so that the JSON decoder and kopf's copies of an object can follow
the API server's own nesting limit (10,000 levels; a few frames per level) and our check
here gets to refuse it with a field path instead of a RecursionError."""


def allow_deep_documents() -> None:
    """Raise the interpreter's recursion limit to `RECURSION_LIMIT` (the main thread's 8 MiB
    stack holds it: tests/hostile/test_input_limits.py reads 10,000 levels)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))


def _path(prefix: str, parts: tuple[str | int, ...]) -> str:
    shown = prefix
    for part in parts[:_SHOWN_LEVELS]:
        shown += f"[{part}]" if isinstance(part, int) else f".{part}"
    return shown + ("..." if len(parts) > _SHOWN_LEVELS else "")


def check(value: Any, prefix: str) -> list[FieldError]:
    """The first limit `value` (found at `prefix`) breaks, as a field error; empty: none."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    seen = 0
    while stack:
        item, parts = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return [FieldError(prefix, f"holds more than {MAX_VALUES} values; refused unread")]
        if len(parts) > MAX_DEPTH:
            return [
                FieldError(
                    _path(prefix, parts[:MAX_DEPTH]),
                    f"is nested more than {MAX_DEPTH} levels deep; refused unread",
                )
            ]
        if isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str) and len(key) > MAX_STRING:
                    return [FieldError(_path(prefix, parts), f"has a key of {len(key)} characters")]
                stack.append((child, (*parts, str(key))))
        elif isinstance(item, list | tuple):
            stack.extend((child, (*parts, i)) for i, child in enumerate(item))
        elif isinstance(item, str) and len(item) > MAX_STRING:
            return [
                FieldError(
                    _path(prefix, parts),
                    f"is {len(item)} characters long; at most {MAX_STRING} are accepted",
                )
            ]
    return []
