"""One reconcile of one policy: observe, plan once, carry the plan out once, record it.

The caller (the kopf runtime, or the simulator) decides when to call `reconcile`: on a
relevant event, or at the `next_wake` the previous call returned. Nothing here loops waiting
for completion or sleeps; completion is observed at the next call.

Order of work for one node, chosen so that a crash at any point is repaired by the next call:

1. Clean-up effects (`Release`, `ProtectFromConsolidation(on=False)`) run BEFORE the state
   that records them (Recovered, Cancelled) is written: if we crash in between, the next plan
   decides the same clean-up again and the idempotent effect is repeated.
2. A `Cordon` runs next, BEFORE the state that records its step: it is the reaction a
   fault waits for, and the node records it itself (the cordon's own patch writes
   `quarantined-by` and, if it flipped spec.unschedulable, `uncordon-on-release`;
   docs/decisions.md D14). If we crash before the state is written, the next plan either
   opens the incident again (fault still there; the mark says the cordon is ours, so it is
   undone at the end) or, fault gone, releases the unrecorded cordon
   (`UnrecordedCordonReleased`). The cordon is idempotent, so a re-plan repeats nothing.
3. The new Remediation state is written (optimistic concurrency). On `Conflict` nothing else
   is done for that node; its Remediations are re-read and the node is planned again.
4. The other starting effects (`ProtectFromConsolidation(on=True)`, `Evict`, `RunExecutor`,
   `Replace`) run AFTER the state that records their step: if we crash in between, the next
   call finds the step recorded but its effect absent (`Progress.Absent`, an uncordoned node)
   and re-applies exactly that effect ("resume"), so no step is repeated or skipped.
5. Announcements become Events, log lines and metrics once the state is written.

Resuming is limited to a Remediation still `Running` the same step and attempt after the plan:
a step the planner moved on from (escalated, timed out, fault gone, blocked) is never resumed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeVar

from remediation_operator.domain import bounds, gates, planner, restarting
from remediation_operator.domain.actions import ACTIONS, Start
from remediation_operator.domain.drain import before_restart
from remediation_operator.domain.drain import plan as drain_plan
from remediation_operator.domain.effects import (
    Announce,
    Cordon,
    Effect,
    Evict,
    ProtectFromConsolidation,
    Release,
    Replace,
    RestartNodePods,
    RunExecutor,
)
from remediation_operator.domain.fleet import NodeView, Progress, Snapshot, StepObservation
from remediation_operator.domain.planner import Plan, PolicySummary
from remediation_operator.domain.policy import (
    EXPECTED_BOOT_ID_ENV,
    Action,
    ActionExecutor,
    Executor,
    Mode,
    Policy,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from remediation_operator.engine import explain, node_index
from remediation_operator.engine.node_index import NodeIndex
from remediation_operator.engine.ports import (
    ClusterPort,
    Conflict,
    DrainStatus,
    Explanation,
    NotFound,
    PolicyState,
    Ports,
    Refused,
    RemediationRecord,
    StepTransition,
    Transient,
)

APPROVE_ANNOTATION = gates.APPROVE_ANNOTATION
"""On a Remediation: comma-separated actions a human approved (e.g. `Replace`)."""

FOREIGN_NAME_BACKOFF = timedelta(seconds=30)
"""A create that found the name taken by a Remediation of another policy is tried again after
this, not at once (names carry the policy, so this means a stray object; issue 12 saw a
collision spin a core)."""

IMMEDIATE_RETRIES = 2
"""A `Transient` failure is retried at once this many times; after that the call returns a
wake-up at the port's `retry_after` hint instead of sleeping."""

MAX_ROUNDS = 3
"""Plans per call: the first, plus re-plans of nodes whose write hit a `Conflict`."""

OBSERVATION_CONCURRENCY = 16
"""At most this many observation calls in flight (the real API has rate limits)."""

PlanFunction = Callable[[Snapshot, Policy, datetime], Plan]

