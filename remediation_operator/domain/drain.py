"""Workload-aware drain: which pods a Drain step moves, and how, at a given moment.

The policy's `drain.pods` rules say per namespace or pod label whether a pod is evicted at once
(Evict, kubectl drain's behaviour), allowed to finish first (AllowCompletion, as NVIDIA's
NVSentinel does for training Jobs) or deleted after a wait (DeleteAfterTimeout). The waits
count from the Drain step's first start (`step_started_at`, kept in status, so a restarted
operator keeps the deadline), and are judged here, when the plan is made: the effect carries
which rules' waits are over, so the adapter needs no clock. With
`drain.gpuPodsOnlyBeforeReset`, a Drain whose next rung is GPUReset moves only the pods that
request `nvidia.com/gpu` (CPU-only system pods keep running through the reset); if the ladder
goes on to Reboot, that step first evicts the pods left under the full rules (`before_restart`).
"""

from __future__ import annotations

from datetime import datetime

from remediation_operator.domain.effects import DrainPlan
from remediation_operator.domain.policy import Action, Policy
from remediation_operator.domain.remediation import RemediationState


def gpu_only(policy: Policy, fault: str) -> bool:
    """The drain of `fault`'s ladder precedes a GPU reset and the policy drains GPU pods only."""
    if not policy.drain.gpu_pods_only_before_reset:
        return False
    found = next((f for f in policy.faults if f.name == fault), None)
    if found is None:
        return False
    actions = [step.action for step in found.ladder]
    if Action.Drain not in actions:
        return False
    after = actions.index(Action.Drain) + 1
    return after < len(actions) and actions[after] is Action.GPUReset


def before_restart(policy: Policy, state: RemediationState) -> bool:
    """A Reboot of an incident whose Drain moved only GPU pods: the pods that drain left
    (CPU pods, possibly under a PodDisruptionBudget) would stop with the node, so the Reboot
    first evicts them under the rules a full drain gives them (budgets honoured), and its
    executor starts only once none remains (issue 22, D54)."""
    return (
        state.step is Action.Reboot
        and gpu_only(policy, state.fault)
        and any(r.action is Action.Drain for r in state.steps)
    )


def plan(
    policy: Policy, fault: str, since: datetime | None, now: datetime, *, full: bool = False
) -> DrainPlan:
    """The drain plan of `fault`'s Drain step begun at `since` (None: begins now); `full`:
    every pod, whatever `gpuPodsOnlyBeforeReset` says (the eviction before a Reboot)."""
    start = now if since is None else since
    rules = policy.drain.pods
    expired = frozenset(i for i, rule in enumerate(rules) if now >= start + rule.wait_for)
    return DrainPlan(rules, expired, gpu_only(policy, fault) and not full)
