"""Verification after a repair with sticky agents (issue 21, D71): the engine, the real
planner and the in-memory cluster, whose node agents keep what they saw until restarted.

The agent here plays the EKS node monitoring agent's rules (aws/eks-node-monitoring-agent,
shared/reference/real-nodes.md): its condition goes healthy only when the agent starts, and a
fault still there is detected again right after; the device plugin keeps a GPU it saw fail
unhealthy (allocatable 7 of 8) until its pod restarts (NVIDIA/k8s-device-plugin).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    Executor,
    RestartTarget,
    Validation,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Outcome, Phase
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.engine.ports import ClusterPort, Ports, RecordPort
from remediation_operator.sim.memory_cluster import (
    ExecutorScript,
    MemoryCluster,
    MemoryRecorder,
    NodeDaemon,
)
from tests.engine.conftest import T0, Clock, Driver, Harness
from tests.engine.test_crash_anywhere import WRITES, Mortal, ProcessKilledError
from tests.engine.test_ladder import XID, policy

AGENT = RestartTarget(
    "kube-system", LabelSelector({"app.kubernetes.io/name": "eks-node-monitoring-agent"})
)
PLUGIN = RestartTarget("gpu-operator", LabelSelector({"app": "nvidia-device-plugin-daemonset"}))
NOT_INSTALLED = RestartTarget("kube-system", LabelSelector({"app": "node-problem-detector"}))


class StickyNode:
    """A node whose agent and device plugin keep a fault until restarted (a hand-written
    fake of the real processes, driven by the in-memory cluster's NodeDaemon hook)."""

    def __init__(self, cluster: MemoryCluster, node: str, *, reset_fixes: bool) -> None:
        self.cluster = cluster
        self.node = node
        self.reset_fixes = reset_fixes
        self.agent_reports = True
        """False: the restarted agent writes nothing (it crashes before its first report)."""

    def xid(self) -> None:
        self.cluster.set_condition(self.node, XID, "False", "NvidiaXID62Error", "XID 62")
        self.cluster.set_gpus(self.node, 8, 7)

    @property
    def broken(self) -> bool:
        fixed = any(
            e.action is Action.GPUReset and e.progress.value == "Succeeded"
            for e in self.cluster.executions(self.node)
        )
        return not (self.reset_fixes and fixed)

    def agent_restarted(self, node: str, now: datetime) -> None:
        if not self.agent_reports:
            return
        # Written healthy when the agent starts; a fault still there is found again at once.
        self.cluster.set_condition(node, XID, "True", "AcceleratedHardwareReady", "")
        if self.broken:
            self.cluster.set_condition(node, XID, "False", "NvidiaXID62Error", "XID 62")

    def plugin_restarted(self, node: str, now: datetime) -> None:
        self.cluster.set_gpus(node, 8, 7 if self.broken else 8)


def world(
    *,
    reset_fixes: bool,
    plugin_back_after: timedelta | None = timedelta(seconds=20),
    targets: tuple[RestartTarget, ...] = (AGENT, PLUGIN),
) -> tuple[Harness, Driver, StickyNode]:
    cluster = MemoryCluster(T0 - timedelta(days=1), heartbeat=timedelta(minutes=5))
    clock = Clock(cluster, T0 - timedelta(days=1))
    cluster.add_node("gpu-0", labels={"pool": "a"})
    sticky = StickyNode(cluster, "gpu-0", reset_fixes=reset_fixes)
    cluster.add_daemon(
        NodeDaemon(
            "kube-system",
            "eks-node-monitoring-agent",
            {"app.kubernetes.io/name": "eks-node-monitoring-agent"},
            ready_after=timedelta(seconds=10),
            on_restart=sticky.agent_restarted,
        )
    )
    cluster.add_daemon(
        NodeDaemon(
            "gpu-operator",
            "nvidia-device-plugin-daemonset",
            {"app": "nvidia-device-plugin-daemonset"},
            ready_after=plugin_back_after,
            on_restart=sticky.plugin_restarted,
        )
    )
    clock.to(T0)
    cluster.set_gpus("gpu-0", 8, 8)
    cluster.scripts[Action.GPUReset] = ExecutorScript(timedelta(minutes=2))
    cluster.scripts[Action.Reboot] = ExecutorScript(timedelta(minutes=8))
    cluster.replace_duration = timedelta(minutes=15)
    check = Validation(
        after=frozenset({Action.GPUReset, Action.Reboot}),
        timeout=timedelta(minutes=10),
        executor=ActionExecutor(Executor.Noop),
        restart_pods=targets,
    )
    harness = Harness(cluster, clock)
    return harness, Driver(harness, policy(validation=check)), sticky


def actions(drive: Driver) -> list[Action]:
    return [s.action for s in drive.remediation("gpu-0").steps]


async def test_a_reset_that_worked_is_seen_to_work_and_the_node_recovers_without_a_reboot() -> None:
    harness, drive, sticky = world(reset_fixes=True)
    cluster = harness.cluster
    sticky.xid()

    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)

    final = drive.remediation("gpu-0")
    assert (final.phase, final.reason) == (Phase.Succeeded, Reason.Recovered)
    assert actions(drive) == [
        Action.Cordon,
        Action.Drain,
        Action.GPUReset,
        Action.RestartPods,
        Action.Validate,
    ]
    restart = final.steps[3]
    assert (restart.outcome, restart.reason) == (Outcome.Succeeded, Reason.NodePodsRestarted)
    # The record names the new pods and when they were restarted.
    assert "kube-system/eks-node-monitoring-agent-gpu-0-" in restart.message
    assert "gpu-operator/nvidia-device-plugin-daemonset-gpu-0-" in restart.message
    assert restart.started_at > final.steps[2].started_at
    # Recorded before the deletion: the old pods and the entry that selects each.
    assert [r.split(" ")[0].rsplit("-", 1)[0] for r in restart.restarted] == [
        "kube-system/eks-node-monitoring-agent-gpu-0",
        "gpu-operator/nvidia-device-plugin-daemonset-gpu-0",
    ]
    assert restart.restarted[0].endswith(f"({AGENT.describe()})")
    assert cluster.restarts[("gpu-0", "eks-node-monitoring-agent")] == 1
    assert cluster.restarts[("gpu-0", "nvidia-device-plugin-daemonset")] == 1
    assert not cluster.views()["gpu-0"].unschedulable
    assert cluster.views()["gpu-0"].gpu_allocatable == 8
    node_events = [e.reason for e in cluster.events_for("Node", "gpu-0")]
    assert Reason.RestartingNodePods in node_events
    assert Reason.GPUsNotAdvertised not in node_events


