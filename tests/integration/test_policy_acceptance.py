"""Which version of a policy is in force, and what its Accepted condition says: pure, and
against the operator process (the tests marked integration)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from remediation_operator.api import policy_parsing
from remediation_operator.handlers import policies
from tests.integration.conftest import Cluster, cordon_only, eventually, is_cordoned_by_us, policy

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


# --- issue 12, defect 9: any failure to accept a generation is Accepted=False ---------------


def overflowing(generation: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = policy(faults=cordon_only())
    body["metadata"]["generation"] = generation
    body["spec"]["faults"][0]["tolerate"] = "24000000000h"
    if status is not None:
        body["status"] = status
    return body


def test_an_overflowing_duration_is_rejected_naming_the_field_and_the_generation() -> None:
    acceptance = policies.accept(overflowing(3))
    assert not acceptance.accepted
    assert acceptance.in_force is None
    assert acceptance.message.startswith("Generation 3 is invalid: spec.faults[0].tolerate: ")
    status = policies.status_change(acceptance, {}, NOW)
    assert status is not None
    condition = status["conditions"][0]
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "False",
        "PolicyInvalid",
        3,
    )


def test_an_unforeseen_failure_to_read_a_generation_is_a_rejection_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in validation (as the overflow was) must not leave the old generation Accepted or
    a new policy without status: it rejects this generation and keeps the last good one."""
    good = policy(faults=cordon_only())
    previous = policies.status_change(policies.accept(good), {}, NOW)
    edited = policy(faults=cordon_only())
    edited["metadata"]["generation"] = 2
    edited["status"] = previous

    def crash(obj: Any) -> Any:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(policy_parsing, "parse_policy", crash)
    acceptance = policies.accept(edited)
    assert not acceptance.accepted
    assert acceptance.generation == 2
    assert acceptance.in_force is not None
    assert acceptance.in_force.generation == 1
    assert acceptance.message.startswith("Generation 2 could not be read: spec: ")
    assert "OverflowError: date value out of range" in acceptance.message
    assert "Generation 1 stays in force." in acceptance.message


def test_the_message_stays_readable_with_many_errors() -> None:
    faults = [dict(cordon_only()[0], name=f"f{i}", tolerate=f"{i} minutes") for i in range(20)]
    acceptance = policies.accept(policy(faults=faults))
    assert acceptance.message.count("is not a duration") == policies.MAX_ERRORS_SHOWN
    assert "; and 10 more." in acceptance.message
    assert len(acceptance.message) <= policies.MAX_MESSAGE_LENGTH + 100


@pytest.mark.integration
async def test_a_new_policy_with_an_overflowing_duration_is_not_accepted(cluster: Cluster) -> None:
    """Operator process: the new policy gets Accepted=False naming field and generation (it
    used to get no status at all), the accepted metric is 0, and nothing runs."""
    cluster.apply(overflowing(1))
    operator = await cluster.start_operator()
    condition = await eventually(
        lambda: (c := cluster.condition("gpu", "Accepted")) and c["status"] == "False" and c,
        what="Accepted=False",
    )
    assert condition["reason"] == "PolicyInvalid"
    assert condition["observedGeneration"] == 1
    assert "Generation 1 is invalid: spec.faults[0].tolerate" in condition["message"]
    assert "nothing runs" in condition["message"]
    assert 'gpuops_remediation_policy_accepted{policy="gpu"} 0.0' in await operator.metrics()


@pytest.mark.integration
async def test_an_edit_to_an_overflowing_duration_keeps_the_last_good_generation(
    cluster: Cluster,
) -> None:
    """Operator process: an accepted policy edited to overflow is Accepted=False for the new
    generation (it used to stay Accepted=True with the metric at 1); the old one runs on."""
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    operator = await cluster.start_operator()
    await eventually(
        lambda: (cluster.condition("gpu", "Accepted") or {}).get("status") == "True",
        what="Accepted=True",
    )
    cluster.apply(overflowing(2))
    condition = await eventually(
        lambda: (c := cluster.condition("gpu", "Accepted")) and c["status"] == "False" and c,
        what="Accepted=False",
    )
    generation = cluster.api.store.get("remediationpolicies", "gpu")["metadata"]["generation"]
    assert condition["observedGeneration"] == generation
    assert f"Generation {generation} is invalid: spec.faults[0].tolerate" in condition["message"]
    assert "Generation 1 stays in force" in condition["message"]
    assert cluster.policy_status()["lastAcceptedGeneration"] == 1
    assert 'gpuops_remediation_policy_accepted{policy="gpu"} 0.0' in await operator.metrics()
    cluster.fleet.inject(node, "xid-62")
    await eventually(lambda: is_cordoned_by_us(cluster.node(node)), what="cordon by generation 1")
