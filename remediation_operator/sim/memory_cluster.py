"""An in-memory cluster implementing every engine port, driven explicitly by its caller.

The engine's tests and the fleet simulator need a cluster that behaves like the real one in
the ways the engine depends on (idempotent effects, optimistic concurrency, PDB refusals,
executors that finish later, reboots that change bootID, NodeClaims that go away) and in no
other way, deterministically and fast (10,000 nodes over 90 simulated days). Nothing happens
on its own: time moves only when the caller calls `advance(now)`; executors and replacements
finish when the caller says so or when a duration the caller configured has passed.

Node objects are kept as the API would return them (plain dicts), so the engine's Node
conversion is exercised too; each node's `NodeView` is recomputed only when that node changes.

The cluster also plays the operator's node cache in one respect: it stamps each condition with
the instant the operator saw its heartbeat, status or reason change (`Condition.observed_at`,
from which staleness is judged), on the cluster's clock. `heartbeat=` sets only the remote
`lastHeartbeatTime` (any value, a year ahead included: it is never compared with the clock).
`set_condition(beating_until=U)` stands for an agent that keeps heart-beating until `U` without
the caller writing every beat (the simulator's live agents): the condition counts as seen at
`U`, so it goes stale `staleAfter` after `U`, as a real one whose agent stopped at `U` would.
`restart_operator()` makes every condition a first sight at the restart, as it is for a
restarted operator.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.effects import EVERY_POD, DrainPlan
from remediation_operator.domain.fleet import NodePod, Progress
from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    Executor,
    Policy,
    ReplaceProvider,
    RestartTarget,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import RemediationState
from remediation_operator.engine import nodes as node_objects
from remediation_operator.engine import ownership
from remediation_operator.engine.node_index import NodeIndex
from remediation_operator.engine.ports import (
    Conflict,
    DrainStatus,
    ExecutorStatus,
    Explanation,
    NotFound,
    PolicyState,
    Ports,
    Refused,
    RemediationRecord,
    StepTransition,
)

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def _no_nodeclaim(node: str) -> str:
    """What the Kubernetes port says (k8s/replace.py) of a node Karpenter cannot replace."""
    return (
        f"node {node} has no NodeClaim (no karpenter.sh ownerReference and no NodeClaim with"
        " its providerID); use the DeleteNode or Manual replace provider"
    )


AGENT_REQUEST = "remediation.gpuops.io/agent-request"
AGENT_ACK = node_objects.AGENT_ACK_ANNOTATION
REPLACE_REQUESTED = "remediation.gpuops.io/replace-requested"
QUARANTINE = node_objects.QUARANTINE_TAINT
QUARANTINED_BY = node_objects.QUARANTINED_BY_ANNOTATION
UNCORDON_ON_RELEASE = node_objects.UNCORDON_ON_RELEASE_ANNOTATION

__all__ = [
    "Event",
    "Execution",
    "ExecutorScript",
    "MemoryCluster",
    "MemoryRecorder",
    "NodeDaemon",
    "Pod",
]

Injection = BaseException | Callable[[], None]


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp as the API writes it (`2026-11-30T11:02:00Z`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Pod:
    """A pod on a node. `protected_until`: a PDB refuses its eviction (429) until then."""

    name: str
    daemonset: bool = False
    mirror: bool = False
    phase: str = "Running"
    protected_until: datetime | None = None
    pdb: str = "default/pdb"
    """The PodDisruptionBudget (`namespace/name`) that protects it while `protected_until`."""

    @property
    def evictable(self) -> bool:
        return not self.daemonset and not self.mirror and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeDaemon:
    """A DaemonSet with one pod on every node: a node health agent or the device plugin.

    Deleting its pod on a node (`restart_node_pods`) is a restart of what it runs there: the
    DaemonSet recreates the pod at once (creationTimestamp now); its process starts and the pod
    is Ready `ready_after` later (None: never, a pod that does not come back). When it starts
    (at the first `advance` reaching that instant) `on_restart(node, now)` is called, so that
    the caller's model of the agent or plugin can forget what its old process held (a sticky
    condition, a GPU marked unhealthy) and report as a new process does: the hook the
    simulator's agents use (D71). Never within the instant of the deletion: a real agent
    reports after its pod was deleted, recreated and started."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    ready_after: timedelta | None = timedelta(seconds=5)
    on_restart: Callable[[str, datetime], None] | None = None


@dataclass
class _DaemonPod:
    daemon: NodeDaemon
    name: str
    created_at: datetime
    ready_at: datetime | None
    started: bool = True
    """Its process ran (`on_restart` was called for a recreated pod)."""


@dataclass(frozen=True)
class ExecutorScript:
    """How executors of one action behave when nobody finishes them by hand.

    `duration` None: they run until `finish_execution` is called. Otherwise they end
    `duration` after they started (at the first `advance` past that time), succeeding unless
    `succeed` is False (then `permanent` says whether retrying can help).
    """

    duration: timedelta | None = None
    succeed: bool = True
    permanent: bool = False