async def test_without_the_restart_the_same_reset_climbs_to_reboot() -> None:
    """The finding the restart fixes: with a sticky agent the reset that worked still reads
    failed (fails without the fix: this is what every reset ladder did)."""
    harness, _, sticky = world(reset_fixes=True, targets=())
    drive = Driver(
        harness,
        policy(
            validation=Validation(
                after=frozenset({Action.GPUReset}), executor=ActionExecutor(Executor.Noop)
            )
        ),
    )
    sticky.xid()
    await drive.run_until(lambda: Action.Reboot in actions(drive))


async def test_a_reset_that_did_not_work_is_reported_again_after_the_restart_and_climbs() -> None:
    _, drive, sticky = world(reset_fixes=False)
    sticky.xid()

    await drive.run_until(lambda: Action.Reboot in actions(drive))

    state = drive.remediation("gpu-0")
    validate = next(s for s in state.steps if s.action is Action.Validate)
    assert (validate.outcome, validate.reason) == (Outcome.PermanentFailure, Reason.FaultReturned)
    assert actions(drive)[:6] == [
        Action.Cordon,
        Action.Drain,
        Action.GPUReset,
        Action.RestartPods,
        Action.Validate,
        Action.Reboot,
    ]


async def test_pods_that_never_come_back_hold_the_node_and_nothing_climbs() -> None:
    # The agent is back and healthy; the device plugin's pod never is: no verdict.
    harness, drive, sticky = world(reset_fixes=True, plugin_back_after=None)
    cluster, clock = harness.cluster, harness.clock
    sticky.xid()

    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.NodePodsNotBack)

    state = drive.remediation("gpu-0")
    assert state.phase is Phase.Blocked
    restart = state.steps[-1]
    assert (restart.action, restart.outcome) == (Action.RestartPods, Outcome.Cancelled)
    assert "gpu-operator/app=nvidia-device-plugin-daemonset" in restart.message
    assert "not Ready yet" in restart.message
    assert "nothing climbs" in restart.message
    warnings = [
        e for e in cluster.events_for("Node", "gpu-0") if e.reason is Reason.NodePodsNotBack
    ]
    assert warnings
    assert warnings[0].severity == "Warning"
    # An hour later, heartbeats and all: still held, never rebooted, restarted once.
    clock.advance(timedelta(hours=1))
    await drive.settle()
    assert drive.remediation("gpu-0").reason is Reason.NodePodsNotBack
    assert Action.Reboot not in actions(drive)
    assert cluster.restarts[("gpu-0", "nvidia-device-plugin-daemonset")] == 1
    assert cluster.views()["gpu-0"].unschedulable


