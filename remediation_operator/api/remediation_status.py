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
    RemediationCondition,
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
from remediation_operator.domain import durations
from remediation_operator.domain import remediation as domain


class InvalidStatusError(ValueError):
    """A Remediation whose spec or status cannot be read; `errors` names each field."""

    def __init__(self, name: str, errors: list[FieldError]) -> None:
        self.name = name
        self.errors = errors
        shown = "; ".join(str(e) for e in errors)
        super().__init__(f"Remediation {name or '(unnamed)'} cannot be read: {shown}")


def conditions(
    state: domain.RemediationState, generation: int | None = None
) -> list[RemediationCondition]:
    """Ready, Reconciling and Stalled for `state`, as kstatus and `kubectl wait` read them.

    kstatus (sigs.k8s.io/cli-utils/pkg/kstatus, used by Argo CD, Flux and kpt) reports a
    custom resource InProgress while `Reconciling` is True, Failed while `Stalled` is True, and
    Current otherwise; `Ready` is the condition most tools and people wait on. So: a running
    incident is Reconciling; a Succeeded or Cancelled one is Ready (over, nothing left to do:
    `status.phase` tells which); a Failed one is Stalled (it needs a human). Each condition
    changes status only when the incident starts or ends, so `lastTransitionTime` is the start
    or the end, derived from the state: the conditions need no memory of their own.
    """
    phase = state.phase
    over = phase in domain.TERMINAL_PHASES
    ended = state.finished_at or state.started_at
    ready = phase in (domain.Phase.Succeeded, domain.Phase.Cancelled)
    stalled = phase == domain.Phase.Failed
    values = (
        ("Ready", ready, ended if ready else state.started_at),
        ("Reconciling", not over, ended if over else state.started_at),
        ("Stalled", stalled, ended if stalled else state.started_at),
    )
    return [
        RemediationCondition(
            type=kind,
            status="True" if holds else "False",
            reason=state.reason,
            message=state.message,
            last_transition_time=format_time(since),
            observed_generation=generation,
        )
        for kind, holds, since in values
    ]


def to_status(state: domain.RemediationState, generation: int | None = None) -> dict[str, Any]:
    """The status a Remediation should show for `state` (camelCase, JSON-ready);
    `generation` is the object's `metadata.generation`, for the conditions."""
    return RemediationStatus(
        phase=state.phase,
        reason=state.reason,
        message=state.message,
        fault=state.fault,
        condition=_condition_status(state.condition),
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
                location=record.location or None,
                timeout=None if record.timeout is None else durations.format(record.timeout),
                restarted=list(record.restarted) or None,
            )
            for record in state.steps
        ],
        dry_run=state.dry_run,
        step_outcome=state.step_outcome,
        repeat_offender=state.repeat_offender,
        evidence_at_step_end=_condition_status(state.evidence_at_step_end),
        evidence_seen_at=format_optional(state.evidence_seen_at),
        node_created_at=format_optional(state.node_created_at),
        steps_dropped=state.steps_dropped or None,
        waiting=list(state.waiting),
        conditions=conditions(state, generation),
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


def _condition_status(condition: domain.ObservedCondition | None) -> ObservedCondition | None:
    if condition is None:
        return None
    return ObservedCondition(
        type=condition.type,
        status=condition.status,
        reason=condition.reason,
        message=condition.message,
        last_transition_time=format_optional(condition.last_transition_time),
        last_heartbeat_time=format_optional(condition.last_heartbeat_time),
    )


def _condition_state(condition: ObservedCondition | None) -> domain.ObservedCondition | None:
    if condition is None:
        return None
    return domain.ObservedCondition(
        type=condition.type,
        status=condition.status,
        reason=condition.reason,
        message=condition.message,
        last_transition_time=parse_optional(condition.last_transition_time),
        last_heartbeat_time=parse_optional(condition.last_heartbeat_time),
    )


def from_status(
    status: Mapping[str, Any], *, name: str, node: str, policy: str
) -> domain.RemediationState:
    """Rebuild the state from a status written by `to_status`; raises InvalidStatusError."""
    try:
        model = RemediationStatus.model_validate(status, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidStatusError(name, field_errors.from_validation_error(exc, "status")) from None
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
        condition=_condition_state(model.condition),
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
                location=record.location or "",
                timeout=None if record.timeout is None else durations.parse(record.timeout),
                restarted=tuple(record.restarted or ()),
            )
            for record in model.steps
        ),
        dry_run=model.dry_run,
        step_outcome=model.step_outcome,
        repeat_offender=model.repeat_offender,
        evidence_at_step_end=_condition_state(model.evidence_at_step_end),
        evidence_seen_at=parse_optional(model.evidence_seen_at),
        node_created_at=parse_optional(model.node_created_at),
        steps_dropped=model.steps_dropped or 0,
        waiting=tuple(model.waiting),
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
