"""The world the safety model drives: a cluster, node agents, administrators and policies.

Real: `engine.reconciler.reconcile` with the real planner, over `sim.memory_cluster`. The
test side adds only what the in-memory cluster does not model, in `SafetyCluster`: Karpenter
(the NodeClaim CRD) being absent, a PodDisruptionBudget appearing and going on a pod, an
annotation an administrator writes on a Node. Node agents are modelled here: each writes the
node's `AcceleratedHardwareReady` condition on every tick while alive (the EKS node monitoring
agent's behaviour), with its own clock (possibly a year ahead), or stops writing (dead).

`Operator` is one operator process: it reconciles a policy with ownership across policies
decided as the runtime decides it (`engine.ownership` through the cluster, when the engine has
it: the model also runs against the tree before issue 12) and keeps wake-ups as
`handlers/workers.py` does; the model (`model.SafetyModel.settle`) decides when, as the runtime
would. It may be told to die just before its k-th next write (`kill_after`). A restart drops
everything a process keeps in memory (the index's per-policy tallies, which drains it
attempted, when it saw each condition change, its wake-up times) and rebuilds from the cluster.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from remediation_operator.domain.policy import (
    Action,
    Budget,
    CircuitBreaker,
    ConditionMatch,
    Fault,
    History,
    Mode,
    OnExhausted,
    OnPDBBlocked,
    OnTimeout,
    Policy,
    Rate,
    Recovery,
    ReplaceProvider,
    Step,
)
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.engine import reconciler
from remediation_operator.engine.ports import ClusterPort, Ports, RecordPort
from remediation_operator.sim.memory_cluster import MemoryCluster, MemoryRecorder

T0 = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
AHR = "AcceleratedHardwareReady"
FAULT_REASON = "NvidiaXID62Error"
MILD_REASON = "NvidiaXID63Error"
"""A newer, milder finding no policy acts on (a row remap): it overwrites the reason."""
HEALTHY_REASON = "AcceleratedHardwareReady"
STALE_AFTER = timedelta(minutes=5)
"""The policies' `staleAfter` on AHR: also the freshness window for positive evidence."""
SKEW = timedelta(days=365)
"""A skewed agent's clock runs this far ahead of ours."""
TICK = timedelta(seconds=60)
"""Live agents write their condition at least this often (time advances in such steps)."""
FAR = datetime(2100, 1, 1, tzinfo=UTC)
EXCLUDE_KEY = "remediation.gpuops.io/exclude"

NODES = ("n0", "n1", "n2")
GPUS = 8
"""Every node's `nvidia.com/gpu` capacity."""
TEAM_X = frozenset({"n0", "n1"})
"""Selected by both policies (`beta` selects team=x, `alpha` selects the whole pool)."""
POLICIES = ("alpha", "beta")

XID = "gpu-xid"
SILENT = "gpu-silent"


class AgentMode(StrEnum):
    alive = "alive"
    skewed = "skewed"
    """Alive, with a clock a year ahead of ours (every beat is in the future)."""
    dead = "dead"
    """Stopped writing; its last beat stays."""
    stuck_future = "stuck_future"
    """Wrote one beat a year ahead, then stopped."""
    absent = "absent"
    """This node has no such agent: the condition was never written."""


_TAKES_NOW: dict[type, bool] = {}


def _takes_now(cluster: type) -> bool:
    """Whether the cluster class's `foreign` judges faults at `now` (D61; asked once)."""
    known = _TAKES_NOW.get(cluster)
    if known is None:
        known = _TAKES_NOW[cluster] = "now" in inspect.signature(cluster.foreign).parameters  # type: ignore[attr-defined]
    return known


def node_labels(name: str) -> dict[str, str]:
    labels = {"pool": "gpu", "zone": "z1"}
    if name in TEAM_X:
        labels["team"] = "x"
    return labels


# --------------------------------------------------------------------------------------------
# Policies


@dataclass(frozen=True)
class PolicyConfig:
    """What the model varies about one RemediationPolicy (built into a `Policy` by `build`)."""

    name: str
    created_at: datetime
    generation: int = 1
    weight: int = 0
    mode: Mode = Mode.Enforce
    rungs: tuple[Action, ...] = (
        Action.Cordon,
        Action.Drain,
        Action.GPUReset,
        Action.Reboot,
        Action.Replace,
    )
    on_exhausted: OnExhausted = OnExhausted.Hold
    tolerate: timedelta = timedelta(0)
    budget: int | None = None
    rate: bool = False
    breaker_min_nodes: int | None = None
    approval: bool = False
    history: bool = False
    drain_force: bool = False
    drain_escalate_pdb: bool = False

    @property
    def selector(self) -> dict[str, str]:
        return {"pool": "gpu"} if self.name == "alpha" else {"team": "x"}

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.selector.items())


