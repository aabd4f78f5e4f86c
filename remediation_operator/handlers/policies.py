"""Which version of a RemediationPolicy is in force, and what its Accepted condition says.

An invalid update must not stop remediation: the last spec that validated keeps running. It
is persisted in `status.lastAcceptedSpec` so a restarted operator (which never saw the valid
version) keeps running it too. The Accepted condition names every invalid field and the
generation. Any failure to read a generation, also one validation did not foresee (a bug, an
overflow), is a rejection of that generation, never an exception: an exception here would leave
a new policy without status and an edited one `Accepted=True` for a generation not running.
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


MAX_ERRORS_SHOWN = 10
"""The Accepted message names at most this many invalid fields (and says how many more)."""

MAX_MESSAGE_LENGTH = 4096
"""A condition message stays readable and far below the API server's object size limit."""


def _errors_text(errors: list[policy_parsing.FieldError]) -> str:
    shown = "; ".join(str(e) for e in errors[:MAX_ERRORS_SHOWN])
    if len(errors) > MAX_ERRORS_SHOWN:
        shown += f"; and {len(errors) - MAX_ERRORS_SHOWN} more"
    return shown


def _fallback(obj: Mapping[str, Any], name: str) -> Policy | None:
    """The last accepted generation (status.lastAcceptedSpec), or None."""
    status = obj.get("status")
    last = status.get("lastAcceptedSpec") if isinstance(status, Mapping) else None
    if not isinstance(last, Mapping):
        return None
    last_gen = status.get("lastAcceptedGeneration") if isinstance(status, Mapping) else None
    try:
        return policy_parsing.parse_spec(
            last,
            name=name,
            generation=last_gen if isinstance(last_gen, int) else 1,
            created_at=policy_parsing.created_at(obj),
        )
    except Exception:  # an unreadable old spec runs nothing, as an absent one would
        return None


def _rejected(obj: Mapping[str, Any], name: str, gen: int, why: str) -> Acceptance:
    fallback = _fallback(obj, name)
    keeps = (
        f" Generation {fallback.generation} stays in force."
        if fallback is not None
        else " No earlier version was accepted, so nothing runs."
    )
    if len(why) > MAX_MESSAGE_LENGTH:
        why = why[: MAX_MESSAGE_LENGTH - 3] + "..."
    return Acceptance(
        name=name, generation=gen, accepted=False, in_force=fallback, message=f"{why}{keeps}"
    )


def accept(obj: Mapping[str, Any]) -> Acceptance:
    metadata = obj.get("metadata")
    meta = metadata if isinstance(metadata, Mapping) else {}
    name = str(meta.get("name") or "")
    generation = meta.get("generation")
    gen = generation if isinstance(generation, int) else 1
    try:
        policy = policy_parsing.parse_policy(obj)
    except policy_parsing.InvalidPolicyError as invalid:
        why = f"Generation {gen} is invalid: {_errors_text(invalid.errors)}."
        return _rejected(obj, name, gen, why)
    except Exception as exc:  # any failure rejects the generation: see the docstring
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        why = (
            f"Generation {gen} could not be read: spec: validation failed unexpectedly"
            f" ({detail}); this is a bug in the operator, please report it with the spec."
        )
        return _rejected(obj, name, gen, why)
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
