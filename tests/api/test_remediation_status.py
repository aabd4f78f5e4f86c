"""A Remediation's state survives being written as status and read back (an operator restart)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediation_operator.api import breaker_status, remediation_status
from remediation_operator.domain.fleet import BreakerState
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    ObservedCondition,
    Outcome,
    Phase,
    RemediationState,
    StepRecord,
)

T0 = datetime(2026, 11, 30, 11, 2, tzinfo=UTC)


def running_state() -> RemediationState:
    return RemediationState(
        name="gpu-17-20261130t1102",
        node="gpu-17",
        policy="gpu-default",
        fault="gpu-xid-reset",
        phase=Phase.Running,
        reason=Reason.StepStarted,
        message="GPUReset started (attempt 1); it times out at 11:20.",
        started_at=T0,
        condition=ObservedCondition(
            type="AcceleratedHardwareReady",
            status="False",
            reason="NvidiaXID79Error",
            message="GPU has fallen off the bus",
            last_transition_time=T0 - timedelta(minutes=3),
            last_heartbeat_time=T0 - timedelta(seconds=15),
        ),
        step_index=2,
        step=Action.GPUReset,
        attempt=1,
        step_started_at=T0 + timedelta(minutes=8),
        next_check_at=T0 + timedelta(minutes=18, microseconds=250),
        cordoned_by_us=True,
        boot_id_at_step_start="b-1",
        steps=(
            StepRecord(
                Action.Cordon,
                1,
                T0 + timedelta(minutes=2),
                Reason.StepSucceeded,
                "cordoned",
                T0 + timedelta(minutes=2),
                Outcome.Succeeded,
            ),
            StepRecord(Action.GPUReset, 1, T0 + timedelta(minutes=8), Reason.StepStarted, "reset"),
        ),
        step_outcome=None,
        repeat_offender=True,
        evidence_at_step_end=ObservedCondition(
            type="AcceleratedHardwareReady",
            status="False",
            reason="NvidiaXID79Error",
            last_transition_time=T0 - timedelta(minutes=3),
            last_heartbeat_time=T0 + timedelta(minutes=2),
        ),
    )


def as_object(state: RemediationState) -> dict[str, Any]:
    obj = remediation_status.new_object(state)
    obj["status"] = remediation_status.to_status(state)
    return obj


def test_status_reads_as_kubernetes_writes_it() -> None:
    status = remediation_status.to_status(running_state())
    assert status["phase"] == "Running"
    assert status["step"] == "GPUReset"
    assert status["startedAt"] == "2026-11-30T11:02:00Z"
    assert status["nextCheckAt"] == "2026-11-30T11:20:00.000250Z"
    assert status["bootIDAtStepStart"] == "b-1"
    assert status["condition"]["lastTransitionTime"] == "2026-11-30T10:59:00Z"
    assert status["steps"][0]["outcome"] == "Succeeded"
    # What a restarted operator compares a later report with (remote time with remote time).
    assert status["evidenceAtStepEnd"]["lastHeartbeatTime"] == "2026-11-30T11:04:00Z"
    # Unset fields are left out, as Kubernetes' omitempty does: `kubectl get` then shows
    # <none> instead of "null". The status is always replaced whole (PUT on /status), so an
    # absent key cannot leave an older value behind.
    assert "finishedAt" not in status["steps"][1]
    assert "finishedAt" not in status
    assert "healthySince" not in status


def test_round_trip_through_the_object_is_exact() -> None:
    state = running_state()
    obj = as_object(state)
    assert obj["apiVersion"] == "remediation.gpuops.io/v1alpha1"
    assert obj["kind"] == "Remediation"
    assert obj["spec"] == {"nodeName": "gpu-17", "policyName": "gpu-default"}
    assert remediation_status.from_object(obj) == state


def test_a_new_object_without_status_has_no_state_yet() -> None:
    obj = remediation_status.new_object(running_state())
    assert remediation_status.from_object(obj) is None


def test_times_in_other_zones_are_read_as_the_same_instant() -> None:
    status = remediation_status.to_status(running_state())
    status["startedAt"] = "2026-11-30T12:02:00+01:00"
    state = remediation_status.from_status(status, name="n", node="gpu-17", policy="p")
    assert state.started_at == T0
    assert state.started_at.tzinfo is UTC


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        ({"phase": "Exploded"}, "status.phase", "'Exploded' is not valid"),
        ({"reason": "NotAReason"}, "status.reason", "'NotAReason' is not valid"),
        ({"startedAt": "yesterday"}, "status.startedAt", "not an RFC 3339 time"),
        ({"nextCheckAt": "2026-11-30T11:02:00"}, "status.nextCheckAt", "no time zone"),
        ({"fault": None}, "status.fault", "valid string"),
        ({"attempt": -1}, "status.attempt", "greater than or equal to 0"),
    ],
)
def test_an_unreadable_status_names_the_field(
    change: dict[str, Any], path: str, fragment: str
) -> None:
    status = remediation_status.to_status(running_state()) | change
    with pytest.raises(remediation_status.InvalidStatusError) as caught:
        remediation_status.from_status(status, name="gpu-17-x", node="gpu-17", policy="p")
    (error,) = caught.value.errors
    assert error.path == path
    assert fragment in error.message
    assert "Remediation gpu-17-x cannot be read" in str(caught.value)


def test_an_unreadable_spec_names_the_field() -> None:
    obj = as_object(running_state())
    obj["spec"] = {"nodeName": "gpu-17"}
    with pytest.raises(remediation_status.InvalidStatusError) as caught:
        remediation_status.from_object(obj)
    assert [e.path for e in caught.value.errors] == ["spec.policyName"]


def test_fields_a_newer_operator_added_are_ignored_on_read() -> None:
    status = remediation_status.to_status(running_state()) | {"futureField": 1}
    state = remediation_status.from_status(
        status, name="gpu-17-20261130t1102", node="gpu-17", policy="gpu-default"
    )
    assert state == running_state()


times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
words = st.text(min_size=0, max_size=20)
steps = st.builds(
    StepRecord,
    action=st.sampled_from(Action),
    attempt=st.integers(1, 10),
    started_at=times,
    reason=st.sampled_from(Reason),
    message=words,
    finished_at=st.none() | times,
    outcome=st.none() | st.sampled_from(Outcome),
)
conditions = st.builds(
    ObservedCondition,
    type=st.text(min_size=1, max_size=20),
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=words,
    message=words,
    last_transition_time=st.none() | times,
    last_heartbeat_time=st.none() | times,
)
states = st.builds(
    RemediationState,
    name=st.just("n"),
    node=st.just("node-1"),
    policy=st.just("p"),
    fault=st.text(min_size=1, max_size=20),
    phase=st.sampled_from(Phase),
    reason=st.sampled_from(Reason),
    message=words,
    started_at=times,
    condition=st.none() | conditions,
    step_index=st.none() | st.integers(0, 10),
    step=st.none() | st.sampled_from(Action),
    attempt=st.integers(0, 10),
    step_started_at=st.none() | times,
    step_finished_at=st.none() | times,
    next_check_at=st.none() | times,
    cordoned_by_us=st.booleans(),
    boot_id_at_step_start=st.none() | words,
    healthy_since=st.none() | times,
    finished_at=st.none() | times,
    steps=st.lists(steps, max_size=4).map(tuple),
    dry_run=st.booleans(),
    step_outcome=st.none() | st.sampled_from(Outcome),
    repeat_offender=st.booleans(),
    evidence_at_step_end=st.none() | conditions,
    evidence_seen_at=st.none() | times,
    node_created_at=st.none() | times,
)


@given(states)
def test_any_state_round_trips(state: RemediationState) -> None:
    status = remediation_status.to_status(state)
    assert remediation_status.from_status(status, name="n", node="node-1", policy="p") == state


def test_breakers_round_trip_and_show_one_circuit_column() -> None:
    breakers = {
        "us-east-1a": BreakerState(open=True, opened_at=T0),
        "us-east-1b": BreakerState(open=False, healthy_since=T0 + timedelta(minutes=3)),
    }
    status = breaker_status.to_status(breakers)
    assert status["circuitState"] == "Open"
    assert status["circuit"]["us-east-1a"] == {
        "open": True,
        "openedAt": "2026-11-30T11:02:00Z",
        "healthySince": None,
    }
    assert breaker_status.from_status(status) == breakers
    assert breaker_status.circuit_state({"": BreakerState()}) == "Closed"
    assert breaker_status.from_status(None) == {}
    assert breaker_status.from_status({}) == {}


def test_an_unreadable_breaker_names_its_group() -> None:
    with pytest.raises(breaker_status.InvalidBreakerStatusError) as caught:
        breaker_status.from_status({"circuit": {"zone-a": {"open": True, "openedAt": "noon"}}})
    assert [e.path for e in caught.value.errors] == ["status.circuit['zone-a'].openedAt"]