@dataclass
class Execution:
    """One GPUReset/Reboot attempt started by `run_executor` (a Job or a NodeAgent request)."""

    node: str
    remediation: str
    action: Action
    attempt: int
    executor: Executor
    started_at: datetime
    due: datetime | None
    progress: Progress = Progress.InProgress
    permanent: bool = False
    message: str = ""


@dataclass
class Event:
    """A deduplicated Event: repeats of (kind, object, reason, message) bump `count`."""

    kind: str
    name: str
    reason: Reason
    message: str
    severity: str
    first_seen: datetime
    last_seen: datetime
    count: int = 1


@dataclass
class _Replacement:
    provider: ReplaceProvider
    due: datetime | None


@dataclass
class MemoryRecorder:
    """The Recorder port in memory: what a metrics backend would count, kept for inspection."""

    explanations: list[Explanation] = field(default_factory=list)
    steps: list[StepTransition] = field(default_factory=list)
    applied: Counter[tuple[str, str]] = field(default_factory=Counter)
    """By (effect type, result)."""
    summaries: dict[str, tuple[PolicyState, Mapping[Reason, int]]] = field(default_factory=dict)
    keep: bool = True
    """False: count only (the simulator's long runs do not keep every record)."""
    decisions: Counter[Reason] = field(default_factory=Counter)

    def announced(self, explanation: Explanation) -> None:
        self.decisions[explanation.reason] += 1
        if self.keep:
            self.explanations.append(explanation)

    def step(self, transition: StepTransition) -> None:
        if self.keep:
            self.steps.append(transition)

    def applied_effect(self, effect: str, result: str) -> None:
        self.applied[(effect, result)] += 1

    def summarised(self, policy: str, state: PolicyState, blocked: Mapping[Reason, int]) -> None:
        self.summaries[policy] = (state, blocked)


class _RecorderAdapter:
    """Gives MemoryRecorder the Recorder port's `applied` signature without a name clash."""

    def __init__(self, recorder: MemoryRecorder) -> None:
        self._recorder = recorder

    def announced(self, explanation: Explanation) -> None:
        self._recorder.announced(explanation)

    def step(self, transition: StepTransition) -> None:
        self._recorder.step(transition)

    def applied(self, policy: str, effect: str, node: str, result: str) -> None:
        self._recorder.applied_effect(effect, result)

    def summarised(self, policy: str, state: PolicyState, blocked: Mapping[Reason, int]) -> None:
        self._recorder.summarised(policy, state, blocked)


