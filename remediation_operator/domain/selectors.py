"""Kubernetes label selectors (matchLabels + matchExpressions) evaluated on plain dicts.

The policy's `nodeSelector` uses the same semantics as every other Kubernetes selector, so a
user can test it with `kubectl get nodes -l ...` and get the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator is Operator.EXISTS:
            return self.key in labels
        if self.operator is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator is Operator.IN:
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """An empty selector selects everything, as in Kubernetes."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )
