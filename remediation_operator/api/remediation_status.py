"""A Remediation's status dict <-> `domain.remediation.RemediationState`, both directions.

The engine writes `to_status(state)` as the status and rebuilds the state with `from_object`
after a restart; the round trip is exact (tested), which is what makes crashes harmless.
Times are written as RFC 3339 UTC with a `Z` (fractional seconds only when present).
`to_status` writes every field, unset ones as null, so that a merge patch clears stale values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from remediation_operator.api import field_errors, resources
from remediation_operator.api.field_errors import FieldError
from remediation_operator.api.remediation import (
    ObservedCondition,
    RemediationSpec,
    RemediationStatus,
    StepRecord,
)
from remediation_operator.api.timestamps import (
    format_optional,
    format_time,
    parse_optional,
    parse_time,
)
from remediation_operator.domain import remediation as domain


class InvalidStatusError(ValueError):
    """A Remediation whose spec or status cannot be read; `errors` names each field."""

    def __init__(self, name: str, errors: list[FieldError]) -> None:
        self.name = name
        self.errors = errors
        shown = "; ".join(str(e) for e in errors)
        super().__init__(f"Remediation {name or '(unnamed)'} cannot be read: {shown}")


def to_status(state: domain.RemediationState) -> dict[str, Any]:
    """The status a Remediation should show for `state` (camelCase, JSON-ready)."""
    condition = state.condition
    return RemediationStatus(
        phase=state.phase,
        reason=state.reason,
        message=state.message,
        fault=state.fault,
        condition=None
        if condition is None
        else ObservedCondition(
            type=condition.type,
            status=condition.status,
            reason=condition.reason,
            message=condition.message,
            last_transition_time=format_optional(condition.last_transition_time),
            last_heartbeat_time=format_optional(condition.last_heartbeat_time),
        ),
        started_at=format_time(state.started_at),
        step_index=state.step_index,
        step=state.step,
        attempt=state.attempt,
        step_started_at=format_optional(state.step_started_at),
        step_finished_at=format_optional(state.step_finished_at),
        next_check_at=format_optional(state.next_check_at),
        cordoned_by_us=state.cordoned_by_us,
        boot_id_at_step_start=state.boot_id_at_step_start,
        healthy_since=format_optional(state.healthy_since),
        finished_at=format_optional(state.finished_at),
        steps=[
            StepRecord(
                action=record.action,
                attempt=record.attempt,
                started_at=format_time(record.started_at),
                finished_at=format_optional(record.finished_at),
                outcome=record.outcome,
                reason=record.reason,
                message=record.message,
            )
            for record in state.steps
        ],
        dry_run=state.dry_run,
        step_outcome=state.step_outcome,
        repeat_offender=state.repeat_offender,
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


def from_status(
    status: Mapping[str, Any], *, name: str, node: str, policy: str
) -> domain.RemediationState:
    """Rebuild the state from a status written by `to_status`; raises InvalidStatusError."""
    try:
        model = RemediationStatus.model_validate(status, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidStatusError(name, field_errors.from_validation_error(exc, "status")) from None
    condition = model.condition
    started_at = parse_time(model.started_at)
    return domain.RemediationState(
        name=name,
        node=node,
        policy=policy,
        fault=model.fault,
        phase=model.phase,
        reason=model.reason,
        message=model.message,
        started_at=started_at,
        condition=None
        if condition is None
        else domain.ObservedCondition(
            type=condition.type,
            status=condition.status,
            reason=condition.reason,
            message=condition.message,
            last_transition_time=parse_optional(condition.last_transition_time),
            last_heartbeat_time=parse_optional(condition.last_heartbeat_time),
        ),
        step_index=model.step_index,
        step=model.step,
        attempt=model.attempt,
        step_started_at=parse_optional(model.step_started_at),
        step_finished_at=parse_optional(model.step_finished_at),
        next_check_at=parse_optional(model.next_check_at),
        cordoned_by_us=model.cordoned_by_us,
        boot_id_at_step_start=model.boot_id_at_step_start,
        healthy_since=parse_optional(model.healthy_since),
        finished_at=parse_optional(model.finished_at),
        steps=tuple(
            domain.StepRecord(
                action=record.action,
                attempt=record.attempt,
                started_at=parse_time(record.started_at),
                reason=record.reason,
                message=record.message,
                finished_at=parse_optional(record.finished_at),
                outcome=record.outcome,
            )
            for record in model.steps
        ),
        dry_run=model.dry_run,
        step_outcome=model.step_outcome,
        repeat_offender=model.repeat_offender,
    )


def from_object(obj: Mapping[str, Any]) -> domain.RemediationState | None:
    """A whole Remediation object -> its state; None when it has no status yet."""
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name") or "")
    try:
        spec = RemediationSpec.model_validate(obj.get("spec"), by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidStatusError(name, field_errors.from_validation_error(exc, "spec")) from None
    status = obj.get("status")
    if not status:
        return None
    return from_status(status, name=name, node=spec.node_name, policy=spec.policy_name)


def new_object(state: domain.RemediationState) -> dict[str, Any]:
    """The Remediation to create for a new incident (status is written separately)."""
    return {
        "apiVersion": resources.API_VERSION,
        "kind": resources.REMEDIATION.kind,
        "metadata": {"name": state.name},
        "spec": RemediationSpec(node_name=state.node, policy_name=state.policy).model_dump(
            mode="json", by_alias=True
        ),
    }