_START_RANK: dict[type, int] = {
    ProtectFromConsolidation: 0,
    Cordon: 1,
    Evict: 2,
    RunExecutor: 3,
    RestartNodePods: 3,
    Replace: 4,
}

_DISRUPTIVE_STARTS = (Evict, RunExecutor, Replace)
"""Effects that start a budgeted step (a RunExecutor may be a Validate or Diagnose: counted
all the same, which only makes the ordering rule in `_Run.apply` more careful)."""


def _disrupts(effect: Effect) -> bool:
    return isinstance(effect, _DISRUPTIVE_STARTS)


T = TypeVar("T")


class EffectResult(StrEnum):
    """What became of one effect (a log field and a metric label)."""

    ok = "ok"
    node_gone = "node_gone"
    """The port said NotFound: the node went away; tolerated."""
    failed = "failed"
    """Transient after the immediate retries; a wake-up at the port's hint is scheduled."""
    skipped_dry_run = "skipped_dry_run"
    """The policy is in DryRun: nothing on the cluster is changed (except undoing what an
    earlier Enforce incident did, which never depends on the mode)."""
    refused = "refused"
    """The port said the step cannot be done on this node (`Refused`); the next observation
    reports the step failed for good, with the reason."""


@dataclass(frozen=True)
class Applied:
    """One effect the engine carried out (or did not), for logs, metrics and tests.

    `resumed`: the effect re-applies a recorded step whose effect was found absent.
    """

    policy: str
    node: str
    effect: Effect
    result: EffectResult
    resumed: bool = False
    message: str = ""


@dataclass(frozen=True)
class Reconciled:
    """What one call did, and when the caller should call again."""

    next_wake: datetime | None
    """The earliest deadline (planner's, or a retry after a transient failure); None: only
    an event can change anything."""
    applied: tuple[Applied, ...] = ()
    written: tuple[RemediationState, ...] = ()
    explained: tuple[Explanation, ...] = ()
    transitions: tuple[StepTransition, ...] = ()
    replanned: frozenset[str] = frozenset()
    """Nodes planned again after a Conflict on their Remediation."""
    summary: PolicySummary | None = None
    census: Mapping[tuple[Phase, str], int] = field(default_factory=dict)
    """This policy's Remediations (active and retained) by (phase, fault), after the call."""
    blocked: Mapping[Reason, int] = field(default_factory=dict)
    """Active Remediations in phase Blocked, by reason, after the call."""
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    """The planner's reason per planned node."""
    errors: tuple[str, ...] = ()
    """One sentence per transient failure that left something for a later call."""


def select(policy: Policy, nodes: Mapping[str, NodeView]) -> Mapping[str, NodeView]:
    """The nodes the policy's nodeSelector selects (all of them for an empty selector)."""
    selector = policy.node_selector
    if isinstance(nodes, NodeIndex):
        return nodes.selected(selector)
    if not selector.match_labels and not selector.match_expressions:
        return nodes
    return {name: view for name, view in nodes.items() if selector.matches(view.labels)}


def not_ready_elsewhere(
    nodes: Mapping[str, NodeView],
    selected: Mapping[str, NodeView],
    active: Collection[str],
) -> frozenset[str]:
    """Selected nodes that are NotReady and have no Remediation of ours (budgets count them)."""
    if isinstance(nodes, NodeIndex):
        candidates: Iterable[str] = nodes.not_ready()
        return frozenset(n for n in candidates if n in selected and n not in active)
    return frozenset(n for n, v in selected.items() if n not in active and node_index.not_ready(v))


_ACTIONS_BY_LOWER = {a.value.lower(): a for a in Action}
_NO_APPROVALS: frozenset[Action] = frozenset()


def approvals(annotations: Mapping[str, str]) -> frozenset[Action]:
    """Actions approved by the `remediation.gpuops.io/approve` annotation (unknown words are
    ignored; matching is case-insensitive, so `replace` approves Replace). Called for every
    active Remediation on every reconcile: the common case (no annotation) is one lookup."""
    raw = annotations.get(APPROVE_ANNOTATION)
    if not raw:
        return _NO_APPROVALS
    words = (w.strip().lower() for w in raw.split(","))
    return frozenset(_ACTIONS_BY_LOWER[w] for w in words if w in _ACTIONS_BY_LOWER)


