"""A tiny in-test cluster that closes the loop: plan, apply the effects, observe, plan again.

It applies effects the way the engine would (idempotently) and lets a test, or a hypothesis
state machine, play the node agent and the administrator: flip a fault, finish a step, reboot,
cordon or uncordon by hand. It keeps the Remediations' states exactly as the planner returns
them, as the engine would store them in status.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from remediation_operator.domain import durations, planner
from remediation_operator.domain.effects import (
    Cordon,
    Effect,
    Evict,
    ProtectFromConsolidation,
    Release,
    Replace,
    RestartNodePods,
    RunExecutor,
)
from remediation_operator.domain.fleet import (
    BreakerState,
    Condition,
    NodeView,
    Progress,
    Snapshot,
    StepObservation,
)
from remediation_operator.domain.policy import (
    Action,
    ConditionMatch,
    Fault,
    OnExhausted,
    OnPDBBlocked,
    OnTimeout,
    Policy,
    Step,
)
from remediation_operator.domain.remediation import RemediationState

T0 = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)

XID = "AcceleratedHardwareReady"
HEARTBEAT = "GPUHealthy"


def xid_fault(
    tolerate: timedelta = 2 * MIN,
    drain_timeout: timedelta = 30 * MIN,
    on_timeout: OnTimeout = OnTimeout.Escalate,
    retries: int = 2,
    on_pdb_blocked: OnPDBBlocked = OnPDBBlocked.Wait,
) -> Fault:
    """DESIGN's gpu-xid-reset fault: cordon, drain, reset, reboot, replace."""
    return Fault(
        name="gpu-xid-reset",
        match=(ConditionMatch(XID, "False", r"NvidiaXID(46|62|64|95)Error"),),
        tolerate=tolerate,
        ladder=(
            Step(Action.Cordon, escalate_after=5 * MIN),
            Step(
                Action.Drain,
                timeout=drain_timeout,
                on_timeout=on_timeout,
                retries=retries,
                on_pdb_blocked=on_pdb_blocked,
            ),
            Step(Action.GPUReset, timeout=10 * MIN, escalate_after=5 * MIN, retries=retries),
            Step(Action.Reboot, timeout=30 * MIN, escalate_after=10 * MIN, retries=retries),
            Step(Action.Replace, timeout=60 * MIN, retries=retries),
        ),
    )


def silent_fault(on_exhausted: OnExhausted = OnExhausted.Hold) -> Fault:
    """DESIGN's agent-silent fault: a stale heartbeat only ever cordons."""
    return Fault(
        name="agent-silent",
        match=(ConditionMatch(HEARTBEAT, stale_after=5 * MIN),),
        ladder=(Step(Action.Cordon),),
        on_exhausted=on_exhausted,
    )


def policy(**overrides: object) -> Policy:
    base = Policy(name="gpu", faults=(xid_fault(), silent_fault()))
    return replace(base, **overrides)  # type: ignore[arg-type]


def healthy_conditions(now: datetime) -> tuple[Condition, ...]:
    return (
        Condition("Ready", "True"),
        Condition(XID, "True", "AcceleratedHardwareIsReady"),
        Condition(HEARTBEAT, "True", "Healthy", last_heartbeat_time=now, observed_at=now),
    )


def faulty_conditions(now: datetime, xid: int = 62) -> tuple[Condition, ...]:
    return (
        Condition("Ready", "True"),
        Condition(XID, "False", f"NvidiaXID{xid}Error", last_transition_time=now),
        Condition(HEARTBEAT, "True", "Healthy", last_heartbeat_time=now, observed_at=now),
    )


def node(
    name: str = "gpu-1",
    *,
    faulty: bool = False,
    now: datetime = T0,
    labels: dict[str, str] | None = None,
    **fields: object,
) -> NodeView:
    conditions = faulty_conditions(now) if faulty else healthy_conditions(now)
    view = NodeView(
        name,
        labels=labels or {},
        conditions=conditions,
        boot_id="boot-1",
        created_at=T0 - timedelta(days=30),
    )
    return replace(view, **fields)  # type: ignore[arg-type]