HEALTHY_FOR = timedelta(minutes=2)
"""Every policy's `recovery.healthyFor`."""
RATE = Rate(max=2, per=timedelta(minutes=30))
HISTORY = History(window=timedelta(hours=2), max_episodes=2, then=Action.Replace)
BREAKER_LIMIT = "25%"


def step_of(config: PolicyConfig, action: Action) -> Step:
    minute = timedelta(minutes=1)
    if action is Action.Cordon:
        return Step(action, escalate_after=timedelta(seconds=30))
    if action is Action.Drain:
        return Step(
            action,
            timeout=5 * minute,
            on_timeout=OnTimeout.Force if config.drain_force else OnTimeout.Escalate,
            on_pdb_blocked=(
                OnPDBBlocked.Escalate if config.drain_escalate_pdb else OnPDBBlocked.Wait
            ),
        )
    if action is Action.GPUReset:
        return Step(action, timeout=4 * minute, escalate_after=minute, retries=1)
    if action is Action.Reboot:
        return Step(action, timeout=6 * minute, escalate_after=minute, retries=1)
    return Step(action, timeout=8 * minute)


def build(config: PolicyConfig, *, deleted: bool = False) -> Policy:
    xid = Fault(
        name=XID,
        match=(ConditionMatch(AHR, "False", r"NvidiaXID(62|79)Error"),),
        ladder=tuple(step_of(config, a) for a in config.rungs),
        tolerate=config.tolerate,
        on_exhausted=config.on_exhausted,
    )
    silent = Fault(
        name=SILENT,
        match=(ConditionMatch(AHR, stale_after=STALE_AFTER),),
        ladder=(Step(Action.Cordon),),
        tolerate=timedelta(minutes=1),
        on_exhausted=OnExhausted.Hold,
    )
    breaker = (
        CircuitBreaker(
            BREAKER_LIMIT,
            min_nodes=config.breaker_min_nodes,
            cooldown=timedelta(minutes=5),
            group_by="zone",
        )
        if config.breaker_min_nodes is not None
        else None
    )
    return Policy(
        name=config.name,
        faults=(xid, silent),
        generation=config.generation,
        node_selector=LabelSelector(match_labels=config.selector),
        mode=config.mode,
        recovery=Recovery(healthy_for=HEALTHY_FOR),
        history=HISTORY if config.history else None,
        budgets=(Budget(str(config.budget)),) if config.budget is not None else (),
        rate=RATE if config.rate else None,
        circuit_breaker=breaker,
        require_approval=frozenset({Action.Replace}) if config.approval else frozenset(),
        startup_grace=timedelta(0),
        weight=config.weight,
        created_at=config.created_at,
        deleted=deleted,
    )


# --------------------------------------------------------------------------------------------
# The cluster


class SafetyCluster(MemoryCluster):
    """The in-memory cluster plus the few knobs the model needs that it lacks."""

    karpenter = True
    """Whether the NodeClaim CRD exists (Karpenter installed): new nodes get a NodeClaim."""

    def set_annotation(self, node: str, key: str, value: str | None) -> None:
        """An administrator's `kubectl annotate node`."""
        annotations = self._get(node)["metadata"]["annotations"]
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
        self._touch(node)

    def set_gpus(self, node: str, capacity: int, allocatable: int) -> None:
        """The kubelet's `nvidia.com/gpu` counts (the device plugin's healthy GPUs)."""
        status = self._get(node)["status"]
        status["capacity"] = {"nvidia.com/gpu": str(capacity)}
        status["allocatable"] = {"nvidia.com/gpu": str(allocatable)}
        self._touch(node)

    def uninstall_karpenter(self) -> None:
        """The NodeClaim CRD goes away: no node is owned by a NodeClaim any more."""
        self.karpenter = False
        for name in list(self._claim_of):
            self._claims.pop(self._claim_of.pop(name), None)
            self._nodes[name]["metadata"].pop("ownerReferences", None)
            self._touch(name)
        self._claims_deleting.clear()

    async def replace(self, node: str, provider: ReplaceProvider) -> None:
        # With no NodeClaim, nothing acts on a Karpenter replacement: the node stays.
        claimless = provider is ReplaceProvider.Karpenter and node not in self._claim_of
        try:
            await super().replace(node, provider)
        finally:
            if claimless:
                self._replacements.pop(node, None)

    def set_pdb(self, node: str, protected: bool) -> list[str]:
        """A PodDisruptionBudget starts (or stops) covering every workload pod on the node."""
        names = []
        for pod in self.pods(node):
            if pod.evictable:
                pod.protected_until = FAR if protected else None
                names.append(pod.name)
        return names

    def protected_pods(self, node: str) -> list[str]:
        return [
            p.name
            for p in self.pods(node)
            if p.evictable and p.protected_until is not None and self.now < p.protected_until
        ]


