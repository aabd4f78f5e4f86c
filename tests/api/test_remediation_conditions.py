"""A Remediation's `status.conditions` say what kstatus tools and `kubectl wait` need to know.

kstatus (Argo CD, Flux, kpt) reads `Reconciling` (in progress) and `Stalled` (failed); people
and scripts wait on `Ready`. Each condition is derived from the phase, and its
lastTransitionTime is when the incident started or ended, never the time of the last write.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from remediation_operator.api import remediation_status
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from tests.api.test_remediation_status import T0, running_state

END = T0 + timedelta(minutes=40)


def conditions_of(state: RemediationState, generation: int | None = 1) -> dict[str, Any]:
    status = remediation_status.to_status(state, generation=generation)
    return {c["type"]: c for c in status["conditions"]}


def ended(phase: Phase, reason: Reason, message: str) -> RemediationState:
    return replace(running_state(), phase=phase, reason=reason, message=message, finished_at=END)


@pytest.mark.parametrize("phase", [Phase.Pending, Phase.Running, Phase.Waiting, Phase.Blocked])
def test_an_open_incident_is_reconciling_and_not_ready(phase: Phase) -> None:
    state = replace(running_state(), phase=phase)
    found = conditions_of(state)
    assert {t: c["status"] for t, c in found.items()} == {
        "Ready": "False",
        "Reconciling": "True",
        "Stalled": "False",
    }
    for condition in found.values():
        assert condition["reason"] == "StepStarted"
        assert condition["message"] == state.message
        assert condition["lastTransitionTime"] == "2026-11-30T11:02:00Z"
        assert condition["observedGeneration"] == 1


def test_a_repaired_node_is_ready_from_the_moment_the_incident_ended() -> None:
    state = ended(Phase.Succeeded, Reason.Recovered, "The node is healthy again.")
    found = conditions_of(state, generation=3)
    assert found["Ready"]["status"] == "True"
    assert found["Ready"]["lastTransitionTime"] == "2026-11-30T11:42:00Z"
    assert found["Reconciling"]["status"] == "False"
    assert found["Reconciling"]["lastTransitionTime"] == "2026-11-30T11:42:00Z"
    assert found["Stalled"] == {
        "type": "Stalled",
        "status": "False",
        "reason": "Recovered",
        "message": "The node is healthy again.",
        "lastTransitionTime": "2026-11-30T11:02:00Z",
        "observedGeneration": 3,
    }


def test_a_failed_incident_is_stalled_and_never_ready() -> None:
    state = ended(Phase.Failed, Reason.StepFailed, "Replace failed; a human must look.")
    found = conditions_of(state)
    assert found["Stalled"]["status"] == "True"
    assert found["Stalled"]["lastTransitionTime"] == "2026-11-30T11:42:00Z"
    assert found["Ready"]["status"] == "False"
    assert found["Ready"]["lastTransitionTime"] == "2026-11-30T11:02:00Z"
    assert found["Reconciling"]["status"] == "False"


def test_a_cancelled_incident_is_over_and_ready_with_its_reason() -> None:
    state = ended(Phase.Cancelled, Reason.AdminUncordoned, "An administrator uncordoned it.")
    found = conditions_of(state)
    assert found["Ready"]["status"] == "True"
    assert found["Ready"]["reason"] == "AdminUncordoned"
    assert found["Reconciling"]["status"] == "False"
    assert found["Stalled"]["status"] == "False"


def test_conditions_are_not_state_and_do_not_change_the_round_trip() -> None:
    state = ended(Phase.Succeeded, Reason.Recovered, "The node is healthy again.")
    status = remediation_status.to_status(state, generation=2)
    back = remediation_status.from_status(
        status, name=state.name, node=state.node, policy=state.policy
    )
    assert back == state


def test_without_a_generation_the_conditions_omit_it() -> None:
    for condition in conditions_of(running_state(), generation=None).values():
        assert "observedGeneration" not in condition