@dataclass
class FakeCluster:
    """Nodes and Remediations as the engine would keep them, plus a manual clock."""

    policy: Policy
    nodes: dict[str, NodeView]
    now: datetime = T0
    active: dict[str, RemediationState] = field(default_factory=dict)
    finished: list[RemediationState] = field(default_factory=list)
    observations: dict[str, StepObservation] = field(default_factory=dict)
    approvals: dict[str, frozenset[Action]] = field(default_factory=dict)
    breakers: dict[str, BreakerState] = field(default_factory=dict)
    protected: set[str] = field(default_factory=set)
    """Nodes carrying karpenter.sh/do-not-disrupt."""
    silent: set[str] = field(default_factory=set)
    """Nodes whose health agent stopped heart-beating."""
    last: planner.Plan | None = None
    focus: frozenset[str] | None = None
    """Plan only these nodes (as the engine does when one node's event arrives)."""
    crash_next: bool = False
    """The engine dies after writing the next plan's states, before applying its effects."""

    def snapshot(self, focus: frozenset[str] | None = None) -> Snapshot:
        return Snapshot(
            nodes=dict(self.nodes),
            active=dict(self.active),
            finished=tuple(self.finished),
            observations=dict(self.observations),
            approvals=dict(self.approvals),
            breakers=dict(self.breakers),
            focus=focus,
        )

    def plan(self) -> planner.Plan:
        """Plan at the current time and apply the plan as the engine would."""
        result = self.decide()
        self.record(result)
        if self.crash_next:
            self.crash_next = False
        else:
            for effect in result.effects:
                self.apply(effect)
        self.last = result
        return result

    def decide(self) -> planner.Plan:
        return planner.plan(self.snapshot(self.focus), self.policy, self.now)

    def record(self, result: planner.Plan) -> None:
        """Write the plan's states (the Remediations' status) and breakers."""
        for state in result.remediations:
            if state.terminal:
                self.active.pop(state.node, None)
                self.finished.append(state)
                self.observations.pop(state.node, None)
            else:
                self.active[state.node] = state
        self.breakers = dict(result.breakers)

    def apply(self, effect: Effect) -> None:
        if isinstance(effect, Cordon):
            view = self.nodes.get(effect.node)
            if view is not None and not view.quarantined:
                # The cordon's own marks (k8s/nodes.py): whose it is, and whether it flipped
                # spec.unschedulable.
                self.edit(
                    effect.node,
                    quarantined_by=view.quarantined_by or self.policy.name,
                    uncordon_on_release=view.uncordon_on_release or not view.unschedulable,
                )
            self.edit(effect.node, unschedulable=True, quarantined=True)
        elif isinstance(effect, Release):
            self.edit(effect.node, quarantined=False, quarantined_by="", uncordon_on_release=False)
            if effect.uncordon:
                self.edit(effect.node, unschedulable=False)
        elif isinstance(effect, ProtectFromConsolidation):
            if effect.on:
                self.protected.add(effect.node)
            else:
                self.protected.discard(effect.node)
        elif isinstance(effect, Evict):
            self._progress(effect.node, Action.Drain, Progress.InProgress)
        elif isinstance(effect, RunExecutor):
            self.observations[effect.node] = StepObservation(
                effect.action, effect.attempt, Progress.InProgress
            )
        elif isinstance(effect, Replace):
            self._progress(effect.node, Action.Replace, Progress.InProgress)

    def _progress(self, name: str, action: Action, progress: Progress) -> None:
        state = self.active.get(name)
        attempt = state.attempt if state is not None else 1
        self.observations[name] = StepObservation(action, attempt, progress)

    def edit(self, name: str, **fields: object) -> None:
        if name in self.nodes:
            self.nodes[name] = replace(self.nodes[name], **fields)  # type: ignore[arg-type]

    # ---------------------------------------------------------- the world acting

    def advance(self, delta: timedelta) -> None:
        self.now += delta
        # Healthy agents keep heart-beating: refresh heartbeats of conditions we track.
        for name, view in self.nodes.items():
            if name in self.silent:
                continue
            beats = tuple(
                # The operator sees each beat as it comes (staleness is judged on its clock).
                replace(c, last_heartbeat_time=self.now, observed_at=self.now)
                if c.last_heartbeat_time
                else c
                for c in view.conditions
            )
            self.nodes[name] = replace(view, conditions=beats)

    def set_fault(self, name: str, present: bool) -> None:
        conditions = faulty_conditions(self.now) if present else healthy_conditions(self.now)
        self.silent.discard(name)
        self.edit(name, conditions=conditions)

    def silence(self, name: str) -> None:
        """The health agent stops heart-beating (its condition keeps its old heartbeat)."""
        self.silent.add(name)
        view = self.nodes[name]
        beats = tuple(
            replace(c, last_heartbeat_time=self.now - 10 * MIN, observed_at=self.now - 10 * MIN)
            if c.type == HEARTBEAT
            else c
            for c in view.conditions
        )
        self.nodes[name] = replace(view, conditions=beats)

    def finish_step(self, name: str, *, ok: bool = True, permanent: bool = False) -> None:
        """The current step's executor reports; a reboot also changes the bootID."""
        state = self.active.get(name)
        if state is None or state.step is None:
            return
        if state.step is Action.Reboot and ok:
            view = self.nodes[name]
            self.edit(name, boot_id=view.boot_id + "+")
            return
        if state.step is Action.Replace and ok:
            self.nodes.pop(name, None)  # Karpenter's replacement joins under another name
            return
        progress = Progress.Succeeded if ok else Progress.Failed
        self.observations[name] = StepObservation(
            state.step, state.attempt, progress, message="reported", permanent=permanent
        )