def in_progress(state: RemediationState) -> bool:
    """The state records a step that has started and not yet ended."""
    return not state.terminal and state.step is not None and state.step_finished_at is None


def executor_of(
    policy: Policy, action: Action, remediation: str = "", attempt: int = 0
) -> ActionExecutor:
    """How the policy carries out GPUReset, Reboot, the validation after them or the
    diagnostics before a destructive step (run `attempt` of incident `remediation`)."""
    if action is Action.Diagnose:
        diagnostics = policy.diagnostics
        if diagnostics is None:
            return ActionExecutor()
        return diagnostics.job(remediation, attempt)
    if action is Action.Validate:
        validation = policy.validation
        return validation.executor if validation is not None else ActionExecutor()
    return policy.actions.reboot if action is Action.Reboot else policy.actions.gpu_reset


class _RetriesExhaustedError(Exception):
    def __init__(self, cause: Transient) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def _retrying(call: Callable[[], Awaitable[T]]) -> T:
    """Run a port call, retrying a Transient failure at once up to IMMEDIATE_RETRIES times."""
    for attempt in range(IMMEDIATE_RETRIES + 1):
        try:
            return await call()
        except Transient as err:
            if attempt == IMMEDIATE_RETRIES:
                raise _RetriesExhaustedError(err) from err
    raise AssertionError("unreachable")


@dataclass
class _Observed:
    observations: dict[str, StepObservation] = field(default_factory=dict)
    resume: dict[str, list[Effect]] = field(default_factory=dict)
    unobservable: set[str] = field(default_factory=set)
    retry_after: timedelta | None = None
    errors: list[str] = field(default_factory=list)


def _resume_effects(
    state: RemediationState,
    policy: Policy,
    node: NodeView | None,
    drain: DrainStatus | None,
    now: datetime,
) -> list[Effect]:
    """The effect of the recorded step, when observation shows it was never carried out."""
    name, step = state.node, state.step
    if step is None:
        return []
    meaning = ACTIONS[step]
    if step is Action.Cordon:
        # Only when our taint is absent: cordon and taint go in one write, so a taint without
        # the cordon means an administrator uncordoned the node, which the planner honours.
        if node is None or node.quarantined:
            return []
    elif step is Action.Drain and (drain is None or drain.remaining == 0 or drain.attempted):
        return []
    forced = state.reason is Reason.DrainForced
    pods = drain_plan(policy, state.fault, state.step_started_at, now)
    boot = state.boot_id_at_step_start or ""
    effect = meaning.start(
        Start(
            name,
            state.name,
            state.attempt,
            policy,
            forced,
            drain=pods,
            boot_id=boot,
            started_at=state.step_started_at,
        )
    )
    if meaning.in_place and step is not Action.Cordon:
        # (A resumed Cordon is the cordon alone: its do-not-disrupt follows with the next
        # in-place step's start, or the cordon's own next start, D56.)
        return [ProtectFromConsolidation(name, True), effect]
    return [effect]


