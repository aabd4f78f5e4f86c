"""The circuit breakers' state <-> the policy status' `circuit` map and `circuitState` column.

The breaker's memory (open since when, healthy since when) must survive a restart, or a
restarted operator would close an open breaker early; so it is persisted in the policy status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from remediation_operator.api import field_errors
from remediation_operator.api.field_errors import FieldError
from remediation_operator.api.policy import BreakerStatus
from remediation_operator.api.timestamps import format_optional, parse_optional
from remediation_operator.domain.fleet import BreakerState


class InvalidBreakerStatusError(ValueError):
    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


def to_status(breakers: Mapping[str, BreakerState]) -> dict[str, Any]:
    """`{"circuit": {...}, "circuitState": "Open"|"Closed"}` to merge into the policy status."""
    circuit = {
        group: BreakerStatus(
            open=state.open,
            opened_at=format_optional(state.opened_at),
            healthy_since=format_optional(state.healthy_since),
        ).model_dump(mode="json", by_alias=True)
        for group, state in sorted(breakers.items())
    }
    return {"circuit": circuit, "circuitState": circuit_state(breakers)}


def circuit_state(breakers: Mapping[str, BreakerState]) -> Literal["Open", "Closed"]:
    return "Open" if any(state.open for state in breakers.values()) else "Closed"


def from_status(status: Mapping[str, Any] | None) -> dict[str, BreakerState]:
    """The breakers persisted in a policy status (empty when there is none yet)."""
    raw = (status or {}).get("circuit") or {}
    if not isinstance(raw, Mapping):
        raise InvalidBreakerStatusError([FieldError("status.circuit", "must be a mapping")])
    result: dict[str, BreakerState] = {}
    errors: list[FieldError] = []
    for group, value in raw.items():
        path = f"status.circuit[{group!r}]"
        try:
            model = BreakerStatus.model_validate(value, by_alias=True, by_name=False)
            result[str(group)] = BreakerState(
                open=model.open,
                opened_at=parse_optional(model.opened_at),
                healthy_since=parse_optional(model.healthy_since),
            )
        except ValidationError as exc:
            errors += field_errors.from_validation_error(exc, path)
    if errors:
        raise InvalidBreakerStatusError(errors)
    return result
