"""Which version of a policy is in force, and what its Accepted condition says (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.handlers import policies
from tests.integration.conftest import cordon_only, policy

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def invalid(status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = policy(faults=cordon_only())
    body["metadata"]["generation"] = 2
    body["spec"]["faults"][0]["ladder"] = [{"action": "Drain"}, {"action": "Cordon"}]
    if status is not None:
        body["status"] = status
    return body


def test_a_valid_policy_is_in_force_and_recorded_as_last_accepted() -> None:
    body = policy(faults=cordon_only())
    acceptance = policies.accept(body)
    assert acceptance.accepted
    assert acceptance.in_force is not None
    status = policies.status_change(acceptance, {}, NOW)
    assert status is not None
    assert status["lastAcceptedSpec"] == body["spec"]
    accepted = status["conditions"][0]
    assert (accepted["type"], accepted["status"], accepted["reason"]) == (
        "Accepted",
        "True",
        "PolicyAccepted",
    )
    assert policies.status_change(acceptance, status, NOW + timedelta(minutes=1)) is None


def test_an_invalid_update_keeps_the_last_accepted_spec_running() -> None:
    good = policy(faults=cordon_only())
    previous = policies.status_change(policies.accept(good), {}, NOW)
    acceptance = policies.accept(invalid(previous))
    assert not acceptance.accepted
    assert acceptance.in_force is not None
    assert acceptance.in_force.faults[0].ladder[0].action == "Cordon"
    assert "spec.faults[0].ladder" in acceptance.message
    assert "stays in force" in acceptance.message
    status = policies.status_change(acceptance, previous or {}, NOW)
    assert status is not None
    condition = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (condition["status"], condition["reason"]) == ("False", "PolicyInvalid")
    assert condition["observedGeneration"] == 2
    assert status["lastAcceptedSpec"] == good["spec"]


def test_an_invalid_first_version_runs_nothing_and_says_so() -> None:
    acceptance = policies.accept(invalid())
    assert acceptance.in_force is None
    assert "nothing runs" in acceptance.message