async def _observe_one(
    state: RemediationState,
    policy: Policy,
    nodes: Mapping[str, NodeView],
    ports: Ports,
    out: _Observed,
    now: datetime,
) -> None:
    node, step, attempt = state.node, state.step, state.attempt
    if step is None:
        return
    cluster = ports.cluster
    resume: list[Effect] = []
    try:
        if step is Action.Cordon:
            resume = _resume_effects(state, policy, nodes.get(node), None, now)
        elif step is Action.Drain:
            pods = drain_plan(policy, state.fault, state.step_started_at, now)
            drain = await _retrying(lambda: cluster.drain_status(node, pods))
            done = drain.remaining == 0
            out.observations[node] = StepObservation(
                action=step,
                attempt=attempt,
                progress=Progress.Succeeded if done else Progress.InProgress,
                message=drain.message,
                blocked_by_pdb=drain.blocked_by_pdb,
                pdbs=drain.pdbs,
                blocked_pods=drain.blocked_pods,
            )
            resume = _resume_effects(state, policy, nodes.get(node), drain, now)
        elif step in (Action.GPUReset, Action.Reboot, Action.Validate, Action.Diagnose):
            executor = executor_of(policy, step, state.name, attempt)
            status = await _retrying(
                lambda: cluster.executor_status(node, state.name, step, attempt, executor)
            )
            if status.progress is Progress.Absent and before_restart(policy, state):
                # Not rebooting before the pods a GPU-only drain left are gone (D54).
                everything = drain_plan(policy, state.fault, state.step_started_at, now, full=True)
                left = await _retrying(lambda: cluster.drain_status(node, everything))
                if left.remaining:
                    out.observations[node] = StepObservation(
                        action=step,
                        attempt=attempt,
                        progress=Progress.InProgress,
                        message=left.message,
                        blocked_by_pdb=left.blocked_by_pdb,
                        pdbs=left.pdbs,
                        blocked_pods=left.blocked_pods,
                        evicting=True,
                    )
                    out.resume[node] = [Evict(node, plan=everything)]
                    return
            out.observations[node] = StepObservation(
                action=step,
                attempt=attempt,
                progress=status.progress,
                message=status.message,
                permanent=status.permanent,
                not_run=status.not_run,
                started=status.started,
            )
            if status.progress is Progress.Absent:
                resume = _resume_effects(state, policy, nodes.get(node), None, now)
        elif step is Action.RestartPods:
            validation = policy.validation
            targets = validation.restart_pods if validation is not None else ()
            started = state.step_started_at
            if started is not None:
                # (The policy's list emptied meanwhile: nothing is waited for.)
                found = await _retrying(lambda: cluster.node_pods(node, targets)) if targets else ()
                restarted = state.steps[-1].restarted if state.steps else ()
                seen = restarting.observation(targets, found, started, attempt, restarted)
                out.observations[node] = seen
                if seen.progress is Progress.Absent:
                    # An old pod is not deleted: the restart's effect did not happen (a crash
                    # between its record and its effect). Applied again, it deletes only
                    # pods created before the step started.
                    resume = _resume_effects(state, policy, nodes.get(node), None, now)
        elif step is Action.Replace:
            progress = await _retrying(
                lambda: cluster.replacement_status(node, policy.actions.replace)
            )
            out.observations[node] = StepObservation(
                action=step, attempt=attempt, progress=progress
            )
            if progress is Progress.Absent and node in nodes:
                resume = _resume_effects(state, policy, nodes.get(node), None, now)
    except Refused as refused:
        # The step cannot be done on this node: it fails for good now, with the reason.
        out.observations[node] = StepObservation(
            action=step,
            attempt=attempt,
            progress=Progress.Failed,
            message=str(refused),
            permanent=True,
        )
    except NotFound:
        # The node went away: the planner sees it missing from the snapshot (or, for Replace,
        # that is the success it waits for).
        if step is Action.Replace:
            out.observations[node] = StepObservation(
                action=step, attempt=attempt, progress=Progress.Succeeded
            )
    except _RetriesExhaustedError as failed:
        out.unobservable.add(node)
        out.errors.append(f"Could not observe {step} on node {node}: {failed.cause}.")
        hint = failed.cause.retry_after
        out.retry_after = hint if out.retry_after is None else min(out.retry_after, hint)
    if resume:
        out.resume[node] = resume


async def _observe(
    states: Iterable[RemediationState],
    policy: Policy,
    nodes: Mapping[str, NodeView],
    ports: Ports,
    now: datetime,
) -> _Observed:
    out = _Observed()
    gate = asyncio.Semaphore(OBSERVATION_CONCURRENCY)

    async def one(state: RemediationState) -> None:
        async with gate:
            await _observe_one(state, policy, nodes, ports, out, now)

    await asyncio.gather(*(one(s) for s in states))
    return out


