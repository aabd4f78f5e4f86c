"""The engine's Recorder: decisions and steps become log lines and Prometheus metrics.

Log event names are snake_case facts (`step_started`, `budget_exhausted`) with node, policy,
step and reason bound, so `jq 'select(.node=="gpu-17")'` tells one node's story.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remediation_operator.domain.reasons import Reason
from remediation_operator.engine import explain
from remediation_operator.engine.ports import Explanation, PolicyState, StepTransition
from remediation_operator.observability import logs
from remediation_operator.observability.metrics import Metrics


class Recorder:
    def __init__(self, metrics: Metrics, log: Any = None) -> None:
        self._metrics = metrics
        self._log = log if log is not None else logs.get("remediation_operator.engine")

    def announced(self, explanation: Explanation) -> None:
        self._metrics.decision(explanation.policy, str(explanation.reason))
        fields = explain.log_fields(explanation)
        level = "warning" if fields.get("severity") == "Warning" else "info"
        getattr(self._log, level)(
            explain.event_name(explanation.reason), message=explanation.message, **fields
        )

    def step(self, transition: StepTransition) -> None:
        """Count a step's start or end; log its end. A start is logged once, by the planner's
        StepStarted announcement (`step_started` with its message), not a second time here."""
        action = str(transition.action)
        if transition.outcome is None:
            self._metrics.step_started(transition.policy, action)
            return
        self._metrics.step_finished(
            transition.policy,
            action,
            str(transition.outcome),
            str(transition.reason),
            None if transition.duration is None else transition.duration.total_seconds(),
        )
        self._log.info(
            "step_finished",
            policy=transition.policy,
            node=transition.node,
            remediation=transition.remediation,
            step=action,
            attempt=transition.attempt,
            reason=str(transition.reason),
            outcome=str(transition.outcome),
        )

    def applied(self, policy: str, effect: str, node: str, result: str) -> None:
        level = "warning" if result == "failed" else "debug"
        getattr(self._log, level)(
            "effect_applied", policy=policy, node=node, effect=effect, result=result
        )

    def summarised(self, policy: str, state: PolicyState, blocked: Mapping[Reason, int]) -> None:
        summary = state.summary
        headroom = {str(k): v for k, v in summary.headroom.items()} if summary else {}
        open_groups = [g for g, b in state.breakers.items() if b.open]
        self._metrics.policy_summary(policy, headroom, open_groups)
        self._metrics.policy_blocked(policy, {str(k): v for k, v in blocked.items()})
