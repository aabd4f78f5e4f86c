"""RemediationPolicy objects (dicts as read from the API or YAML) -> `domain.policy.Policy`.

Validation happens in two passes, and both report every error they find, each naming the
field: the schema (types, enums, formats, unknown fields; pydantic collects them all), then,
when the schema passed, the semantic rules of `policy_rules`. The domain never sees a policy
that failed either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from pydantic import ValidationError

from remediation_operator.api import (
    field_errors,
    input_limits,
    openapi,
    policy_rules,
    resources,
    timestamps,
)
from remediation_operator.api.field_errors import FieldError
from remediation_operator.api.policy import (
    Actions,
    Budget,
    CircuitBreaker,
    ConditionMatch,
    Diagnostics,
    Drain,
    ExecutorAction,
    Fault,
    LabelSelector,
    LadderStep,
    RemediationPolicySpec,
    Validation,
)
from remediation_operator.domain import durations, selectors
from remediation_operator.domain import policy as domain
from remediation_operator.domain.policy import OnExhausted, OnPDBBlocked, WhenMissing

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""What the API server accepts as a cluster-scoped object's name."""


class InvalidPolicyError(ValueError):
    """A policy that failed validation; `errors` lists every problem found."""

    def __init__(self, name: str, errors: list[FieldError]) -> None:
        self.name = name
        self.errors = errors
        shown = "; ".join(str(e) for e in errors)
        super().__init__(f"RemediationPolicy {name or '(unnamed)'} is invalid: {shown}")


@cache
def _spec_schema() -> dict[str, Any]:
    return openapi.schema(RemediationPolicySpec)


def _check_spec(spec: Any, prefix: str) -> tuple[RemediationPolicySpec | None, list[FieldError]]:
    if not isinstance(spec, Mapping):
        return None, [FieldError(prefix, "must be a mapping of policy fields")]
    too_large = input_limits.check(spec, prefix)  # before anything walks it recursively
    if too_large:
        return None, too_large
    try:
        model = RemediationPolicySpec.model_validate(spec, by_alias=True, by_name=False)
    except ValidationError as exc:
        return None, field_errors.from_validation_error(exc, prefix, _spec_schema())
    errors = policy_rules.check(model, prefix)
    return (None if errors else model), errors


def _envelope(obj: Any) -> list[FieldError]:
    if not isinstance(obj, Mapping):
        return [FieldError("(document)", "must be a mapping (a Kubernetes object)")]
    errors: list[FieldError] = []
    if obj.get("apiVersion") != resources.API_VERSION:
        errors.append(
            FieldError("apiVersion", f"{obj.get('apiVersion')!r} is not {resources.API_VERSION}")
        )
    if obj.get("kind") != resources.REMEDIATION_POLICY.kind:
        errors.append(
            FieldError("kind", f"{obj.get('kind')!r} is not {resources.REMEDIATION_POLICY.kind}")
        )
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        errors.append(FieldError("metadata.name", "is required"))
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errors.append(
            FieldError(
                "metadata.name",
                f"{name!r} is not a valid object name: use lower-case letters, digits, '-' and"
                " '.', starting and ending with a letter or digit (at most 253 characters)",
            )
        )
    if "spec" not in obj:
        errors.append(FieldError("spec", "is required"))
    return errors


def validate(obj: Any) -> list[FieldError]:
    """Every problem with a RemediationPolicy object; empty when it is valid."""
    errors = _envelope(obj)
    if isinstance(obj, Mapping) and "spec" in obj:
        errors += _check_spec(obj["spec"], "spec")[1]
    return errors


def parse_spec(
    spec: Any, *, name: str, generation: int = 1, created_at: datetime | None = None
) -> domain.Policy:
    """A spec alone (e.g. the status' lastAcceptedSpec) -> Policy; raises InvalidPolicyError."""
    model, errors = _check_spec(spec, "spec")
    if model is None:
        raise InvalidPolicyError(name, errors)
    return to_domain(model, name=name, generation=generation, created_at=created_at)


