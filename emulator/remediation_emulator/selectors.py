"""Label and field selectors, parsed from query strings and PDB specs, evaluated on objects.

Parsing follows k8s.io/apimachinery/pkg/labels and pkg/fields: `=`, `==`, `!=`, `in`, `notin`,
`key` (exists) and `!key` for labels; `=`, `==`, `!=` for fields, and only the fields a type
declares as selectable (anything else is a 400 "field label not supported", as on the real
server).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remediation_emulator import errors

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        # "!=" and "notin" match objects without the key, as in Kubernetes.
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; empty selects everything, `nothing` selects nothing."""

    requirements: tuple[LabelRequirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        present = labels or {}
        return all(r.matches(present) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.nothing


EVERYTHING = LabelSelector()


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\(([^)]*)\)\s*$")


def parse_labels(text: str | None) -> LabelSelector:
    """Parse `labelSelector=`; a malformed selector is a 400 naming the offending term."""
    if not text or not text.strip():
        return EVERYTHING
    requirements = []
    for raw in _split_top_level(text):
        term = raw.strip()
        if not term:
            raise errors.bad_request(f"unable to parse requirement: found '', in selector {text!r}")
        match = _SET_RE.match(term)
        if match:
            key, op, values = match.group(1), match.group(2), match.group(3)
            items = frozenset(v.strip() for v in values.split(",") if v.strip())
            requirements.append(LabelRequirement(_check_key(key, text), op, items))
            continue
        for symbol, op in (("!=", "!="), ("==", "="), ("=", "=")):
            if symbol in term:
                key, value = term.split(symbol, 1)
                requirements.append(
                    LabelRequirement(_check_key(key.strip(), text), op, frozenset({value.strip()}))
                )
                break
        else:
            if term.startswith("!"):
                requirements.append(LabelRequirement(_check_key(term[1:].strip(), text), "!"))
            else:
                requirements.append(LabelRequirement(_check_key(term, text), "exists"))
    return LabelSelector(tuple(requirements))


def _check_key(key: str, text: str) -> str:
    if not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise errors.bad_request(
            f"unable to parse requirement: invalid label key {key!r} in selector {text!r}"
        )
    return key


def from_spec(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels + matchExpressions).

    As in metav1.LabelSelectorAsSelector: a nil selector selects nothing, an empty one
    selects everything.
    """
    if selector is None:
        return LabelSelector(nothing=True)
    requirements = [
        LabelRequirement(k, "=", frozenset({str(v)}))
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise errors.bad_request(
                f"{expr.get('operator')!r} is not a valid label selector operator"
            )
        requirements.append(LabelRequirement(expr["key"], op, frozenset(expr.get("values") or [])))
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        actual = field_value(obj, self.path)
        return (actual != self.value) if self.negate else (actual == self.value)


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    def exact(self, path: str) -> str | None:
        """The value required for `path` by an `=` term, for index look-ups."""
        for r in self.requirements:
            if r.path == path and not r.negate:
                return r.value
        return None

    @property
    def empty(self) -> bool:
        return not self.requirements


NO_FIELDS = FieldSelector()


def parse_fields(text: str | None, selectable: tuple[str, ...]) -> FieldSelector:
    """Parse `fieldSelector=`; unsupported fields are a 400 as on the real server."""
    if not text or not text.strip():
        return NO_FIELDS
    allowed = {"metadata.name", "metadata.namespace", *selectable}
    requirements = []
    for raw in text.split(","):
        term = raw.strip()
        symbol = next((s for s in ("!=", "==", "=") if s in term), None)
        if symbol is None:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        path, value = (part.strip() for part in term.split(symbol, 1))
        if path not in allowed:
            raise errors.bad_request(f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, value, symbol == "!="))
    return FieldSelector(tuple(requirements))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares to, converted like the real field label functions."""
    if path == "source":  # events: source.component
        node: Any = (obj.get("source") or {}).get("component", "")
    else:
        node = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
            if node is None:
                break
    if node is None:
        # Unset booleans read as "false" (spec.unschedulable, spec.hostNetwork); others as "".
        return "false" if path in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)
