"""Turn the planner's decisions into explanations people read: Events, log lines, metrics.

One `Announce` becomes one `Explanation` (Events on the Node and the Remediation, a log line,
`decisions_total{reason}`); the steps[] history of a Remediation, compared before and after a
write, becomes `StepTransition`s (`actions_total`, `step_duration_seconds`). Keeping both
derivations here means events, logs and metrics can never tell different stories.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from remediation_operator.domain.effects import Announce
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, RemediationState
from remediation_operator.engine.ports import Explanation, StepTransition

ACTION_RESULTS = (
    "started",
    "succeeded",
    "transient_failure",
    "permanent_failure",
    "timed_out",
    "cancelled",
)
"""The `result` label values of `gpuops_remediation_actions_total`."""

_RESULT_BY_OUTCOME = {
    Outcome.Succeeded: "succeeded",
    Outcome.TransientFailure: "transient_failure",
    Outcome.PermanentFailure: "permanent_failure",
    Outcome.Cancelled: "cancelled",
}


def explanation(announce: Announce, policy: str, now: datetime) -> Explanation:
    """The Event/log record of one planner announcement."""
    return Explanation(
        policy=policy,
        node=announce.node,
        remediation=announce.remediation,
        reason=announce.reason,
        message=announce.message,
        severity=announce.severity,
        action=announce.action,
        at=now,
        group=announce.group,
    )


def transitions(old: RemediationState | None, new: RemediationState) -> Iterator[StepTransition]:
    """Steps that started or ended between two versions of a Remediation's status."""
    before = old.steps if old is not None else ()
    for index, record in enumerate(new.steps):
        previous = before[index] if index < len(before) else None
        common: dict[str, Any] = {
            "policy": new.policy,
            "node": new.node,
            "remediation": new.name,
            "fault": new.fault,
            "action": record.action,
            "attempt": record.attempt,
        }
        if previous is None:
            yield StepTransition(reason=Reason.StepStarted, **common)
        # A step a flap interrupted is reopened in place (same record) and may end again.
        fresh = (
            previous is None
            or previous.outcome is None
            or previous.finished_at != record.finished_at
        )
        if record.outcome is not None and fresh:
            end = record.finished_at
            yield StepTransition(
                reason=record.reason,
                outcome=record.outcome,
                duration=(end - record.started_at) if end is not None else None,
                **common,
            )


def action_result(transition: StepTransition) -> str:
    """The `result` label for `actions_total`: a timeout is counted apart from other failures."""
    if transition.outcome is None:
        return "started"
    if transition.reason is Reason.StepTimedOut:
        return "timed_out"
    return _RESULT_BY_OUTCOME[transition.outcome]


def log_fields(explanation: Explanation) -> dict[str, str]:
    """The fields bound to a decision's log line (node, policy, step, reason, remediation)."""
    fields = {
        "policy": explanation.policy,
        "node": explanation.node,
        "reason": str(explanation.reason),
        "severity": str(explanation.severity),
    }
    if explanation.action is not None:
        fields["step"] = str(explanation.action)
    if explanation.remediation is not None:
        fields["remediation"] = explanation.remediation
    if explanation.group is not None:
        fields["group"] = explanation.group
    return fields


def event_name(reason: Reason) -> str:
    """The snake_case log event for a reason: `StepStarted` -> `step_started`."""
    out: list[str] = []
    text = str(reason)
    for i, ch in enumerate(text):
        if (
            ch.isupper()
            and i > 0
            and not (text[i - 1].isupper() and (i + 1 == len(text) or text[i + 1].isupper()))
        ):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