async def test_an_entry_with_no_pod_on_the_node_has_nothing_to_restart() -> None:
    _, drive, sticky = world(reset_fixes=True, targets=(AGENT, NOT_INSTALLED, PLUGIN))
    sticky.xid()
    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    final = drive.remediation("gpu-0")
    assert final.reason is Reason.Recovered
    restart = next(s for s in final.steps if s.action is Action.RestartPods)
    assert "no pod of kube-system/app=node-problem-detector runs on this node" in restart.message


async def test_an_agent_that_does_not_report_after_its_restart_holds_the_node() -> None:
    harness, drive, sticky = world(reset_fixes=True)
    cluster = harness.cluster
    sticky.agent_reports = False
    sticky.xid()
    # The heartbeat would re-publish the old condition as if it were a report: an agent
    # that crashed after its restart sends none.
    cluster.silent.add("gpu-0")

    await drive.run_until(lambda: drive.remediation("gpu-0").reason is Reason.NoFreshReport)
    state = drive.remediation("gpu-0")
    assert state.phase is Phase.Blocked
    assert "has not been reported again since its agent was restarted" in state.message
    assert Action.Reboot not in actions(drive)
    assert cluster.views()["gpu-0"].unschedulable

    # The agent reports at last, healthy: probation, then the node is given back.
    cluster.silent.discard("gpu-0")
    cluster.set_condition("gpu-0", XID, "True", "AcceleratedHardwareReady", "")
    await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    assert drive.remediation("gpu-0").reason is Reason.Recovered
    assert Action.Reboot not in actions(drive)


RESTART_WRITES = WRITES | {"restart_node_pods"}


class MortalWithRestarts(Mortal):
    """`Mortal` that also counts the pod restart as a write that can kill the process."""

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._target, name)
        if name not in RESTART_WRITES:
            return member

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._counter[0] += 1
            if self._counter[0] == self._limit:
                raise ProcessKilledError(f"killed at call {self._limit} ({name})")
            return await member(*args, **kwargs)

        return call


async def _story(kill_at: int | None) -> tuple[Harness, Driver, int]:
    harness, drive, sticky = world(reset_fixes=True)
    cluster = harness.cluster
    counter = [0]
    harness.ports = Ports(
        cluster=cast(ClusterPort, MortalWithRestarts(cluster, counter, kill_at)),
        records=cast(RecordPort, MortalWithRestarts(cluster, counter, kill_at)),
        recorder=cluster.ports(MemoryRecorder()).recorder,
    )
    sticky.xid()
    try:
        await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    except ProcessKilledError:
        cluster.restart_operator()
        harness.ports = None
        drive.wake = harness.clock.now
        await drive.run_until(lambda: drive.remediation("gpu-0").terminal)
    return harness, drive, counter[0]


async def test_an_operator_killed_at_any_write_restarts_each_pod_once_and_recovers() -> None:
    _, _, calls = await _story(None)
    for kill_at in range(1, calls + 1):
        harness, drive, _ = await _story(kill_at)
        cluster = harness.cluster
        final = drive.remediation("gpu-0")
        assert final.reason is Reason.Recovered, f"killed at {kill_at}: {final.message}"
        assert cluster.restarts[("gpu-0", "eks-node-monitoring-agent")] == 1, kill_at
        assert cluster.restarts[("gpu-0", "nvidia-device-plugin-daemonset")] == 1, kill_at
        assert Action.Reboot not in actions(drive), kill_at


async def test_a_repeated_restart_deletes_no_pod_created_since() -> None:
    """The port's contract the crash safety rests on: a restart applied again (its record
    written, the process killed before or after the delete) restarts nothing twice."""
    harness, _, _ = world(reset_fixes=True)
    cluster, clock = harness.cluster, harness.clock
    started = clock.now
    await cluster.restart_node_pods("gpu-0", (AGENT, PLUGIN), started)
    first, created, _ = cluster.daemon_pod("gpu-0", "eks-node-monitoring-agent")
    clock.advance(timedelta(minutes=1))
    await cluster.restart_node_pods("gpu-0", (AGENT, PLUGIN), started)
    assert cluster.daemon_pod("gpu-0", "eks-node-monitoring-agent") == (first, created, True)
    assert cluster.restarts[("gpu-0", "eks-node-monitoring-agent")] == 1
    pods = await cluster.node_pods("gpu-0", (AGENT, NOT_INSTALLED, PLUGIN))
    assert sorted((p.target, p.ready) for p in pods) == [(0, True), (2, True)]