class MemoryCluster:
    """Nodes, pods, executors, NodeClaims, Remediations, policy status and Events in memory.

    Implements `ClusterPort` and `RecordPort`. Every mutating port call that changed something
    is counted in `calls[(method, node)]` (idempotent no-ops are counted in `noops`), so tests
    can assert that an effect happened exactly once.
    """

    def __init__(
        self, now: datetime, *, keep_events: bool = True, heartbeat: timedelta | None = None
    ) -> None:
        self.now = now
        self.keep_events = keep_events
        self.heartbeat = heartbeat
        """Node agents re-publish every condition of every node (but `silent` ones) with a
        fresh heartbeat this often, as `advance` crosses each period (None: only when the
        caller sets a condition). `next_due` includes the next beat while a Remediation is
        open: the runtime wakes the planner on a heartbeat of such a node (fresh evidence)."""
        self.silent: set[str] = set()
        """Nodes whose agents stopped heart-beating (their conditions go stale)."""
        self._beaten = now
        self._nodes: dict[str, dict[str, Any]] = {}
        self._observed: dict[str, dict[str, datetime]] = {}
        """By node and condition type: when the operator saw it change (`observed_at`)."""
        self._live: dict[str, dict[str, datetime]] = {}
        """By node and condition type: until when its agent heart-beats (`beating_until`)."""
        self._views = NodeIndex()
        self._changed: set[str] = set()
        self._pods: dict[str, dict[str, Pod]] = {}
        self._daemons: dict[str, NodeDaemon] = {}
        self._daemon_pods: dict[str, dict[str, _DaemonPod]] = {}
        """By node and daemon name: the daemon's pod there."""
        self._pod_serial = itertools.count(1)
        self._starting: set[str] = set()
        """Nodes with a recreated daemon pod whose process has not started yet (so that
        `advance` and `next_due` need not look at every node's pods)."""
        self.restarts: Counter[tuple[str, str]] = Counter()
        """By (node, daemon name): how many times its pod there was deleted by the engine."""
        self._drain_attempted: set[str] = set()
        self._drain_blocked: set[str] = set()
        self._executions: dict[tuple[str, Action, int], Execution] = {}
        self._pending: dict[tuple[str, Action, int], Execution] = {}
        self.scripts: dict[Action, ExecutorScript] = {}
        self.reboot_on_success = True
        """A Reboot executor that succeeds reboots the node (new bootID, Ready=True)."""
        self.agents_report_after_reboot = True
        """A rebooted node's agents start again and re-publish each of its conditions with a
        fresh heartbeat (evidence seen after the reboot). False: they stay silent, and the
        conditions keep what they showed before the reboot (stale evidence)."""
        self._claims: dict[str, str] = {}
        """NodeClaim name -> node name (Karpenter)."""
        self._claim_of: dict[str, str] = {}
        self._claims_deleting: set[str] = set()
        self._replacements: dict[str, _Replacement] = {}
        self.replace_duration: timedelta | None = None
        """Karpenter/Manual replacement: the node disappears this long after Replace (None: only
        when the caller deletes it)."""
        self._records: dict[str, RemediationRecord] = {}
        self._by_policy: dict[str, dict[str, RemediationRecord]] = {}
        self._versions = itertools.count(1)
        self._policies: dict[str, PolicyState] = {}
        self.policy_writes: Counter[str] = Counter()
        self.observed_generation: dict[str, int] = {}
        self.events: dict[tuple[str, str, Reason, str], Event] = {}
        self.calls: Counter[tuple[str, str]] = Counter()
        self.noops: Counter[tuple[str, str]] = Counter()
        self._injections: dict[str, list[Injection]] = {}
        self._boots = itertools.count(1)

    # Wiring ----------------------------------------------------------------------------------

    def ports(self, recorder: MemoryRecorder | None = None) -> Ports:
        """Ports for `engine.reconciler.reconcile` backed by this cluster."""
        return Ports(
            cluster=self, records=self, recorder=_RecorderAdapter(recorder or MemoryRecorder())
        )

    def inject(self, method: str, what: Injection, times: int = 1) -> None:
        """The next `times` calls of port method `method` raise `what` (an exception) or first
        run `what()` (a callable, e.g. a competing write) and then proceed."""
        self._injections.setdefault(method, []).extend([what] * times)

    def _enter(self, method: str) -> None:
        queue = self._injections.get(method)
        if not queue:
            return
        what = queue.pop(0)
        if isinstance(what, BaseException):
            raise what
        what()

    # The caller's knobs: nodes ---------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        created_at: datetime | None = None,
        ready: bool = True,
        unschedulable: bool = False,
        nodeclaim: bool = True,
    ) -> None:
        """A new Node (Ready unless told otherwise), with a NodeClaim owning it by default."""
        created = created_at if created_at is not None else self.now
        metadata: dict[str, Any] = {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": {},
            "creationTimestamp": rfc3339(created),
        }
        obj: dict[str, Any] = {
            "metadata": metadata,
            "spec": {"providerID": f"memory:///{name}", "taints": []},
            "status": {"conditions": [], "nodeInfo": {"bootID": self._new_boot_id()}},
        }
        if unschedulable:
            obj["spec"]["unschedulable"] = True
        if nodeclaim:
            claim = f"{name}-claim"
            self._claims[claim] = name
            self._claim_of[name] = claim
            metadata["ownerReferences"] = [
                {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim}
            ]
        self._nodes[name] = obj
        self._pods.setdefault(name, {})
        self._daemon_pods[name] = {
            d.name: _DaemonPod(d, self._pod_name(d, name), created, created)
            for d in self._daemons.values()
        }
        self._set_condition(obj, "Ready", "True" if ready else "False", "KubeletReady", "")
        self._touch(name)

    def node(self, name: str) -> Mapping[str, Any]:
        """The Node object as the API would return it (do not mutate)."""
        return self._get(name)

    def has_node(self, name: str) -> bool:
        return name in self._nodes

    def views(self) -> NodeIndex:
        """Every node's NodeView by name: what `reconcile` takes as `nodes`. Live, not a copy."""
        return self._views

    def take_changed(self) -> set[str]:
        """Nodes changed since the last call (what a watch would have reported)."""
        changed, self._changed = self._changed, set()
        return changed

    def set_condition(
        self,
        node: str,
        type_: str,
        status: str,
        reason: str = "",
        message: str = "",
        heartbeat: datetime | None = None,
        *,
        beating_until: datetime | None = None,
    ) -> None:
        """Set a Node condition as an agent would (transition time moves on status change).

        `heartbeat`: its lastHeartbeatTime (default: now). `beating_until`: its agent keeps
        heart-beating until then (the operator sees it fresh until that instant)."""
        obj = self._get(node)
        self._set_condition(obj, type_, status, reason, message, heartbeat, beating_until)
        self._touch(node)

    def hold_heartbeat(self, node: str, types: Iterable[str], last_beat: datetime) -> None:
        """The agents of `node` beat on their own period, not continuously: until the next
        `beat`, the conditions `types` (set with `beating_until`) count as last seen at
        `last_beat`, their agent's latest heartbeat (the simulator, after a repair)."""
        live = self._live.get(node, {})
        observed = self._observed.setdefault(node, {})
        for type_ in types:
            if live.pop(type_, None) is not None:
                observed[type_] = last_beat
        self._touch(node)

    def set_gpus(self, node: str, capacity: int, allocatable: int) -> None:
        """`nvidia.com/gpu` in the Node's status.capacity and status.allocatable, as the
        device plugin advertises them (fewer allocatable: GPUs it marked unhealthy)."""
        status = self._get(node)["status"]
        status.setdefault("capacity", {})["nvidia.com/gpu"] = str(capacity)
        status.setdefault("allocatable", {})["nvidia.com/gpu"] = str(allocatable)
        self._touch(node)

    def remove_condition(self, node: str, type_: str) -> None:
        obj = self._get(node)
        obj["status"]["conditions"] = [
            c for c in obj["status"]["conditions"] if c.get("type") != type_
        ]
        self._observed.get(node, {}).pop(type_, None)
        self._live.get(node, {}).pop(type_, None)
        self._touch(node)

    def set_unschedulable(self, node: str, value: bool) -> None:
        """An administrator's `kubectl cordon` / `kubectl uncordon`."""
        spec = self._get(node)["spec"]
        if value:
            spec["unschedulable"] = True
        else:
            spec.pop("unschedulable", None)
        self._touch(node)

    def set_label(self, node: str, key: str, value: str | None) -> None:
        labels = self._get(node)["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        self._touch(node)

    def reboot(self, node: str, ready: bool = True) -> None:
        """The node rebooted: a new bootID; Ready as given."""
        obj = self._get(node)
        obj["status"]["nodeInfo"]["bootID"] = self._new_boot_id()
        if self.agents_report_after_reboot and node not in self.silent:
            self.beat(node)
        self._set_condition(obj, "Ready", "True" if ready else "False", "KubeletReady", "")
        self._touch(node)

    def delete_node(self, node: str) -> None:
        """The Node object goes away (with its pods, NodeClaim and pending replacement)."""
        self._nodes.pop(node, None)
        self._observed.pop(node, None)
        self._live.pop(node, None)
        self.silent.discard(node)
        self._views.pop(node, None)
        self._pods.pop(node, None)
        self._daemon_pods.pop(node, None)
        self._starting.discard(node)
        self._replacements.pop(node, None)
        claim = self._claim_of.pop(node, None)
        if claim is not None:
            self._claims.pop(claim, None)
            self._claims_deleting.discard(claim)
        self._drain_attempted.discard(node)
        self._drain_blocked.discard(node)
        self._changed.add(node)

    def restart_operator(self) -> None:
        """Forget what only a running operator process remembers (which drains it attempted,
        which evictions a PDB refused, when it saw each condition change), as a restarted
        operator would: every condition is first seen now."""
        self._drain_attempted.clear()
        self._drain_blocked.clear()
        for node, observed in self._observed.items():
            if any(at < self.now for at in observed.values()):
                for type_, at in observed.items():
                    observed[type_] = max(at, self.now)
                self._touch(node)

    # The caller's knobs: pods ----------------------------------------------------------------

    def add_pod(
        self,
        node: str,
        name: str,
        *,
        daemonset: bool = False,
        mirror: bool = False,
        phase: str = "Running",
        protected_until: datetime | None = None,
        pdb: str = "default/pdb",
    ) -> None:
        self._get(node)
        self._pods[node][name] = Pod(name, daemonset, mirror, phase, protected_until, pdb)

    def pods(self, node: str) -> Sequence[Pod]:
        return tuple(self._pods.get(node, {}).values())

    def add_daemon(self, daemon: NodeDaemon) -> None:
        """Run `daemon` on every node, present and future (its pods Ready from the start)."""
        self._daemons[daemon.name] = daemon
        for node, pods in self._daemon_pods.items():
            created = self.now
            pods[daemon.name] = _DaemonPod(daemon, self._pod_name(daemon, node), created, created)

    def daemon_pod(self, node: str, daemon: str) -> tuple[str, datetime, bool]:
        """The name, creation time and readiness of `daemon`'s pod on `node`."""
        pod = self._daemon_pods[node][daemon]
        return pod.name, pod.created_at, pod.ready_at is not None and pod.ready_at <= self.now

    def _pod_name(self, daemon: NodeDaemon, node: str) -> str:
        return f"{daemon.name}-{node}-{next(self._pod_serial)}"

    # The caller's knobs: executors and replacements -----------------------------------------

    def executions(self, node: str | None = None) -> list[Execution]:
        """Executor runs started so far (for `node` only, if given), oldest first."""
        return [e for e in self._executions.values() if node is None or e.node == node]

    def finish_execution(
        self, node: str, action: Action, succeed: bool = True, permanent: bool = False
    ) -> Execution:
        """End the latest running executor of `action` on `node`."""
        # Only the pending ones can be running (not every execution of a 90-day run).
        running = [
            e
            for e in self._pending.values()
            if e.node == node and e.action is action and e.progress is Progress.InProgress
        ]
        if not running:
            raise LookupError(f"no {action} executor is running on node {node}")
        execution = running[-1]
        self._finish(execution, succeed, permanent)
        return execution

    def advance(self, now: datetime) -> list[str]:
        """Move the clock to `now`; finish executors and replacements that are due.

        Returns one line per thing that happened (for the simulator's timeline).
        """
        if now < self.now:
            raise ValueError(f"time cannot go back: {now} is before {self.now}")
        self.now = now
        happened: list[str] = []
        for key, execution in list(self._pending.items()):
            if execution.due is not None and execution.due <= now:
                script = self.scripts.get(execution.action, ExecutorScript())
                self._finish(execution, script.succeed, script.permanent)
                happened.append(f"{execution.action} on {execution.node}: {execution.progress}")
            if execution.progress is not Progress.InProgress:
                self._pending.pop(key, None)
        for node in sorted(self._starting):
            pods = self._daemon_pods.get(node, {})
            for pod in list(pods.values()):
                if pod.started or pod.ready_at is None or pod.ready_at > now:
                    continue
                pod.started = True
                happened.append(f"{pod.daemon.name} restarted on {node}")
                if pod.daemon.on_restart is not None:
                    pod.daemon.on_restart(node, now)
            if all(p.started or p.ready_at is None for p in pods.values()):
                self._starting.discard(node)
        for node, replacement in list(self._replacements.items()):
            if replacement.due is not None and replacement.due <= now:
                self.delete_node(node)
                happened.append(f"node {node} replaced ({replacement.provider})")
        period = self.heartbeat
        if period is not None and now >= self._beaten + period:
            self._beaten += period * ((now - self._beaten) // period)
            for node in self._nodes:
                if node not in self.silent:
                    self.beat(node)
        return happened

    def beat(self, node: str) -> None:
        """The node's agents re-publish each of its conditions, unchanged but for a fresh
        heartbeat: the operator sees them change now (fresh evidence). Not `Ready=Unknown`:
        that is the node lifecycle controller's verdict that the kubelet stopped posting, and
        the controller keeps the kubelet's last heartbeat on it (kubernetes/kubernetes,
        pkg/controller/nodelifecycle/node_lifecycle_controller.go, tryUpdateNodeHealth)."""
        obj = self._get(node)
        for condition in list(obj["status"]["conditions"]):
            if condition["type"] == "Ready" and condition["status"] == "Unknown":
                continue
            self._set_condition(
                obj,
                condition["type"],
                condition["status"],
                condition.get("reason", ""),
                condition.get("message", ""),
            )
        self._touch(node)

    def next_due(self) -> datetime | None:
        """The earliest time `advance` would finish something on its own (or, with
        `heartbeat`, the next beat while a Remediation is open)."""
        dues = [e.due for e in self._pending.values() if e.due is not None]
        dues += [r.due for r in self._replacements.values() if r.due is not None]
        dues += [
            p.ready_at
            for node in self._starting
            for p in self._daemon_pods.get(node, {}).values()
            if p.ready_at is not None and not p.started
        ]
        if self.heartbeat is not None and any(
            not r.state.terminal and r.state.node not in self.silent for r in self._records.values()
        ):
            dues.append(self._beaten + self.heartbeat)
        return min(dues) if dues else None

    def open_by_node(self) -> dict[str, frozenset[str]]:
        """By node: the policies with an open (non-terminal) Remediation there."""
        out: dict[str, set[str]] = {}
        for record in self._records.values():
            if not record.state.terminal:
                out.setdefault(record.state.node, set()).add(record.state.policy)
        return {node: frozenset(policies) for node, policies in out.items()}

    def foreign(
        self, policy: Policy, policies: Iterable[Policy], now: datetime | None = None
    ) -> dict[str, str]:
        """The nodes `policy` selects that another of `policies` owns (engine.ownership), for
        `reconcile(..., foreign=lambda: cluster.foreign(policy, policies, now))`."""
        return ownership.foreign(policy, policies, self._views, self.open_by_node(), now)

    def superseding(
        self, policy: Policy, policies: Iterable[Policy], now: datetime
    ) -> dict[str, str]:
        """`engine.ownership.superseding` over this cluster, for `reconcile(...,
        superseding=lambda: cluster.superseding(policy, policies, now))` (D76)."""
        return ownership.superseding(policy, policies, self._views, self.open_by_node(), now)

    def claimed(self, policy: Policy, policies: Iterable[Policy], now: datetime) -> frozenset[str]:
        """`engine.ownership.claimed` over this cluster, for `reconcile(..., claimed=...)`."""
        return ownership.claimed(policy, policies, self._views, self.open_by_node(), now)

    def replacement_requested(self, node: str) -> ReplaceProvider | None:
        replacement = self._replacements.get(node)
        return replacement.provider if replacement is not None else None

    # The caller's knobs: records -------------------------------------------------------------

    def remediations(self, policy: str | None = None) -> list[RemediationRecord]:
        if policy is None:
            return list(self._records.values())
        return list(self._by_policy.get(policy, {}).values())

    def annotate_remediation(self, name: str, key: str, value: str | None) -> None:
        """A human edits an annotation (e.g. the approval); bumps the resourceVersion."""
        record = self._records[name]
        annotations = dict(record.annotations)
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
        self._store(replace(record, annotations=annotations))

    def touch_remediation(self, name: str) -> None:
        """Another writer updated the object: its resourceVersion changes, nothing else."""
        self._store(self._records[name])

    def delete_remediation(self, name: str) -> None:
        record = self._records.pop(name)
        self._by_policy.get(record.state.policy, {}).pop(name, None)

    def policy_state(self, policy: str) -> PolicyState:
        return self._policies.get(policy, PolicyState())

    def events_for(self, kind: str, name: str) -> list[Event]:
        return [e for e in self.events.values() if e.kind == kind and e.name == name]

    # ClusterPort: observations ---------------------------------------------------------------

    async def drain_status(self, node: str, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        """The simulated fleet has no pod labels or GPU requests: `plan` changes nothing."""
        self._enter("drain_status")
        return self._drain_status(node)

    async def executor_status(
        self,
        node: str,
        remediation: str,
        action: Action,
        attempt: int,
        executor: ActionExecutor,
    ) -> ExecutorStatus:
        self._enter("executor_status")
        if executor.executor is Executor.Noop:
            return ExecutorStatus(Progress.Succeeded, "Noop executor: nothing to run.")
        if executor.executor is Executor.NodeAgent:
            annotations = self._get(node)["metadata"]["annotations"]
            request = f"{action}:{remediation}:{attempt}"
            ack = annotations.get(AGENT_ACK, "")
            if ack == f"{request}:Succeeded":
                return ExecutorStatus(Progress.Succeeded, "The node agent acknowledged success.")
            if ack == f"{request}:Failed":
                return ExecutorStatus(Progress.Failed, "The node agent reported a failure.")
            if annotations.get(AGENT_REQUEST) == request:
                return ExecutorStatus(Progress.InProgress, "Waiting for the node agent.")
            return ExecutorStatus(Progress.Absent)
        execution = self._executions.get((remediation, action, attempt))
        if execution is None:
            return ExecutorStatus(Progress.Absent)
        return ExecutorStatus(execution.progress, execution.message, execution.permanent)

    async def replacement_status(self, node: str, provider: ReplaceProvider) -> Progress:
        self._enter("replacement_status")
        if node not in self._nodes:
            return Progress.Succeeded
        if provider is ReplaceProvider.Karpenter:
            claim = self._claim_of.get(node)
            if claim is None:
                raise Refused(_no_nodeclaim(node))
            return Progress.InProgress if claim in self._claims_deleting else Progress.Absent
        return Progress.InProgress if node in self._replacements else Progress.Absent

    # ClusterPort: effects --------------------------------------------------------------------

    async def cordon(self, node: str, fault: str, policy: str) -> None:
        self._enter("cordon")
        obj = self._get(node)
        spec, annotations = obj["spec"], obj["metadata"]["annotations"]
        taints: list[dict[str, Any]] = spec.setdefault("taints", [])
        ours = {"key": QUARANTINE, "value": fault, "effect": "NoSchedule"}
        changed = spec.get("unschedulable") is not True or not any(
            t.get("key") == QUARANTINE for t in taints
        )
        if changed and spec.get("unschedulable") is not True:
            annotations[UNCORDON_ON_RELEASE] = "true"
        # A quarantine another policy's incident left is taken over (k8s.nodes.cordon, D76).
        changed = changed or annotations.get(QUARANTINED_BY) != policy
        changed = changed or any(
            t.get("key") == QUARANTINE and t.get("value") != fault for t in taints
        )
        annotations[QUARANTINED_BY] = policy
        spec["unschedulable"] = True
        spec["taints"] = [t for t in taints if t.get("key") != QUARANTINE] + [ours]
        self._count("cordon", node, changed)

    async def requarantine(self, node: str, fault: str, policy: str) -> None:
        self._enter("requarantine")
        obj = self._get(node)
        spec, annotations = obj["spec"], obj["metadata"]["annotations"]
        taints: list[dict[str, Any]] = spec.get("taints", [])
        ours = [t for t in taints if t.get("key") == QUARANTINE]
        changed = bool(ours) and (
            annotations.get(QUARANTINED_BY) != policy or any(t.get("value") != fault for t in ours)
        )
        if changed:
            for taint in ours:
                taint["value"] = fault
            annotations[QUARANTINED_BY] = policy
        self._count("requarantine", node, changed)

    async def release(self, node: str, uncordon: bool) -> None:
        self._enter("release")
        obj = self._get(node)
        spec, annotations = obj["spec"], obj["metadata"]["annotations"]
        taints = spec.get("taints", [])
        kept = [t for t in taints if t.get("key") != QUARANTINE]
        changed = len(kept) != len(taints) or DO_NOT_DISRUPT in annotations
        spec["taints"] = kept
        annotations.pop(DO_NOT_DISRUPT, None)
        annotations.pop(AGENT_REQUEST, None)
        annotations.pop(QUARANTINED_BY, None)
        annotations.pop(UNCORDON_ON_RELEASE, None)
        if uncordon and spec.get("unschedulable") is True:
            spec.pop("unschedulable")
            changed = True
        self._count("release", node, changed)

    async def protect_from_consolidation(self, node: str, on: bool) -> None:
        self._enter("protect_from_consolidation")
        annotations = self._get(node)["metadata"]["annotations"]
        changed = (annotations.get(DO_NOT_DISRUPT) == "true") != on
        if on:
            annotations[DO_NOT_DISRUPT] = "true"
        else:
            annotations.pop(DO_NOT_DISRUPT, None)
        self._count("protect_from_consolidation", node, changed)

    async def evict(self, node: str, force: bool, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        self._enter("evict")
        pods = self._pods.get(node)
        if pods is None or node not in self._nodes:
            raise NotFound(f"node {node} not found")
        refused = False
        evicted = 0
        for name, pod in list(pods.items()):
            if not pod.evictable:
                continue
            if not force and pod.protected_until is not None and self.now < pod.protected_until:
                refused = True
                continue
            del pods[name]
            evicted += 1
        self._drain_attempted.add(node)
        if refused:
            self._drain_blocked.add(node)
        else:
            self._drain_blocked.discard(node)
        self._count("evict", node, evicted > 0)
        return self._drain_status(node)

    async def run_executor(
        self,
        node: str,
        remediation: str,
        action: Action,
        attempt: int,
        executor: ActionExecutor,
    ) -> None:
        self._enter("run_executor")
        obj = self._get(node)
        key = (remediation, action, attempt)
        if executor.executor is Executor.Noop:
            self._count("run_executor", node, False)
            return
        if key in self._executions:
            self._count("run_executor", node, False)
            return
        script = self.scripts.get(action, ExecutorScript())
        due = self.now + script.duration if script.duration is not None else None
        execution = Execution(node, remediation, action, attempt, executor.executor, self.now, due)
        self._executions[key] = execution
        self._pending[key] = execution
        if executor.executor is Executor.NodeAgent:
            obj["metadata"]["annotations"][AGENT_REQUEST] = f"{action}:{remediation}:{attempt}"
            self._touch(node)
        self._count("run_executor", node, True)

    async def node_pods(self, node: str, targets: Sequence[RestartTarget]) -> Sequence[NodePod]:
        self._enter("node_pods")
        if node not in self._nodes:
            raise NotFound(f"node {node} not found")
        found: list[NodePod] = []
        for pod in self._daemon_pods.get(node, {}).values():
            daemon = pod.daemon
            index = next(
                (i for i, t in enumerate(targets) if t.selects(daemon.namespace, daemon.labels)),
                None,
            )
            if index is None:
                continue
            ready = pod.ready_at is not None and pod.ready_at <= self.now
            found.append(NodePod(index, daemon.namespace, pod.name, pod.created_at, ready))
        return found

    async def restart_node_pods(
        self, node: str, targets: Sequence[RestartTarget], created_before: datetime
    ) -> None:
        self._enter("restart_node_pods")
        if node not in self._nodes:
            raise NotFound(f"node {node} not found")
        pods = self._daemon_pods.setdefault(node, {})
        restarted = False
        for name, pod in list(pods.items()):
            daemon = pod.daemon
            if pod.created_at >= created_before:
                continue
            if not any(t.selects(daemon.namespace, daemon.labels) for t in targets):
                continue
            # The DaemonSet controller recreates the pod on the node at once.
            ready = None if daemon.ready_after is None else self.now + daemon.ready_after
            new = _DaemonPod(daemon, self._pod_name(daemon, node), self.now, ready, False)
            pods[name] = new
            if ready is not None:
                self._starting.add(node)
            self.restarts[(node, daemon.name)] += 1
            restarted = True
        self._count("restart_node_pods", node, restarted)

    async def replace(self, node: str, provider: ReplaceProvider) -> None:
        self._enter("replace")
        obj = self._get(node)
        if provider is ReplaceProvider.DeleteNode:
            self.delete_node(node)
            self._count("replace", node, True)
            return
        if node in self._replacements:
            self._count("replace", node, False)
            return
        if provider is ReplaceProvider.Karpenter and self._claim_of.get(node) is None:
            raise Refused(_no_nodeclaim(node))
        due = self.now + self.replace_duration if self.replace_duration is not None else None
        self._replacements[node] = _Replacement(provider, due)
        if provider is ReplaceProvider.Karpenter:
            claim = self._claim_of.get(node)
            if claim is not None:
                self._claims_deleting.add(claim)
        else:
            obj["metadata"]["labels"][REPLACE_REQUESTED] = "true"
            self._touch(node)
        self._count("replace", node, True)

    # RecordPort ------------------------------------------------------------------------------

    async def list_remediations(self, policy: str) -> Sequence[RemediationRecord]:
        self._enter("list_remediations")
        return list(self._by_policy.get(policy, {}).values())

    async def get_remediation(self, name: str) -> RemediationRecord:
        self._enter("get_remediation")
        record = self._records.get(name)
        if record is None:
            raise NotFound(f"remediation {name} not found")
        return record

    async def create_remediation(self, state: RemediationState) -> RemediationRecord:
        self._enter("create_remediation")
        if state.name in self._records:
            raise Conflict(f"remediation {state.name} already exists")
        return self._store(RemediationRecord(state=state, resource_version=""))

    async def update_remediation(
        self, state: RemediationState, resource_version: str
    ) -> RemediationRecord:
        self._enter("update_remediation")
        record = self._records.get(state.name)
        if record is None:
            raise NotFound(f"remediation {state.name} not found")
        if record.resource_version != resource_version:
            raise Conflict(
                f"remediation {state.name}: resourceVersion {resource_version} is stale"
                f" (now {record.resource_version})"
            )
        return self._store(replace(record, state=state))

    async def read_policy_state(self, policy: str) -> PolicyState:
        self._enter("read_policy_state")
        return self._policies.get(policy, PolicyState())

    async def write_policy_state(
        self, policy: str, generation: int, state: PolicyState, now: datetime
    ) -> None:
        self._enter("write_policy_state")
        self._policies[policy] = state
        self.observed_generation[policy] = generation
        self.policy_writes[policy] += 1

    async def emit(self, explanation: Explanation) -> None:
        self._enter("emit")
        if not self.keep_events:
            return
        targets: list[tuple[str, str]] = []
        if explanation.node:
            targets.append(("Node", explanation.node))
        if explanation.remediation:
            targets.append(("Remediation", explanation.remediation))
        if not targets:
            targets.append(("RemediationPolicy", explanation.policy))
        at = explanation.at
        for kind, name in targets:
            key = (kind, name, explanation.reason, explanation.message)
            event = self.events.get(key)
            if event is None:
                self.events[key] = Event(
                    kind,
                    name,
                    explanation.reason,
                    explanation.message,
                    str(explanation.severity),
                    at,
                    at,
                )
            else:
                event.count += 1
                event.last_seen = at

    # Internals -------------------------------------------------------------------------------

    def _get(self, node: str) -> dict[str, Any]:
        obj = self._nodes.get(node)
        if obj is None:
            raise NotFound(f"node {node} not found")
        return obj

    def _touch(self, node: str) -> None:
        self._views[node] = node_objects.to_view(self._nodes[node], self._observed.get(node))
        self._changed.add(node)

    def _count(self, method: str, node: str, changed: bool) -> None:
        if changed:
            self.calls[(method, node)] += 1
            if node in self._nodes:
                self._touch(node)
        else:
            self.noops[(method, node)] += 1

    def _new_boot_id(self) -> str:
        return f"boot-{next(self._boots):06d}"

    def _set_condition(
        self,
        obj: dict[str, Any],
        type_: str,
        status: str,
        reason: str,
        message: str,
        heartbeat: datetime | None = None,
        beating_until: datetime | None = None,
    ) -> None:
        conditions: list[dict[str, Any]] = obj["status"]["conditions"]
        beat = rfc3339(heartbeat if heartbeat is not None else self.now)
        name = obj["metadata"]["name"]
        observed = self._observed.setdefault(name, {})
        live = self._live.setdefault(name, {})
        if type_ == "Ready" and status == "Unknown":
            # The node lifecycle controller's verdict: nobody beats it (see `beat`).
            live.pop(type_, None)
            beating_until = None
        if beating_until is not None:
            live[type_] = beating_until
        until = live.get(type_)
        # Seen now, or, while its agent beats on until a later instant, seen until then.
        seen = self.now if until is None or until < self.now else until
        for condition in conditions:
            if condition.get("type") == type_:
                if condition.get("status") != status:
                    condition["lastTransitionTime"] = rfc3339(self.now)
                signature = (condition.get("lastHeartbeatTime"), condition.get("status"))
                changed = signature != (beat, status) or condition.get("reason") != reason
                if changed or beating_until is not None:
                    observed[type_] = seen
                else:
                    observed.setdefault(type_, seen)
                condition.update(
                    status=status, reason=reason, message=message, lastHeartbeatTime=beat
                )
                return
        observed[type_] = seen
        conditions.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": beat,
                "lastTransitionTime": rfc3339(self.now),
            }
        )

    def _drain_status(self, node: str) -> DrainStatus:
        pods = self._pods.get(node)
        if pods is None or node not in self._nodes:
            raise NotFound(f"node {node} not found")
        remaining = sum(1 for p in pods.values() if p.evictable)
        blocked = remaining > 0 and node in self._drain_blocked
        message = f"{remaining} pod(s) left to evict"
        protected = sorted(
            (p for p in pods.values() if p.evictable and p.protected_until is not None),
            key=lambda p: p.name,
        )
        if blocked:
            message += "; the last eviction was refused by a PodDisruptionBudget"
        return DrainStatus(
            remaining,
            blocked,
            node in self._drain_attempted,
            message + ".",
            pdbs=tuple(sorted({p.pdb for p in protected})) if blocked else (),
            blocked_pods=tuple(f"default/{p.name}" for p in protected) if blocked else (),
        )

    def _finish(self, execution: Execution, succeed: bool, permanent: bool) -> None:
        execution.progress = Progress.Succeeded if succeed else Progress.Failed
        execution.permanent = permanent and not succeed
        execution.message = (
            f"{execution.action} executor succeeded."
            if succeed
            else f"{execution.action} executor failed."
        )
        self._pending.pop((execution.remediation, execution.action, execution.attempt), None)
        node = execution.node
        if node not in self._nodes:
            return
        if execution.executor is Executor.NodeAgent:
            request = f"{execution.action}:{execution.remediation}:{execution.attempt}"
            result = "Succeeded" if succeed else "Failed"
            self._nodes[node]["metadata"]["annotations"][AGENT_ACK] = f"{request}:{result}"
            self._touch(node)
        if succeed and execution.action is Action.Reboot and self.reboot_on_success:
            self.reboot(node)

    def _store(self, record: RemediationRecord) -> RemediationRecord:
        stored = replace(record, resource_version=str(next(self._versions)))
        self._records[stored.state.name] = stored
        self._by_policy.setdefault(stored.state.policy, {})[stored.state.name] = stored
        return stored