def _is_cleanup(effect: Effect) -> bool:
    return isinstance(effect, Release) or (
        isinstance(effect, ProtectFromConsolidation) and not effect.on
    )


async def _dispatch(effect: Effect, policy: Policy, cluster: ClusterPort, fault: str) -> None:
    match effect:
        case Cordon(node=node):
            await cluster.cordon(node, fault, policy.name)
        case Release(node=node, uncordon=uncordon):
            await cluster.release(node, uncordon)
        case ProtectFromConsolidation(node=node, on=on):
            await cluster.protect_from_consolidation(node, on)
        case Evict(node=node, force=force, plan=pods):
            await cluster.evict(node, force, pods)
        case RunExecutor(
            node=node, remediation=name, action=action, attempt=attempt, boot_id=boot_id
        ):
            executor = executor_of(policy, action, name, attempt)
            if boot_id and executor.executor is Executor.Job:
                env = {**executor.env, EXPECTED_BOOT_ID_ENV: boot_id}
                executor = replace(executor, env=env)
            await cluster.run_executor(node, name, action, attempt, executor)
        case RestartNodePods(node=node, targets=targets, created_before=before):
            await cluster.restart_node_pods(node, targets, before)
        case Replace(node=node, provider=provider):
            await cluster.replace(node, provider)
        case Announce():
            raise TypeError("an Announce is not an effect on the cluster")


def _same_step(a: RemediationState, b: RemediationState) -> bool:
    return (
        a.name == b.name
        and a.step is b.step
        and a.attempt == b.attempt
        and a.step_started_at == b.step_started_at
    )


