"""What each ladder action means, in one entry per action.

Whether it disrupts work (budgets, the rate limit and the evidence gate apply), whether it
keeps the node (Karpenter must not consolidate it meanwhile), the effect that starts it, which
effect a due re-check issues again, how it is observed done, and how often a running step is
looked at. The planner and the engine read these entries and nothing else about an action,
so adding an action is one entry here plus its executor in the ports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from remediation_operator.domain.effects import (
    EVERY_POD,
    Cordon,
    DrainPlan,
    Effect,
    Evict,
    Replace,
    RestartNodePods,
    RunExecutor,
)
from remediation_operator.domain.fleet import NodeView, Progress, StepObservation
from remediation_operator.domain.policy import DISRUPTIVE, Action, Policy
from remediation_operator.domain.remediation import Outcome, RemediationState

PACE_BASE = timedelta(seconds=10)
PACE_CAP = timedelta(minutes=5)

EVICTION_RETRY = timedelta(seconds=5)
"""How often a drain's evictions are retried while pods remain (kubectl drain retries a
PodDisruptionBudget's 429 every 5 s: k8s.io/kubectl/pkg/drain, `evictPods`)."""


class Reissue(StrEnum):
    """Which effect a due re-check of a running step applies again (all are idempotent)."""

    Always = "Always"
    """Cordon and Drain: cheap to repeat, and the repeat is what makes progress (a pod that a
    PodDisruptionBudget refused is evicted again)."""
    UntilStarted = "UntilStarted"
    """Executors and Replace: only while the observation shows nothing started."""


@dataclass(frozen=True)
class Start:
    """What an action's starting effect is made from."""

    node: str
    remediation: str
    attempt: int
    policy: Policy
    force: bool = False
    drain: DrainPlan = EVERY_POD
    """Drain only: which pods, and how (`domain/drain.py`)."""
    boot_id: str = ""
    """Reboot only: the bootID the node had when the step started."""
    started_at: datetime | None = None
    """RestartPods only: when the step started (pods created since are not deleted)."""


def _observed(obs: StepObservation | None) -> Outcome | None:
    if obs is None:
        return None
    if obs.progress is Progress.Failed:
        return Outcome.PermanentFailure if obs.permanent else Outcome.TransientFailure
    if obs.progress is Progress.Succeeded:
        return Outcome.Succeeded
    return None


def _cordoned(
    node: NodeView, state: RemediationState, obs: StepObservation | None
) -> Outcome | None:
    return Outcome.Succeeded if node.unschedulable and node.quarantined else None


def _rebooted(
    node: NodeView, state: RemediationState, obs: StepObservation | None
) -> Outcome | None:
    """A new bootID and Ready=True: the agent saying "done" is not proof of a reboot."""
    if node.ready and node.boot_id != (state.boot_id_at_step_start or ""):
        return Outcome.Succeeded
    outcome = _observed(obs)
    return None if outcome is Outcome.Succeeded else outcome


def _reported(
    node: NodeView, state: RemediationState, obs: StepObservation | None
) -> Outcome | None:
    return _observed(obs)


@dataclass(frozen=True)
class Meaning:
    action: Action
    in_place: bool
    """Keeps the node (Cordon holds it, the in-place repairs work on it): protected from
    Karpenter's consolidation meanwhile (`karpenter.sh/do-not-disrupt`), removed on release."""
    start: Callable[[Start], Effect]
    reissue: Reissue
    done: Callable[[NodeView, RemediationState, StepObservation | None], Outcome | None]
    """The step's outcome as observed now (None: still going). Replace's success is the node
    or its NodeClaim observed gone (a node missing from the snapshot closes the incident)."""
    fixed_pace: timedelta | None = None
    """A running step re-checked at this fixed interval; None: the interval grows with age."""
    checks_repair: bool = False
    """Not a rung of the ladder but work around a step already admitted (Validate after a
    repair, Diagnose before one): it adds no disruption, so the circuit breaker does not hold
    it (the node stays cordoned)."""

    @property
    def disruptive(self) -> bool:
        """Takes work away from the node: budgets, rate limit and the evidence gate apply
        (`policy.DISRUPTIVE`, the one list the API and budgets read too)."""
        return self.action in DISRUPTIVE

    def pace(self, started_at: datetime, now: datetime) -> timedelta:
        """How long until the next look at a running step of this action."""
        if self.fixed_pace is not None:
            return self.fixed_pace
        return min(max(now - started_at, PACE_BASE), PACE_CAP)


def _restart(start: Start) -> Effect:
    config = start.policy.validation
    assert start.started_at is not None
    targets = config.restart_pods if config is not None else ()
    return RestartNodePods.started(start.node, targets, start.started_at)


def _executor(start: Start, action: Action) -> Effect:
    boot = start.boot_id if action is Action.Reboot else ""
    return RunExecutor(start.node, start.remediation, action, start.attempt, boot)


ACTIONS: Mapping[Action, Meaning] = {
    Action.Cordon: Meaning(
        Action.Cordon,
        # A cordoned node is held for the ladder or a human (a catch-all Hold, a long
        # escalateAfter): Karpenter must not consolidate it away meanwhile (issue 22, D56).
        in_place=True,
        start=lambda s: Cordon(s.node),
        reissue=Reissue.Always,
        done=_cordoned,
    ),
    Action.Drain: Meaning(
        Action.Drain,
        in_place=True,
        start=lambda s: Evict(s.node, force=s.force, plan=s.drain),
        reissue=Reissue.Always,
        done=_reported,
        fixed_pace=EVICTION_RETRY,
    ),
    Action.GPUReset: Meaning(
        Action.GPUReset,
        in_place=True,
        start=lambda s: _executor(s, Action.GPUReset),
        reissue=Reissue.UntilStarted,
        done=_reported,
    ),
    Action.Reboot: Meaning(
        Action.Reboot,
        in_place=True,
        start=lambda s: _executor(s, Action.Reboot),
        reissue=Reissue.UntilStarted,
        done=_rebooted,
    ),
    Action.Replace: Meaning(
        Action.Replace,
        in_place=False,
        start=lambda s: Replace(s.node, s.policy.actions.replace),
        reissue=Reissue.UntilStarted,
        done=_reported,
    ),
    Action.Validate: Meaning(
        Action.Validate,
        in_place=True,
        start=lambda s: _executor(s, Action.Validate),
        reissue=Reissue.UntilStarted,
        done=_reported,
        checks_repair=True,
    ),
    Action.RestartPods: Meaning(
        Action.RestartPods,
        in_place=True,
        start=lambda s: _restart(s),
        # Applied again only while an old pod is not deleted (a crash between the record and
        # the effect): the effect never deletes a pod created since the step started.
        reissue=Reissue.UntilStarted,
        done=_reported,
        fixed_pace=timedelta(seconds=5),
        checks_repair=True,
    ),
    Action.Diagnose: Meaning(
        Action.Diagnose,
        in_place=False,
        start=lambda s: _executor(s, Action.Diagnose),
        reissue=Reissue.UntilStarted,
        done=_reported,
        checks_repair=True,
    ),
}
"""Every action of the ladder (LADDER_ORDER), one entry each, the validation that may follow
an in-place repair (`domain/validation.py`) and the restart of stale pods before it
(`domain/restarting.py`) and the diagnostics that may precede a destructive
step (`domain/diagnosing.py`)."""


def disruptive(action: Action) -> bool:
    return ACTIONS[action].disruptive


def in_place(action: Action) -> bool:
    return ACTIONS[action].in_place