def describe(effects: tuple[Effect, ...]) -> list[str]:
    """Effects as short words a table row can list: `Cordon`, `Run(GPUReset#2)`, `!StepStarted`."""
    words: list[str] = []
    for e in effects:
        if isinstance(e, Cordon):
            words.append("Cordon")
        elif isinstance(e, Release):
            words.append("Release(uncordon)" if e.uncordon else "Release")
        elif isinstance(e, ProtectFromConsolidation):
            words.append("Protect" if e.on else "Unprotect")
        elif isinstance(e, Evict):
            words.append("Evict(force)" if e.force else "Evict")
        elif isinstance(e, RunExecutor):
            words.append(f"Run({e.action}#{e.attempt})")
        elif isinstance(e, Replace):
            words.append(f"Replace({e.provider})")
        elif isinstance(e, RestartNodePods):
            words.append("RestartPods")
        else:
            words.append(f"!{e.reason}")
    return words


def run(cluster: FakeCluster, script: str, name: str = "gpu-1") -> planner.Plan:
    """Play a script of world events on node `name`; return the last plan.

    Words: `plan`; a duration such as `+2m` (advance the clock); `fault` / `clear` (the XID
    condition); `silence` (the heartbeat goes stale); `ok`, `fail`, `fail!` (the current
    step's executor succeeded, failed transiently, failed permanently); `pdb` (the drain is
    blocked by a PodDisruptionBudget); `cordon` / `uncordon` (an administrator); `delete`
    (the node goes away); `approve:<Action>`; `pause` / `unpause`; `exclude` / `include`;
    `crash` (the next plan's states are written but its effects are lost).
    """
    result: planner.Plan | None = None
    for word in script.split():
        if word == "plan":
            result = cluster.plan()
        elif word.startswith("+"):
            cluster.advance(durations.parse(word[1:]))
        elif word in ("fault", "clear"):
            cluster.set_fault(name, word == "fault")
        elif word == "silence":
            cluster.silence(name)
        elif word == "crash":
            cluster.crash_next = True
        elif word in ("ok", "fail", "fail!"):
            cluster.finish_step(name, ok=word == "ok", permanent=word == "fail!")
        elif word == "pdb":
            state = cluster.active[name]
            cluster.observations[name] = StepObservation(
                Action.Drain,
                state.attempt,
                Progress.InProgress,
                blocked_by_pdb=True,
                pdbs=("training/trainer-pdb",),
                blocked_pods=("training/trainer-0",),
            )
        elif word in ("cordon", "uncordon"):
            cluster.edit(name, unschedulable=word == "cordon")
        elif word == "delete":
            cluster.nodes.pop(name, None)
        elif word.startswith("approve:"):
            cluster.approvals[name] = cluster.approvals.get(name, frozenset()) | {
                Action(word.split(":", 1)[1])
            }
        elif word in ("pause", "unpause"):
            cluster.policy = replace(cluster.policy, paused=word == "pause")
        elif word in ("exclude", "include"):
            labels = dict(cluster.nodes[name].labels)
            if word == "exclude":
                labels["remediation.gpuops.io/exclude"] = "true"
            else:
                labels.pop("remediation.gpuops.io/exclude", None)
            cluster.edit(name, labels=labels)
        else:
            raise ValueError(f"unknown script word {word!r}")
    assert result is not None, "a script must plan at least once"
    return result


def sooner_silence(cluster: FakeCluster, wake: datetime | None) -> datetime | None:
    """`wake`, or the first later instant at which a node's heartbeat goes stale if it is
    earlier: going stale is no event, so a plan also wakes then (the answer changes at the
    first instant after `observed_at + staleAfter`)."""
    windows = [
        m.stale_after
        for f in cluster.policy.faults
        for m in f.match
        if m.type == HEARTBEAT and m.stale_after is not None
    ]
    if not windows:
        return wake
    instants = [wake] if wake is not None else []
    for view in cluster.nodes.values():
        beat = view.condition(HEARTBEAT)
        if beat is None or beat.observed_at is None:
            continue
        stale = beat.observed_at + min(windows) + timedelta(microseconds=1)
        if stale > cluster.now:
            instants.append(stale)
    return min(instants, default=None)
