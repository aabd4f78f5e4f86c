"""Which version of a RemediationPolicy is in force, and what its Accepted condition says.

An invalid update must not stop remediation: the last spec that validated keeps running. It
is persisted in `status.lastAcceptedSpec` so a restarted operator (which never saw the valid
version) keeps running it too. The Accepted condition names every invalid field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remediation_operator.api import policy_parsing
from remediation_operator.domain.policy import Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.handlers.conditions import set_condition


@dataclass(frozen=True)
class Acceptance:
    name: str
    generation: int
    accepted: bool
    """The current spec is valid."""
    in_force: Policy | None
    """The policy to run: the current spec if valid, else the last accepted one (or None)."""
    message: str
    spec: Mapping[str, Any] | None = None
    """The current spec when it is valid (to persist as lastAcceptedSpec)."""


def accept(obj: Mapping[str, Any]) -> Acceptance:
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name") or "")
    generation = metadata.get("generation")
    gen = generation if isinstance(generation, int) else 1
    try:
        policy = policy_parsing.parse_policy(obj)
    except policy_parsing.InvalidPolicyError as invalid:
        errors = "; ".join(str(e) for e in invalid.errors)
        status = obj.get("status") or {}
        last = status.get("lastAcceptedSpec")
        fallback: Policy | None = None
        if isinstance(last, Mapping):
            last_gen = status.get("lastAcceptedGeneration")
            try:
                fallback = policy_parsing.parse_spec(
                    last, name=name, generation=last_gen if isinstance(last_gen, int) else 1
                )
            except policy_parsing.InvalidPolicyError:
                fallback = None
        keeps = (
            f" Generation {fallback.generation} stays in force."
            if fallback is not None
            else " No earlier version was accepted, so nothing runs."
        )
        return Acceptance(
            name=name,
            generation=gen,
            accepted=False,
            in_force=fallback,
            message=f"The spec is invalid: {errors}.{keeps}",
        )
    return Acceptance(
        name=name,
        generation=gen,
        accepted=True,
        in_force=policy,
        message=f"Generation {gen} is valid and in force.",
        spec=obj.get("spec"),
    )


def status_change(
    acceptance: Acceptance, status: dict[str, Any], now: datetime
) -> dict[str, Any] | None:
    """The policy status with Accepted (and lastAcceptedSpec) updated; None when unchanged."""
    new = dict(status)
    new["conditions"] = set_condition(
        list(new.get("conditions") or []),
        "Accepted",
        "True" if acceptance.accepted else "False",
        str(Reason.PolicyAccepted if acceptance.accepted else Reason.PolicyInvalid),
        acceptance.message,
        acceptance.generation,
        now,
    )
    if acceptance.accepted and acceptance.spec is not None:
        new["lastAcceptedSpec"] = dict(acceptance.spec)
        new["lastAcceptedGeneration"] = acceptance.generation
    return None if new == status else new