def created_at(obj: Any) -> datetime | None:
    """The object's metadata.creationTimestamp (the ownership tie-break); None when absent or
    unreadable (the API server always sets it; a YAML file being checked has none)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    text = metadata.get("creationTimestamp") if isinstance(metadata, Mapping) else None
    if isinstance(text, datetime):  # YAML reads an unquoted timestamp as a datetime
        return text if text.tzinfo is not None else text.replace(tzinfo=UTC)
    if not isinstance(text, str):
        return None
    try:
        return timestamps.parse_time(text)
    except ValueError:
        return None


def parse_policy(obj: Any) -> domain.Policy:
    """A whole RemediationPolicy object -> Policy; raises InvalidPolicyError listing every error."""
    errors = validate(obj)
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = metadata if isinstance(metadata, Mapping) else {}
    name = str(meta.get("name") or "")
    if errors:
        raise InvalidPolicyError(name, errors)
    generation = meta.get("generation")
    return parse_spec(
        obj["spec"],
        name=name,
        generation=generation if isinstance(generation, int) else 1,
        created_at=created_at(obj),
    )


# --- model -> domain values -----------------------------------------------------------------


def _opt_duration(text: str | None) -> timedelta | None:
    return None if text is None else durations.parse(text)


def _selector(model: LabelSelector) -> selectors.LabelSelector:
    return selectors.LabelSelector(
        match_labels=dict(model.match_labels),
        match_expressions=tuple(
            selectors.Requirement(r.key, r.operator, tuple(r.values))
            for r in model.match_expressions
        ),
    )


def _match(model: ConditionMatch) -> domain.ConditionMatch:
    return domain.ConditionMatch(
        type=model.type,
        status=model.status,
        reason=model.reason,
        message=model.message,
        stale_after=_opt_duration(model.stale_after),
        when_missing=model.when_missing or WhenMissing.Ignore,
        positive_after=_opt_duration(model.positive_after),
        except_reason=model.except_reason,
    )


def _step(model: LadderStep) -> domain.Step:
    return domain.Step(
        action=model.action,
        timeout=_opt_duration(model.timeout),
        escalate_after=durations.parse(model.escalate_after),
        retries=model.retries,
        on_timeout=model.on_timeout,
        on_pdb_blocked=model.on_pdb_blocked or OnPDBBlocked.Wait,
    )


def _fault(model: Fault) -> domain.Fault:
    return domain.Fault(
        name=model.name,
        match=tuple(_match(m) for m in model.match),
        ladder=tuple(_step(s) for s in model.ladder),
        tolerate=durations.parse(model.tolerate),
        on_exhausted=model.on_exhausted or OnExhausted.Hold,
    )


def _budget(model: Budget) -> domain.Budget:
    return domain.Budget(
        nodes=model.nodes,
        actions=frozenset(model.actions),
        schedule=model.schedule,
        duration=_opt_duration(model.duration),
    )


def _breaker(model: CircuitBreaker | None) -> domain.CircuitBreaker | None:
    if model is None:
        return None
    return domain.CircuitBreaker(
        max_unhealthy=model.max_unhealthy,
        min_nodes=model.min_nodes,
        cooldown=durations.parse(model.cooldown),
        group_by=model.group_by,
    )


def _executor(model: ExecutorAction) -> domain.ActionExecutor:
    return domain.ActionExecutor(executor=model.executor, job_template=model.job_template)


def _actions(model: Actions) -> domain.Actions:
    return domain.Actions(
        gpu_reset=_executor(model.gpu_reset),
        reboot=_executor(model.reboot),
        replace=model.replace.provider,
    )


def _diagnostics(model: Diagnostics | None) -> domain.Diagnostics | None:
    if model is None:
        return None
    return domain.Diagnostics(
        destination=model.destination,
        before=frozenset(model.before),
        timeout=durations.parse(model.timeout),
        executor=domain.ActionExecutor(model.executor, model.job_template),
    )


def _drain(model: Drain) -> domain.DrainOptions:
    return domain.DrainOptions(
        pods=tuple(
            domain.PodRule(
                handling=rule.handling,
                namespaces=frozenset(rule.namespaces),
                selector=_selector(rule.pod_selector),
                wait_for=durations.parse(rule.wait_for),
            )
            for rule in model.pods
        ),
        gpu_pods_only_before_reset=model.gpu_pods_only_before_reset,
    )


def _validation(model: Validation | None) -> domain.Validation | None:
    if model is None:
        return None
    level = {domain.VALIDATION_ENV: str(model.level)}
    return domain.Validation(
        after=frozenset(model.after),
        level=model.level,
        timeout=durations.parse(model.timeout),
        executor=domain.ActionExecutor(model.executor, model.job_template, level),
        restart_pods=tuple(
            domain.RestartTarget(entry.namespace, _selector(entry.pod_selector))
            for entry in model.restart_pods
        ),
    )


def to_domain(
    model: RemediationPolicySpec,
    *,
    name: str,
    generation: int = 1,
    created_at: datetime | None = None,
) -> domain.Policy:
    """A validated spec model -> Policy (call `parse_spec` unless the rules already ran)."""
    history = model.history
    rate = model.rate
    return domain.Policy(
        name=name,
        generation=generation,
        faults=tuple(_fault(f) for f in model.faults),
        node_selector=_selector(model.node_selector),
        mode=model.mode,
        paused=model.paused,
        pause_requests=tuple(model.pause_requests),
        recovery=domain.Recovery(healthy_for=durations.parse(model.recovery.healthy_for)),
        history=None
        if history is None
        else domain.History(
            window=durations.parse(history.window),
            max_episodes=history.max_episodes,
            then=history.then,
        ),
        budgets=tuple(_budget(b) for b in model.budgets),
        rate=None if rate is None else domain.Rate(max=rate.max, per=durations.parse(rate.per)),
        circuit_breaker=_breaker(model.circuit_breaker),
        require_approval=frozenset(model.require_approval),
        actions=_actions(model.actions),
        diagnostics=_diagnostics(model.diagnostics),
        drain=_drain(model.drain),
        validation=_validation(model.validation),
        startup_grace=durations.parse(model.startup_grace),
        weight=model.weight,
        created_at=created_at,
    )


__all__ = [
    "FieldError",
    "InvalidPolicyError",
    "created_at",
    "parse_policy",
    "parse_spec",
    "to_domain",
    "validate",
]