@dataclass
class _Run:
    """Everything one call accumulates across its planning rounds."""

    policy: Policy
    ports: Ports
    now: datetime
    records: dict[str, RemediationRecord]
    applied: list[Applied] = field(default_factory=list)
    written: list[RemediationState] = field(default_factory=list)
    explained: list[Explanation] = field(default_factory=list)
    transitions: list[StepTransition] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retry_after: timedelta | None = None

    # Reading ---------------------------------------------------------------------------------

    def active(self) -> dict[str, RemediationRecord]:
        """Non-terminal Remediations by node; if a node has several, the oldest wins."""
        out: dict[str, RemediationRecord] = {}
        for record in self.records.values():
            state = record.state
            if state.terminal:
                continue
            other = out.get(state.node)
            if other is None or (state.started_at, state.name) < (
                other.state.started_at,
                other.state.name,
            ):
                out[state.node] = record
        return out

    def finished(self) -> tuple[RemediationState, ...]:
        return tuple(r.state for r in self.records.values() if r.state.terminal)

    # Failures --------------------------------------------------------------------------------

    def failed(self, what: str, err: Transient) -> None:
        self.errors.append(f"{what}: {err}.")
        self.wake_within(err.retry_after)

    def wake_within(self, delay: timedelta) -> None:
        self.retry_after = delay if self.retry_after is None else min(self.retry_after, delay)

    # Doing -----------------------------------------------------------------------------------

    async def effect(self, effect: Effect, fault: str, resumed: bool = False) -> bool:
        """Carry out one mutating effect; False when it failed transiently."""
        policy, node = self.policy, effect.node
        result, message = EffectResult.ok, ""
        if policy.mode is Mode.DryRun and not _is_cleanup(effect):
            # The planner emits no mutating effect in DryRun; this guard makes it a promise.
            # Undoing what an Enforce incident did is not a change the mode may hold back.
            result = EffectResult.skipped_dry_run
        else:
            cluster = self.ports.cluster
            try:
                await _retrying(lambda: _dispatch(effect, policy, cluster, fault))
            except NotFound:
                result, message = EffectResult.node_gone, f"Node {node} no longer exists."
            except Refused as refused:
                # Observed at once: the step fails with this reason, not at its timeout.
                result, message = EffectResult.refused, str(refused)
                self.errors.append(f"{type(effect).__name__} on node {node}: {refused}.")
                self.wake_within(timedelta(0))
            except _RetriesExhaustedError as failed:
                result, message = EffectResult.failed, str(failed.cause)
                self.failed(f"{type(effect).__name__} on node {node}", failed.cause)
        self.applied.append(Applied(policy.name, node, effect, result, resumed, message))
        self.ports.recorder.applied(policy.name, type(effect).__name__, node, result)
        return result is not EffectResult.failed

    async def write(self, state: RemediationState) -> bool | None:
        """Write a new or changed state. True: written; False: Conflict; None: transient."""
        previous = self.records.get(state.name)
        if previous is not None and previous.state == state:
            return True
        records = self.ports.records
        try:
            if previous is None:
                record = await _retrying(lambda: records.create_remediation(state))
            else:
                version = previous.resource_version
                record = await _retrying(lambda: records.update_remediation(state, version))
        except Conflict:
            if previous is None and await self._taken_elsewhere(state):
                return None
            return False
        except NotFound:
            return False
        except _RetriesExhaustedError as failed:
            self.failed(f"Writing Remediation {state.name}", failed.cause)
            return None
        self.records[state.name] = record
        self.written.append(record.state)
        old = previous.state if previous is not None else None
        for transition in explain.transitions(old, record.state):
            self.transitions.append(transition)
            self.ports.recorder.step(transition)
        return True

    async def _taken_elsewhere(self, state: RemediationState) -> bool:
        """A create found the name taken by an object this policy does not list: re-planning
        at once would choose the same name and fail again, so wait instead (and say so)."""
        try:
            other = await _retrying(lambda: self.ports.records.get_remediation(state.name))
        except (NotFound, _RetriesExhaustedError):
            return False  # gone already, or unknown: an ordinary conflict, re-planned
        if other.state.policy == self.policy.name and other.state.node == state.node:
            return False
        self.errors.append(
            f"Remediation {state.name} for node {state.node} cannot be created: the name is"
            f" taken by a Remediation of policy {other.state.policy or '(none)'} for node"
            f" {other.state.node}; retrying in {int(FOREIGN_NAME_BACKOFF.total_seconds())}s."
        )
        self.wake_within(FOREIGN_NAME_BACKOFF)
        return True

    async def announce(self, announce: Announce) -> None:
        record = explain.explanation(announce, self.policy.name, self.now)
        self.explained.append(record)
        self.ports.recorder.announced(record)
        try:
            await _retrying(lambda: self.ports.records.emit(record))
        except NotFound:
            pass  # the object the Event is about is gone; the log line and metric remain
        except _RetriesExhaustedError as failed:
            # An Event is an explanation, not state: losing one is not worth a retry wake.
            self.errors.append(f"Event {record.reason} for node {record.node}: {failed.cause}.")

    async def apply(
        self,
        plan: Plan,
        resume: Mapping[str, Sequence[Effect]],
        observed_states: Mapping[str, RemediationState],
    ) -> set[str]:
        """Carry out a plan node by node (see the module docstring); return conflicted nodes."""
        states: dict[str, list[RemediationState]] = {}
        effects: dict[str, list[Effect]] = {}
        announces: dict[str, list[Announce]] = {}
        order: dict[str, None] = {}
        for state in plan.remediations:
            states.setdefault(state.node, []).append(state)
            order[state.node] = None
        for effect in plan.effects:
            if isinstance(effect, Announce):
                announces.setdefault(effect.node, []).append(effect)
            else:
                effects.setdefault(effect.node, []).append(effect)
            order[effect.node] = None
        for node in resume:
            order[node] = None

        # Incidents this plan closes first: the budget a closing frees may be what lets another
        # node's disruptive step start in the same plan, and the store must never hold that
        # start before the closing (a crash between would leave both counted, and the budget
        # is judged from what the store holds). If a closing was not recorded, such starts are
        # planned again from the records as they are.
        closing = [n for n in order if any(s.terminal for s in states.get(n, ()))]
        conflicted: set[str] = set()
        closed = True
        for node in [*closing, *(n for n in order if n not in closing)]:
            if not closed and any(_disrupts(e) for e in effects.get(node, ())):
                conflicted.add(node)
                continue
            if not await self._apply_node(
                node,
                states.get(node, []),
                effects.get(node, []),
                announces.get(node, []),
                resume.get(node, ()),
                observed_states.get(node),
            ):
                conflicted.add(node)
            if node in closing:
                closed = closed and all(
                    (record := self.records.get(state.name)) is not None and record.state.terminal
                    for state in states[node]
                    if state.terminal
                )
        return conflicted

    async def _apply_node(
        self,
        node: str,
        states: list[RemediationState],
        effects: list[Effect],
        announces: list[Announce],
        resume: Sequence[Effect],
        observed: RemediationState | None,
    ) -> bool:
        """One node's share of the plan; False when its Remediation write hit a Conflict."""
        current = states[-1] if states else observed
        fault = current.fault if current is not None else ""
        for effect in (e for e in effects if _is_cleanup(e)):
            if not await self.effect(effect, fault):
                return True  # nothing recorded; the next call plans the same clean-up again
        starts = sorted(
            (e for e in effects if not _is_cleanup(e)), key=lambda e: _START_RANK[type(e)]
        )
        for effect in (e for e in starts if isinstance(e, Cordon)):
            # Before the record (D14): the fault's reaction time is this one write. A failure
            # is retried like a lost cordon: the recorded step resumes it.
            await self.effect(effect, fault)
        for state in states:
            written = await self.write(state)
            if written is False:
                return False
            if written is None:
                return True  # the other starting effects wait for their record to exist
        for effect in (e for e in starts if not isinstance(e, Cordon)):
            await self.effect(effect, fault)
        if (
            resume
            and observed is not None
            and current is not None
            and _same_step(observed, current)
            and in_progress(current)
            and current.phase is Phase.Running
            and not current.dry_run
        ):
            for effect in resume:
                if effect not in starts:
                    await self.effect(effect, fault, resumed=True)
        for announce in announces:
            await self.announce(announce)
        return True


