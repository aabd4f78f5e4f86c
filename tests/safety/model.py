"""The whole-system safety model (issue 12): a hypothesis state machine over the real engine.

Each rule changes the world (a fault, an agent, an administrator, a policy edit, a PDB, a
node deleted or recreated, Karpenter going away, an operator restart, time passing), then
the operator reconciles as the runtime would until it is quiet. The invariants below are
checked after every reconcile of every policy and after every rule; each failure message
starts with the invariant's tag in brackets (docs/reliability.md lists them).

The invariants are written against what a user can observe (Remediation objects, the Node
objects, pods, the model's knowledge of when an agent really wrote what), never against the
planner's internals, so that they hold for any correct implementation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from remediation_operator.domain.gates import REPAIRS
from remediation_operator.domain.policy import DISRUPTIVE, Action, Mode, OnExhausted, Policy
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase, RemediationState, StepRecord
from remediation_operator.engine.ports import RemediationRecord
from remediation_operator.engine.reconciler import APPROVE_ANNOTATION
from remediation_operator.sim.memory_cluster import (
    AGENT_REQUEST,
    DO_NOT_DISRUPT,
    QUARANTINE,
    QUARANTINED_BY,
    UNCORDON_ON_RELEASE,
    ExecutorScript,
)
from tests.safety.world import (
    AHR,
    EXCLUDE_KEY,
    FAULT_REASON,
    GPUS,
    HEALTHY_FOR,
    HEALTHY_REASON,
    HISTORY,
    MILD_REASON,
    NODES,
    POLICIES,
    RATE,
    SKEW,
    STALE_AFTER,
    T0,
    TICK,
    AgentMode,
    KilledError,
    Operator,
    PolicyConfig,
    SafetyCluster,
    build,
    node_labels,
)

MAX_STEPS = 30
"""steps[] of one Remediation: a full ladder with retries, a forced drain and a few
interrupted-and-restarted steps stays far below this."""
MAX_OPENED_PER_HOUR = 10
"""Remediations one policy opens on one node within an hour (those closed by a policy edit,
the node's deletion or an administrator are not counted)."""
SETTLE_ROUNDS = 25
"""Reconcile rounds after one change before the operator must be quiet (else it spins)."""

LADDERS: dict[str, tuple[Action, ...]] = {
    "full": (Action.Cordon, Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace),
    "no-reset": (Action.Cordon, Action.Drain, Action.Reboot, Action.Replace),
    "reboot": (Action.Cordon, Action.Reboot),
    "replace": (Action.Cordon, Action.Drain, Action.Replace),
    "cordon": (Action.Cordon,),
}
EDIT_CLOSED = frozenset(
    {
        Reason.ModeChanged,
        Reason.FaultRemoved,
        Reason.PolicyDeleted,
        Reason.NodeDeleted,
        Reason.NodeReplaced,
        Reason.AdminUncordoned,
        Reason.NodeUnselected,
    }
)


class ViolationError(AssertionError):
    """An invariant of the safety model does not hold (message: `[tag] what happened`)."""


@dataclass
class NodeModel:
    """What the model knows about one node name (the truth the operator must infer)."""

    exists: bool = True
    incarnation: int = 1
    agent: AgentMode = AgentMode.alive
    faulty: bool = False
    cure: Action | None = None
    """The cheapest action that cures the fault (None: only a new machine does)."""
    written: bool | None = None
    """What the condition on the Node says: True faulty, False healthy, None never written."""
    last_write: datetime | None = None
    positive_write: datetime | None = None
    """When an agent last wrote the condition showing the fault (our clock)."""
    appeared: int = 0
    """How often the written condition turned to showing the fault (the fault (re)appeared)."""
    absent_since: datetime | None = None
    returned: int = 0
    """How often the fault came back after an absence of at least the policies'
    `recovery.healthyFor` (a flap is not a fault that cleared)."""
    admin: int = 0
    """How often an administrator acted on this node."""
    admin_cordoned: bool = False
    uncordons: int = 0
    """How often an administrator uncordoned this node."""
    failed_here: bool = False
    """An incident on this machine ended Failed: it keeps the node cordoned, recorded."""
    gpus_short: bool = False
    """The device plugin advertises 7 of the node's 8 GPUs (a GPU it saw fail stays marked
    unhealthy until the plugin restarts, NVIDIA/k8s-device-plugin internal/rm/health.go)."""
    forgot: bool = False
    """The agent restarted while the fault stayed: it writes healthy (real agents forget on
    restart: node-problem-detector's lookback, the EKS agent's start) until a new finding."""
    reason: str = FAULT_REASON
    """The reason the agent writes while the fault is present: a newer finding overwrites it
    (the EKS agent's `Fatal`, node-problem-detector's permanent conditions; D58)."""


@dataclass(frozen=True)
class Hold:
    """An incident that must not be followed by another of its policy on the node until the
    fault clears (and comes back) or an administrator acts."""

    remediation: str
    fault: str
    incarnation: int
    appeared: int
    returned: int
    admin: int


@dataclass
class Tracking:
    """What the checks remember between reconciles."""

    replace_started: dict[str, int] = field(default_factory=dict)
    """Remediation -> the node incarnation its Replace started on."""
    holds: dict[tuple[str, str], Hold] = field(default_factory=dict)
    """(policy, node) -> the Failed (or administrator-cancelled) incident holding it."""
    uncordons_at_cordon: dict[str, int] = field(default_factory=dict)
    """Node -> its administrator uncordons when our quarantine taint last appeared on it."""
    tainted: set[str] = field(default_factory=set)
    """Nodes carrying our quarantine taint after the last reconcile."""
    handing_over: dict[str, int] = field(default_factory=dict)
    """Node -> its administrator uncordons when a cordon-only incident on it yielded to
    another policy (SupersededByPolicy, D76), until that policy's incident cordoned it."""


def _key(record: StepRecord) -> tuple[object, ...]:
    return (record.action, record.attempt, record.started_at)


def status_text(state: RemediationState) -> str:
    """Everything the Remediation's status says in words (its message and its steps')."""
    return " ".join([state.message, *(r.message for r in state.steps)])


class SafetyModel(RuleBasedStateMachine):
    """Faults, agents, administrators, policy edits and restarts against the real engine."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = SafetyCluster(T0 - timedelta(days=1))
        self.operator = Operator(self.cluster)
        self.nodes: dict[str, NodeModel] = {}
        self.configs: dict[str, PolicyConfig] = {}
        self.deleting: dict[str, PolicyConfig] = {}
        self.track = Tracking()
        self.restarted_at: datetime = self.cluster.now
        self.executions_seen: set[tuple[str, Action, int]] = set()
        self.crashed = False
        """The reconcile being checked was cut short by the process's death."""
        self.woken: set[str] = set()
        """Nodes whose set of open incidents changed in this round (the runtime wakes every
        policy for them: their owner may have changed)."""

    def teardown(self) -> None:
        self.operator.close()

    def violated(self, tag: str, message: str) -> None:
        """An invariant does not hold: fail with the invariant's tag first."""
        raise ViolationError(f"[{tag}] {message}")

    # ------------------------------------------------------------------------------ set-up

    @initialize(
        mode=st.sampled_from([Mode.Enforce, Mode.Enforce, Mode.DryRun]),
        ladder=st.sampled_from(sorted(LADDERS)),
        fail=st.booleans(),
        tolerate=st.sampled_from([0, 30]),
        budget=st.sampled_from([None, 1, 2]),
        rate=st.booleans(),
        breaker=st.sampled_from([None, 3, 5]),
        approval=st.booleans(),
        history=st.booleans(),
        force=st.booleans(),
        escalate_pdb=st.booleans(),
        beta=st.sampled_from([None, -1, 0, 1]),
        karpenter=st.booleans(),
        agents=st.lists(
            st.sampled_from([AgentMode.alive, AgentMode.alive, AgentMode.absent]),
            min_size=len(NODES),
            max_size=len(NODES),
        ),
        faulty=st.lists(st.booleans(), min_size=len(NODES), max_size=len(NODES)),
        pdbs=st.lists(st.booleans(), min_size=len(NODES), max_size=len(NODES)),
    )
    def setup(
        self,
        mode: Mode,
        ladder: str,
        fail: bool,
        tolerate: int,
        budget: int | None,
        rate: bool,
        breaker: int | None,
        approval: bool,
        history: bool,
        force: bool,
        escalate_pdb: bool,
        beta: int | None,
        karpenter: bool,
        agents: list[AgentMode],
        faulty: list[bool],
        pdbs: list[bool],
    ) -> None:
        cluster = self.cluster
        cluster.scripts[Action.GPUReset] = ExecutorScript(timedelta(minutes=2))
        cluster.scripts[Action.Reboot] = ExecutorScript(timedelta(minutes=3))
        cluster.replace_duration = timedelta(minutes=3)
        cluster.karpenter = karpenter
        for name, agent, bad, pdb in zip(NODES, agents, faulty, pdbs, strict=True):
            self.nodes[name] = NodeModel(agent=agent, faulty=bad)
            self._create_node(name)
            cluster.set_pdb(name, pdb)
        base = PolicyConfig(
            name="alpha",
            created_at=cluster.now,
            mode=mode,
            rungs=LADDERS[ladder],
            on_exhausted=OnExhausted.Fail if fail else OnExhausted.Hold,
            tolerate=timedelta(seconds=tolerate),
            budget=budget,
            rate=rate,
            breaker_min_nodes=breaker,
            approval=approval,
            history=history,
            drain_force=force,
            drain_escalate_pdb=escalate_pdb,
        )
        self.configs["alpha"] = base
        if beta is not None:
            self.configs["beta"] = replace(
                base, name="beta", weight=beta, created_at=cluster.now + timedelta(seconds=1)
            )
        cluster.advance(T0)
        for name in NODES:
            self.write(name)
        self.settle(full=True)

    # ------------------------------------------------------------------------------ faults

    @rule(
        name=st.sampled_from(NODES),
        cure=st.sampled_from([Action.GPUReset, Action.Reboot, None]),
    )
    def fault(self, name: str, cure: Action | None) -> None:
        model = self.nodes[name]
        model.faulty, model.cure, model.forgot = True, cure, False
        self.write(name)
        self.settle()

    @rule(name=st.sampled_from(NODES))
    def heal(self, name: str) -> None:
        model = self.nodes[name]
        model.faulty, model.reason, model.forgot = False, FAULT_REASON, False
        self.write(name)
        self.settle()

    @rule(name=st.sampled_from(NODES))
    def agent_restarts(self, name: str) -> None:
        """The agent restarts and forgets the fault the node still has: its condition reads
        healthy (weak as evidence after a repair; the invariants must hold regardless)."""
        model = self.nodes[name]
        if not model.faulty:
            return
        model.forgot = True
        self.write(name)
        self.settle()

    @rule(name=st.sampled_from(NODES), short=st.booleans())
    def device_plugin(self, name: str, short: bool) -> None:
        """The device plugin marks a GPU unhealthy (7 of 8 advertised), or restarts and
        advertises all 8 again; independent of the agent's condition, as in reality."""
        model = self.nodes[name]
        if not model.exists:
            return
        model.gpus_short = short
        self.cluster.set_gpus(name, GPUS, GPUS - 1 if short else GPUS)
        self.settle()

    @rule(name=st.sampled_from(NODES))
    def newer_finding(self, name: str) -> None:
        """A milder finding (XID 63, which no policy acts on) overwrites the reason of the
        fault the node shows; the condition stays False, as real agents keep it (D58)."""
        model = self.nodes[name]
        if not model.faulty:
            return
        model.reason = MILD_REASON
        self.write(name)
        self.settle()

    @rule(
        name=st.sampled_from(NODES),
        times=st.integers(2, 6),
        period=st.sampled_from([2, 5]),
    )
    def flap(self, name: str, times: int, period: int) -> None:
        """A fault present `period` seconds, absent `period` seconds, `times` times."""
        model = self.nodes[name]
        for _ in range(times):
            for faulty in (True, False):
                model.faulty, model.forgot = faulty, False
                self.write(name)
                self.settle()
                self.advance_to(self.cluster.now + timedelta(seconds=period))

    @rule(
        name=st.sampled_from(NODES),
        mode=st.sampled_from(
            [AgentMode.alive, AgentMode.skewed, AgentMode.dead, AgentMode.stuck_future]
        ),
    )
    def agent(self, name: str, mode: AgentMode) -> None:
        """The node's agent lives, lives with a clock a year ahead, dies, or dies a year ahead."""
        model = self.nodes[name]
        if model.agent is AgentMode.absent:
            return
        if mode is AgentMode.stuck_future:
            model.agent = AgentMode.skewed
            self.write(name)
        model.agent = mode
        self.write(name)
        self.settle()

    @rule(seconds=st.sampled_from([5, 30, 120, 600, 600]))
    def wait(self, seconds: int) -> None:
        self.advance_to(self.cluster.now + timedelta(seconds=seconds))

    @rule(name=st.sampled_from(NODES), permanent=st.booleans())
    def executor_fails(self, name: str, permanent: bool) -> None:
        for action in (Action.GPUReset, Action.Reboot):
            try:
                self.cluster.finish_execution(name, action, succeed=False, permanent=permanent)
            except LookupError:
                continue
        self.settle()

    # ------------------------------------------------------------------------------ pods

    @rule(name=st.sampled_from(NODES), protected=st.booleans())
    def pdb(self, name: str, protected: bool) -> None:
        if self.nodes[name].exists:
            self.cluster.set_pdb(name, protected)
        self.settle()

    @rule(name=st.sampled_from(NODES))
    def schedule_pod(self, name: str) -> None:
        if self.nodes[name].exists and not self.cluster.views()[name].unschedulable:
            count = len(self.cluster.pods(name))
            self.cluster.add_pod(name, f"{name}-w{self.nodes[name].incarnation}-{count}")
        self.settle()

    # ------------------------------------------------------------------------------ admins

    @rule(name=st.sampled_from(NODES), cordon=st.booleans())
    def admin_cordon(self, name: str, cordon: bool) -> None:
        model = self.nodes[name]
        if model.exists:
            self.cluster.set_unschedulable(name, cordon)
            model.admin_cordoned = cordon
            model.admin += 1
            model.uncordons += not cordon
        self.settle({name})

    @rule(name=st.sampled_from(NODES))
    def approve(self, name: str) -> None:
        for record in self.cluster.remediations():
            if record.state.node == name and not record.state.terminal:
                self.cluster.annotate_remediation(record.state.name, APPROVE_ANNOTATION, "Replace")
                self.nodes[name].admin += 1
        self.settle({name})

    @rule(name=st.sampled_from(NODES))
    def delete_failed(self, name: str) -> None:
        """An administrator deletes the node's finished Failed Remediations (having looked)."""
        for record in self.cluster.remediations():
            state = record.state
            if state.node == name and state.phase is Phase.Failed:
                self.cluster.delete_remediation(state.name)
                self.track.holds.pop((state.policy, name), None)
                self.nodes[name].admin += 1
        self.settle({name})

    @rule(name=st.sampled_from(NODES), how=st.sampled_from(["label", "annotation", "none"]))
    def exclude(self, name: str, how: str) -> None:
        model = self.nodes[name]
        if model.exists:
            self.cluster.set_label(name, EXCLUDE_KEY, "true" if how == "label" else None)
            self.cluster.set_annotation(name, EXCLUDE_KEY, "true" if how == "annotation" else None)
            model.admin += 1
        self.settle({name})

    @rule(name=st.sampled_from(NODES))
    def delete_node(self, name: str) -> None:
        model = self.nodes[name]
        if model.exists:
            self.cluster.delete_node(name)
            model.exists = False
            model.admin += 1
        self.settle()

    @rule(name=st.sampled_from(NODES))
    def rejoin(self, name: str) -> None:
        """A new machine joins under the same name, healthy."""
        model = self.nodes[name]
        if not model.exists:
            model.incarnation += 1
            model.exists, model.faulty, model.cure = True, False, None
            model.forgot, model.reason = False, FAULT_REASON
            model.admin_cordoned = model.failed_here = False
            model.written = model.last_write = model.positive_write = None
            if model.agent is not AgentMode.absent:
                model.agent = AgentMode.alive
            self._create_node(name)
        self.settle()

    @rule()
    def uninstall_karpenter(self) -> None:
        self.cluster.uninstall_karpenter()
        self.settle()

    # ------------------------------------------------------------------------------ policies

    @rule(policy=st.sampled_from(POLICIES), ladder=st.sampled_from(sorted(LADDERS)))
    def edit_ladder(self, policy: str, ladder: str) -> None:
        self.edit(policy, rungs=LADDERS[ladder])

    @rule(policy=st.sampled_from(POLICIES))
    def flip_mode(self, policy: str) -> None:
        config = self.configs.get(policy)
        if config is not None:
            mode = Mode.DryRun if config.mode is Mode.Enforce else Mode.Enforce
            self.edit(policy, mode=mode)

    @rule(policy=st.sampled_from(POLICIES), budget=st.sampled_from([None, 0, 1, 2]))
    def set_budget(self, policy: str, budget: int | None) -> None:
        self.edit(policy, budget=budget)

    @rule(policy=st.sampled_from(POLICIES), fail=st.booleans())
    def set_exhausted(self, policy: str, fail: bool) -> None:
        self.edit(policy, on_exhausted=OnExhausted.Fail if fail else OnExhausted.Hold)

    @rule(policy=st.sampled_from(POLICIES))
    def delete_policy(self, policy: str) -> None:
        config = self.configs.pop(policy, None)
        if config is not None:
            self.deleting[policy] = config
        self.settle(full=True)

    @rule(policy=st.sampled_from(POLICIES), weight=st.sampled_from([-1, 0, 1]))
    def create_policy(self, policy: str, weight: int) -> None:
        if policy in self.configs or policy in self.deleting:
            return
        template = next(iter(self.configs.values()), None)
        base = template or PolicyConfig(name=policy, created_at=self.cluster.now)
        self.configs[policy] = replace(
            base, name=policy, weight=weight, created_at=self.cluster.now, generation=1
        )
        self.settle(full=True)

    def edit(self, policy: str, **changes: object) -> None:
        config = self.configs.get(policy)
        if config is not None:
            changes["generation"] = config.generation + 1
            self.configs[policy] = replace(config, **changes)  # type: ignore[arg-type]
        self.settle(full=True)

    # ------------------------------------------------------------------------------ operator

    @rule()
    def restart(self) -> None:
        self.operator.restart([*self.configs, *self.deleting])
        self.restarted_at = self.cluster.now
        self.settle(full=True)

    @rule(writes=st.integers(0, 12))
    def crash(self, writes: int) -> None:
        """The process dies just before its `writes`-th next write (whenever that comes) and a
        new one starts at once."""
        self.operator.kill_after = writes

    # ------------------------------------------------------------------------------ mechanics

    def _create_node(self, name: str) -> None:
        model = self.nodes[name]
        self.cluster.add_node(name, labels=node_labels(name), nodeclaim=self.cluster.karpenter)
        model.gpus_short = False  # a new machine: its device plugin advertises every GPU
        self.cluster.set_gpus(name, GPUS, GPUS)
        self.cluster.add_pod(name, f"{name}-w{model.incarnation}")
        self.write(name)

    def write(self, name: str) -> None:
        """The node's agent writes its condition now (if it is alive)."""
        model = self.nodes[name]
        if not model.exists or model.agent not in (AgentMode.alive, AgentMode.skewed):
            return
        now = self.cluster.now
        beat = now + SKEW if model.agent is AgentMode.skewed else now
        shows = model.faulty and not model.forgot
        if shows:
            self.cluster.set_condition(name, AHR, "False", model.reason, "XID 62", heartbeat=beat)
            model.positive_write = now
            if not model.written:
                model.appeared += 1
                absent = model.absent_since
                if absent is not None and now - absent >= HEALTHY_FOR:
                    model.returned += 1
        else:
            self.cluster.set_condition(name, AHR, "True", HEALTHY_REASON, "", heartbeat=beat)
            if model.written is not False:
                model.absent_since = now
        model.written, model.last_write = shows, now

    def advance_to(self, target: datetime) -> None:
        """Move time to `target` in steps no longer than TICK, stopping at every wake-up and
        executor completion; live agents write on every step."""
        cluster = self.cluster
        while cluster.now < target:
            before = cluster.now
            stale = self.operator.stale_deadlines()
            stops = [target, before + TICK, *(d for d in stale.values() if d > before)]
            stops += [w for w in self.operator.wakes.values() if w is not None and w > before]
            due = cluster.next_due()
            if due is not None and due > before:
                stops.append(due)
            cluster.advance(min(stops))
            self._cures()
            for name in NODES:
                if self.nodes[name].exists and not cluster.has_node(name):
                    self.nodes[name].exists = False  # replaced (Karpenter deleted it)
                self.write(name)
            # Going stale is no event: the runtime's node cache wakes the node's policies.
            self.settle({n for n, d in stale.items() if before < d <= cluster.now})

    def _cures(self) -> None:
        for execution in self.cluster.executions():
            key = (execution.remediation, execution.action, execution.attempt)
            if key in self.executions_seen or execution.progress.value != "Succeeded":
                continue
            self.executions_seen.add(key)
            model = self.nodes[execution.node]
            cures = {
                Action.GPUReset: (Action.GPUReset,),
                Action.Reboot: (Action.GPUReset, Action.Reboot),
            }
            if model.cure in cures[execution.action]:
                model.faulty = False

    def live(self) -> dict[str, Policy]:
        out = {name: build(config) for name, config in self.configs.items()}
        out.update({name: build(config, deleted=True) for name, config in self.deleting.items()})
        return dict(sorted(out.items()))

    def settle(self, focus: Iterable[str] | None = None, *, full: bool = False) -> None:
        cluster, operator = self.cluster, self.operator
        changed = set(focus or ()) | cluster.take_changed()
        self.woken = set()
        for _ in range(SETTLE_ROUNDS):
            now = cluster.now
            due = {p for p, w in operator.wakes.items() if w is not None and w <= now}
            policies = self.live()
            if not changed and not due and not full:
                break
            for name, policy in policies.items():
                if full or name in due or name not in operator.wakes:
                    self.reconcile(name, policy, policies, None)
                elif changed:
                    self.reconcile(name, policy, policies, changed)
            for name in list(self.deleting):
                if not any(not r.state.terminal for r in cluster.remediations(name)):
                    del self.deleting[name]
                    operator.wakes.pop(name, None)
            for name in list(operator.wakes):
                if name not in self.configs and name not in self.deleting:
                    operator.wakes.pop(name, None)
            full = False
            changed = cluster.take_changed() | self.woken
            self.woken = set()
        else:
            self.violated(
                "settles",
                f"the operator was still busy after {SETTLE_ROUNDS} rounds at"
                f" {cluster.now:%H:%M:%S}: every reconcile changed something or asked to be"
                " called again at once",
            )
        self.check_world()

    # ------------------------------------------------------------------------------ checking

    def reconcile(
        self,
        name: str,
        policy: Policy,
        policies: Mapping[str, Policy],
        focus: Iterable[str] | None,
    ) -> None:
        cluster = self.cluster
        before = {r.state.name: r.state for r in cluster.remediations(name)}
        protected_before = {n: set(cluster.protected_pods(n)) for n in NODES if cluster.has_node(n)}
        others = [p for n, p in policies.items() if n != name]
        opened = {s.node for s in before.values() if not s.terminal}
        self.crashed = False
        try:
            self.operator.reconcile(policy, others, focus)
        except KilledError:
            # A new process takes over at once; its first reconciles are full.
            self.operator.restart([*self.configs, *self.deleting])
            self.restarted_at = cluster.now
            self.crashed = True  # the policy's status may still show the previous plan's
        now_open = {r.state.node for r in cluster.remediations(name) if not r.state.terminal}
        # As the runtime: an incident opening or ending wakes every policy for that node.
        self.woken |= opened ^ now_open
        config = self.configs.get(name) or self.deleting[name]
        self.check_reconcile(config, policy, before, protected_before)

    def check_reconcile(
        self,
        config: PolicyConfig,
        policy: Policy,
        before: Mapping[str, RemediationState],
        protected_before: Mapping[str, set[str]],
    ) -> None:
        cluster = self.cluster
        records = {r.state.name: r for r in cluster.remediations(config.name)}
        for name, record in records.items():
            state = record.state
            old = before.get(name)
            node = self.nodes[state.node]
            if old is None:
                self.check_opened(config, policy, state)
            old_keys = {_key(r) for r in old.steps} if old is not None else set()
            for step in state.steps:
                if _key(step) in old_keys or step.attempt != 1:
                    continue
                self.check_started(config, policy, state, record.annotations, step)
            if len(state.steps) > MAX_STEPS:
                self.violated(
                    "bounded", f"Remediation {name} holds {len(state.steps)} step records"
                )
            for step in state.steps:
                if (
                    step.action is Action.Replace
                    and step.outcome is Outcome.Succeeded
                    and not state.dry_run
                    and node.exists
                    and self.track.replace_started.get(name) == node.incarnation
                ):
                    self.violated(
                        "observed",
                        f"Remediation {name}: Replace recorded Succeeded while node"
                        f" {state.node} still exists ({state.reason}: {state.message})",
                    )
            if state.terminal and (old is None or not old.terminal):
                if (
                    state.reason is Reason.Recovered
                    and node.exists
                    and node.faulty
                    and node.written
                    and node.agent in (AgentMode.alive, AgentMode.skewed)
                ):
                    self.violated(
                        "sticky",
                        f"Remediation {name} ended Recovered while the live agent on"
                        f" {state.node} still shows its condition False (reason {node.reason})",
                    )
                if state.reason is Reason.Recovered and node.exists and node.gpus_short:
                    self.violated(
                        "gpus",
                        f"Remediation {name} ended Recovered while node {state.node} advertises"
                        f" {GPUS - 1} of its {GPUS} nvidia.com/gpu (D68)",
                    )
                if state.phase is Phase.Failed and node.exists:
                    node.failed_here = True
                if state.phase is Phase.Failed or state.reason is Reason.AdminUncordoned:
                    self.track.holds[(config.name, state.node)] = Hold(
                        name,
                        state.fault,
                        node.incarnation,
                        node.appeared,
                        node.returned,
                        node.admin,
                    )
                since = self.track.uncordons_at_cordon.get(state.node, node.uncordons)
                if state.reason is Reason.AdminUncordoned and node.uncordons == since:
                    self.violated(
                        "reported",
                        f"Remediation {name} ended {state.phase}/{state.reason} ({state.message!r})"
                        f" though no administrator uncordoned node {state.node} since our cordon",
                    )
        self.check_handover(records)
        for node_name in NODES:
            if self.cluster.has_node(node_name) and self._tainted(node_name):
                if node_name not in self.track.tainted:
                    self.track.uncordons_at_cordon[node_name] = self.nodes[node_name].uncordons
                self.track.tainted.add(node_name)
            else:
                self.track.tainted.discard(node_name)
        # Pods a PDB protected that this reconcile took away (forced drain).
        for node_name, pods in protected_before.items():
            if not cluster.has_node(node_name):
                continue
            gone = pods - {p.name for p in cluster.pods(node_name)}
            if not gone:
                continue
            holder = next(
                (
                    r.state
                    for r in records.values()
                    if r.state.node == node_name and not r.state.terminal
                ),
                None,
            )
            if not config.drain_force or holder is None:
                self.violated(
                    "pdb",
                    f"pods {sorted(gone)} protected by a PDB were deleted from node"
                    f" {node_name} though policy {config.name} does not say Force",
                )
                continue
            missing = [p for p in gone if p not in status_text(holder)]
            if missing:
                self.violated(
                    "pdb",
                    f"Remediation {holder.name} forced pods {missing} past their PDB but"
                    f" its status does not name them: {status_text(holder)!r}",
                )

    def check_handover(self, records: Mapping[str, RemediationRecord]) -> None:
        """`handover`: no uncordon during a hand-over (D76). A cordon-only incident that
        yields its node to another policy leaves it cordoned and tainted, and the node stays
        unschedulable until the other policy's incident has cordoned it (taking the
        quarantine over), unless an administrator uncordoned it, the fault cleared or the
        node went away."""
        cluster, track = self.cluster, self.track
        for state in (r.state for r in records.values()):
            if state.reason is not Reason.SupersededByPolicy or state.node in track.handing_over:
                continue
            if state.finished_at != cluster.now or state.node not in track.tainted:
                continue  # ended earlier, or it had not cordoned: nothing to hand over
            track.handing_over[state.node] = self.nodes[state.node].uncordons
        for name, uncordons in list(track.handing_over.items()):
            model = self.nodes[name]
            if not cluster.has_node(name) or model.uncordons != uncordons or not model.faulty:
                del track.handing_over[name]
                continue
            taken = any(
                not r.state.terminal
                and any(
                    s.action is Action.Cordon and s.outcome is Outcome.Succeeded
                    for s in r.state.steps
                )
                for r in cluster.remediations()
                if r.state.node == name
            )
            obj = cluster.node(name)
            if not obj["spec"].get("unschedulable") or not self._tainted(name):
                self.violated(
                    "handover",
                    f"node {name} was made schedulable or lost our taint while a cordon-only"
                    " incident handed it to another policy's incident",
                )
            if taken:
                del track.handing_over[name]

    def check_opened(self, config: PolicyConfig, policy: Policy, state: RemediationState) -> None:
        node = self.nodes[state.node]
        where = f"Remediation {state.name} ({config.name}, {state.reason})"
        if policy.deleted:
            self.violated("deleted", f"{where} opened by a deleted policy")
        if self._excluded(state.node):
            self.violated("excluded", f"{where} opened on an excluded node")
        if self._breaker_open(policy) and state.steps:
            self.violated(
                "breaker",
                f"{where} opened and started {state.steps[0].action} while the"
                " circuit breaker is open",
            )
        if node.written is None:
            self.violated(
                "no-source",
                f"{where} opened on node {state.node}, which never reported"
                f" {AHR}: a source that never reported is not a stale source",
            )
        hold = self.track.holds.get((config.name, state.node))
        if (
            hold is not None
            and hold.fault == state.fault
            and hold.incarnation == node.incarnation
            and hold.appeared == node.appeared
            and hold.admin == node.admin
        ):
            self.violated(
                "failed-stays-failed",
                f"{where} opened on node {state.node} after {hold.remediation}"
                " ended Failed (or was cancelled by an administrator), though the fault has not"
                " cleared and come back since and no administrator acted",
            )

    def check_started(
        self,
        config: PolicyConfig,
        policy: Policy,
        state: RemediationState,
        annotations: Mapping[str, str],
        step: StepRecord,
    ) -> None:
        action = step.action
        where = f"{action} of Remediation {state.name} ({config.name})"
        if state.dry_run or action not in DISRUPTIVE:
            return
        cluster, now = self.cluster, self.cluster.now
        node = self.nodes[state.node]
        if action is Action.Replace:
            self.track.replace_started[state.name] = node.incarnation
        if policy.deleted:
            self.violated("deleted", f"{where} started by a deleted policy")
        if config.mode is Mode.DryRun:
            self.violated("dry-run", f"{where} started while the policy is in DryRun")
        if self._excluded(state.node):
            self.violated("excluded", f"{where} started on an excluded node")
        # Evidence: the fault shown now, written by a live agent recently, after the last
        # repair step (GPUReset, Reboot) of this incident began. A Cordon or a Drain changes
        # nothing on the hardware: the evidence that started them still stands (D60).
        index = next(i for i, r in enumerate(state.steps) if _key(r) == _key(step))
        previous = [r.started_at for r in state.steps[:index] if r.action in REPAIRS]
        seen = node.positive_write
        if not node.written or seen is None:
            self.violated("evidence", f"{where} started while node {state.node} shows no fault")
        else:
            # After a restart the operator cannot know how long ago a beat was written: its
            # age counts from the restart (the node lifecycle controller's rule).
            if now - max(seen, self.restarted_at) > STALE_AFTER:
                self.violated(
                    "evidence",
                    f"{where} started on stale evidence: the agent last wrote the fault"
                    f" {now - seen} ago (staleAfter {STALE_AFTER})",
                )
            if previous and seen < max(previous):
                self.violated(
                    "evidence",
                    f"{where} started on evidence from before the previous repair"
                    f" step (fault last written {seen:%H:%M:%S}, that step began"
                    f" {max(previous):%H:%M:%S})",
                )
        # A disruptive step that succeeded is never repeated within an incident.
        for r in state.steps[:index]:
            if r.action is action and r.outcome is Outcome.Succeeded:
                self.violated(
                    "no-repeat",
                    f"{where} started again though it succeeded at"
                    f" {r.started_at:%H:%M:%S} in the same incident",
                )
        # Approval.
        if action in policy.require_approval:
            approved = annotations.get(APPROVE_ANNOTATION, "").lower()
            if action.value.lower() not in approved:
                self.violated("approval", f"{where} started without approval")
        # PodDisruptionBudgets.
        protected = cluster.protected_pods(state.node) if cluster.has_node(state.node) else []
        if protected and action is not Action.Drain:
            allowed = (
                config.drain_escalate_pdb or config.drain_force or Action.Drain not in config.rungs
            )
            if not allowed:
                self.violated(
                    "pdb",
                    f"{where} started with pods {protected} still protected by a PDB,"
                    " though the policy neither escalates past PDBs nor forces",
                )
            if Action.Drain in config.rungs:
                missing = [p for p in protected if p not in status_text(state)]
                if missing:
                    self.violated(
                        "pdb",
                        f"{where} went past the PDB of pods {missing} without naming"
                        f" them in status: {status_text(state)!r}",
                    )
        records = [r.state for r in cluster.remediations(config.name)]
        first = not any(r.action in DISRUPTIVE for r in state.steps[:index])
        # Budget: counted from an incident's first disruptive step until it ends.
        if first and config.budget is not None:
            out = [
                s.node
                for s in records
                if not s.terminal and not s.dry_run and any(r.action in DISRUPTIVE for r in s.steps)
            ]
            if len(out) > config.budget:
                self.violated(
                    "budget",
                    f"{where} started with {len(out)} nodes out ({sorted(out)}),"
                    f" budget {config.budget}",
                )
        # Rate: first attempts of disruptive steps within the sliding window.
        if config.rate:
            starts = [
                r.started_at
                for s in records
                if not s.dry_run
                for r in s.steps
                if r.action in DISRUPTIVE and r.attempt == 1 and r.started_at > now - RATE.per
            ]
            if len(starts) > RATE.max:
                self.violated(
                    "rate",
                    f"{where}: {len(starts)} disruptive steps started within {RATE.per}"
                    f" (max {RATE.max})",
                )
        # Circuit breaker (recorded state after this plan): it holds new steps, not a step
        # this incident already ran once and restarts.
        if self._breaker_open(policy) and all(r.action is not action for r in state.steps[:index]):
            self.violated("breaker", f"{where} started while the circuit breaker is open")
        # History: a jump ahead needs enough real incidents before.
        if (
            config.history
            and action is HISTORY.then
            and (
                state.repeat_offender or any(r.reason is Reason.RepeatOffender for r in state.steps)
            )
        ):
            real = [
                s
                for s in records
                if s.node == state.node
                and s.terminal
                and not s.dry_run
                and s.finished_at is not None
                and s.finished_at >= now - HISTORY.window
                and any(r.action in DISRUPTIVE for r in s.steps)
            ]
            if len(real) < HISTORY.max_episodes:
                self.violated(
                    "history",
                    f"{where} jumped ahead as a repeat offender with only {len(real)}"
                    " earlier incidents that reached a disruptive step",
                )

    def _breaker_open(self, policy: Policy) -> bool:
        """The breaker as this plan recorded it (unknown when the process died before)."""
        if policy.circuit_breaker is None or self.crashed:
            return False
        breaker = self.cluster.policy_state(policy.name).breakers.get("z1")
        return breaker is not None and breaker.open

    def _tainted(self, name: str) -> bool:
        taints = self.cluster.node(name)["spec"].get("taints", [])
        return any(t.get("key") == QUARANTINE for t in taints)

    def _excluded(self, name: str) -> bool:
        if not self.cluster.has_node(name):
            return False
        metadata = self.cluster.node(name)["metadata"]
        marks = (metadata["labels"].get(EXCLUDE_KEY), metadata["annotations"].get(EXCLUDE_KEY))
        return "true" in marks

    def check_world(self) -> None:
        cluster = self.cluster
        every = [r.state for r in cluster.remediations()]
        active: dict[str, list[RemediationState]] = {}
        for s in every:
            if not s.terminal:
                active.setdefault(s.node, []).append(s)
        for node, states in active.items():
            if len(states) > 1:
                self.violated(
                    "one-owner",
                    f"node {node} has {len(states)} active Remediations:"
                    f" {sorted((s.policy, s.name) for s in states)}",
                )
        now = cluster.now
        opened: dict[tuple[str, str], int] = {}
        for s in every:
            if s.started_at > now - timedelta(hours=1) and s.reason not in EDIT_CLOSED:
                key = (s.policy, s.node)
                opened[key] = opened.get(key, 0) + 1
        for (policy, node), count in opened.items():
            if count > MAX_OPENED_PER_HOUR:
                self.violated(
                    "bounded",
                    f"policy {policy} opened {count} Remediations on node {node} within an hour",
                )
        for name in NODES:
            if self.nodes[name].exists and cluster.has_node(name):
                self.check_cleanup(name, active.get(name, []), every)
                self.check_picked_up(name, active.get(name, []))

    def check_cleanup(
        self, name: str, active: list[RemediationState], every: list[RemediationState]
    ) -> None:
        if active:
            return
        ended = sorted(
            (s for s in every if s.node == name and s.finished_at is not None),
            key=lambda s: s.finished_at,  # type: ignore[arg-type, return-value]
        )
        if self.nodes[name].failed_here or (ended and ended[-1].reason is Reason.NodeReplaced):
            return  # left cordoned for a human, and recorded as such
        obj = self.cluster.node(name)
        annotations = obj["metadata"]["annotations"]
        left = [
            k
            for k in (QUARANTINED_BY, UNCORDON_ON_RELEASE, DO_NOT_DISRUPT, AGENT_REQUEST)
            if k in annotations
        ]
        if any(t.get("key") == QUARANTINE for t in obj["spec"].get("taints", [])):
            left.append(f"taint {QUARANTINE}")
        if obj["spec"].get("unschedulable") and not self.nodes[name].admin_cordoned:
            left.append("cordon")
        if left:
            last = (
                f"; its last incident: {ended[-1].name} {ended[-1].phase}/{ended[-1].reason}"
                if ended
                else ""
            )
            self.violated(
                "cleanup", f"node {name} has no open incident but still carries {left}{last}"
            )

    def check_picked_up(self, name: str, active: list[RemediationState]) -> None:
        model = self.nodes[name]
        if model.reason == MILD_REASON:
            return  # a milder finding no policy acts on shows (the `sticky` check covers it)
        if active or not model.written or model.agent not in (AgentMode.alive, AgentMode.skewed):
            return
        if self._excluded(name):
            return
        labels = self.cluster.node(name)["metadata"]["labels"]
        selecting = [c for c in self.configs.values() if c.selects(labels)]
        if not selecting:
            return
        for config in selecting:
            hold = self.track.holds.get((config.name, name))
            # Only the fault clearing for a while (a flap is not a fault that cleared) and
            # returning, or deleting the Remediation, lifts the hold here: an administrator's
            # uncordon must not be answered by a new cordon.
            if (
                hold is not None
                and hold.incarnation == model.incarnation
                and hold.returned == model.returned
            ):
                return  # (the live agent shows the XID fault: any hold is for that fault)
            if config.breaker_min_nodes is not None:
                breaker = self.cluster.policy_state(config.name).breakers.get("z1")
                if breaker is not None and breaker.open:
                    return
                others = [
                    r.state
                    for r in self.cluster.remediations(config.name)
                    if not r.state.terminal and r.state.node != name
                ]
                if others:
                    return  # the group's one small-pool slot is taken (or may be)
        self.violated(
            "picked-up",
            f"node {name} shows the fault (written {model.positive_write:%H:%M:%S}"
            f" by a live agent), is selected by {[c.name for c in selecting]} and nothing"
            " blocks it, yet no Remediation is open",
        )