# --------------------------------------------------------------------------------------------
# The operator


@functools.cache
def _accepts(name: str) -> bool:
    try:
        return name in inspect.signature(reconciler.reconcile).parameters
    except (TypeError, ValueError):
        return False


WRITES = frozenset(
    {
        "cordon",
        "requarantine",
        "release",
        "protect_from_consolidation",
        "evict",
        "run_executor",
        "replace",
        "create_remediation",
        "update_remediation",
        "write_policy_state",
        "emit",
    }
)
"""Port calls that change something: the process may die just before any of them."""


class KilledError(BaseException):
    """The operator process died mid-reconcile (BaseException: the engine may not catch it)."""


class _Mortal:
    """A port whose next writes count down to the process's death (`Operator.kill_after`)."""

    def __init__(self, target: object, operator: Operator) -> None:
        self._target = target
        self._operator = operator

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._target, name)
        if name not in WRITES:
            return member

        async def call(*args: Any, **kwargs: Any) -> Any:
            operator = self._operator
            if operator.kill_after is not None:
                if operator.kill_after == 0:
                    operator.kill_after = None
                    raise KilledError(f"killed before {name}")
                operator.kill_after -= 1
            return await member(*args, **kwargs)

        return call


@dataclass
class Operator:
    """One operator process: reconciles every live policy the way the runtime does."""

    cluster: SafetyCluster
    recorder: MemoryRecorder = field(default_factory=MemoryRecorder)
    wakes: dict[str, datetime | None] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    kill_after: int | None = None
    """The process dies just before its next write after this many more (None: it lives)."""

    def close(self) -> None:
        self.loop.close()

    def reconcile(
        self, policy: Policy, others: Iterable[Policy], focus: Iterable[str] | None
    ) -> reconciler.Reconciled:
        kwargs: dict[str, Any] = {}
        everyone = (policy, *others)
        if _accepts("foreign") and hasattr(self.cluster, "foreign"):
            # Ownership across policies, decided as the runtime does (engine.ownership). The
            # model also runs against revisions without it (issue 12's reverted fixes).
            # Fault-aware ownership (D61) where the revision has it.
            aware = _takes_now(type(self.cluster))
            now = self.cluster.now if aware else None
            kwargs["foreign"] = lambda: (
                self.cluster.foreign(policy, everyone, now)
                if aware
                else self.cluster.foreign(policy, everyone)
            )
            if aware and _accepts("superseding") and hasattr(self.cluster, "superseding"):
                # A cordon-only incident yields to another policy's acting fault (D76).
                kwargs["superseding"] = lambda: self.cluster.superseding(
                    policy, everyone, self.cluster.now
                )
                kwargs["claimed"] = lambda: self.cluster.claimed(policy, everyone, self.cluster.now)
        ports = self.cluster.ports(self.recorder)
        if self.kill_after is not None:
            ports = Ports(
                cluster=cast(ClusterPort, _Mortal(ports.cluster, self)),
                records=cast(RecordPort, _Mortal(ports.records, self)),
                recorder=ports.recorder,
            )
        result = self.loop.run_until_complete(
            reconciler.reconcile(
                policy,
                self.cluster.views(),
                ports,
                self.cluster.now,
                None if focus is None else frozenset(focus),
                **kwargs,
            )
        )
        # As handlers/workers.py: a focused plan only knows its nodes' deadlines.
        wake, now = self.wakes.get(policy.name), self.cluster.now
        if focus is None or wake is None or wake <= now:
            self.wakes[policy.name] = result.next_wake
        elif result.next_wake is not None:
            self.wakes[policy.name] = min(wake, result.next_wake)
        return result

    def stale_deadlines(self) -> dict[str, datetime]:
        """By node: when its agent's condition goes stale if nothing changes (what the
        runtime's node cache wakes the node's policies for, handlers/node_cache.py)."""
        out: dict[str, datetime] = {}
        for name, view in self.cluster.views().items():
            condition = view.condition(AHR)
            if condition is None:
                continue
            seen = condition.observed_at or condition.last_heartbeat_time
            if seen is not None:
                out[name] = seen + STALE_AFTER + timedelta(seconds=1)
        return out

    def restart(self, policies: Iterable[str]) -> None:
        """A new process: nothing kept in memory survives; the next reconciles are full."""
        self.cluster.restart_operator()
        views = self.cluster.views()
        for name in policies:
            views.forget(name)
        self.wakes = {name: self.cluster.now for name in policies}