def _tally(
    nodes: Mapping[str, NodeView], policy: Policy, version: int | None
) -> planner.FleetTally | None:
    """The policy's planner tally over the caller's live index, told what changed up to
    `version` (None: a plain mapping, which is counted from scratch)."""
    if version is None or not isinstance(nodes, NodeIndex):
        return None
    if policy.deleted:
        nodes.forget(policy.name)
        return None
    memory = nodes.memory(policy.name)
    memory.tally.changed(nodes.changed_between(memory.seen, version))
    memory.seen = version
    return memory.tally


async def reconcile(
    policy: Policy,
    nodes: Mapping[str, NodeView],
    ports: Ports,
    now: datetime,
    focus: Collection[str] | None = None,
    *,
    plan: PlanFunction | None = None,
    foreign: Callable[[], Mapping[str, str]] | None = None,
    waiting: Callable[[], Mapping[str, tuple[str, ...]]] | None = None,
) -> Reconciled:
    """Reconcile `policy` over `nodes` (every Node the caller knows, by name) at `now`.

    `focus`: the nodes an event touched (None: all); the others still count for budgets and
    the breaker. `plan` replaces the planner (tests of the engine's own guarantees only).
    `foreign`: the selected nodes another policy owns (`engine.ownership.foreign`), asked each
    time a snapshot is taken (None: no other policy). `waiting`: by node this policy holds, the
    other policies' faults there (`engine.ownership.waiting`), asked likewise.
    Returns what was done and `next_wake`, the time to call again if no event comes first.
    """
    plan_fn = plan if plan is not None else planner.plan
    records = ports.records
    # A copy: `nodes` may be the caller's live index, updated by events while this call waits.
    selected = dict(select(policy, nodes))
    # Taken with the copy: the changes the planner's tally must learn before planning it.
    version = nodes.version if isinstance(nodes, NodeIndex) else None
    try:
        listed = await _retrying(lambda: records.list_remediations(policy.name))
        # A deleted policy has no status to read or write; it only closes its incidents.
        stored = (
            PolicyState()
            if policy.deleted
            else await _retrying(lambda: records.read_policy_state(policy.name))
        )
    except _RetriesExhaustedError as failed:
        return Reconciled(
            next_wake=now + failed.cause.retry_after,
            errors=(f"Reading the state of policy {policy.name}: {failed.cause}.",),
        )
    run = _Run(policy, ports, now, {r.state.name: r for r in listed})
    breakers = stored.breakers
    last: Plan | None = None
    replanned: set[str] = set()
    round_focus = None if focus is None else frozenset(focus)
    unresolved = False
    for round_ in range(MAX_ROUNDS):
        active = run.active()
        observable = (
            []
            if policy.mode is Mode.DryRun
            else [
                r.state
                for n, r in active.items()
                if (round_focus is None or n in round_focus)
                and in_progress(r.state)
                and not r.state.dry_run
            ]
        )
        observed = await _observe(observable, policy, selected, ports, run.now)
        run.errors.extend(observed.errors)
        if observed.retry_after is not None:
            run.wake_within(observed.retry_after)
        plan_focus = round_focus
        if observed.unobservable:
            everyone = frozenset(selected) | frozenset(active)
            plan_focus = (round_focus or everyone) - observed.unobservable
        snapshot = Snapshot(
            nodes=selected,
            active={n: r.state for n, r in active.items()},
            finished=run.finished(),
            observations={n: bounds.observation(o) for n, o in observed.observations.items()},
            approvals={n: a for n, r in active.items() if (a := approvals(r.annotations))},
            breakers=breakers,
            not_ready_elsewhere=not_ready_elsewhere(nodes, selected, active),
            focus=plan_focus,
            foreign={} if foreign is None else foreign(),
            unselected={
                n: view for n in active if n not in selected and (view := nodes.get(n)) is not None
            },
            waiting={} if waiting is None else waiting(),
        )
        if plan is None:
            last = planner.plan(snapshot, policy, now, _tally(nodes, policy, version))
        else:
            last = plan_fn(snapshot, policy, now)
        breakers = last.breakers
        conflicted = await run.apply(last, observed.resume, {n: r.state for n, r in active.items()})
        if not conflicted:
            break
        replanned |= conflicted
        if round_ == MAX_ROUNDS - 1:
            unresolved = True
            break
        try:
            listed = await _retrying(lambda: records.list_remediations(policy.name))
        except _RetriesExhaustedError as failed:
            run.failed(f"Re-reading the Remediations of policy {policy.name}", failed.cause)
            break
        run.records = {r.state.name: r for r in listed}
        round_focus = frozenset(conflicted)

    summary = last.summary if last is not None else None
    if last is not None:
        new_state = PolicyState(breakers=last.breakers, summary=last.summary)
        if new_state != stored and not policy.deleted:
            try:
                await _retrying(
                    lambda: records.write_policy_state(
                        policy.name, policy.generation, new_state, now
                    )
                )
            except _RetriesExhaustedError as failed:
                run.failed(f"Writing the status of policy {policy.name}", failed.cause)
        blocked = Counter(
            r.state.reason for r in run.active().values() if r.state.phase is Phase.Blocked
        )
        ports.recorder.summarised(policy.name, new_state, blocked)
    else:
        blocked = Counter()

    wakes = [w for w in (last.next_wake if last is not None else None,) if w is not None]
    if run.retry_after is not None:
        wakes.append(now + run.retry_after)
    if unresolved:
        wakes.append(now)
    next_wake = max(min(wakes), now) if wakes else None
    return Reconciled(
        next_wake=next_wake,
        applied=tuple(run.applied),
        written=tuple(run.written),
        explained=tuple(run.explained),
        transitions=tuple(run.transitions),
        replanned=frozenset(replanned),
        summary=summary,
        census=Counter((r.state.phase, r.state.fault) for r in run.records.values()),
        blocked=blocked,
        reasons=dict(last.reasons) if last is not None else {},
        errors=tuple(run.errors),
    )
