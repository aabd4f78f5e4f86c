"""The simulator's agents report as the real ones do: sticky, newest reason wins, device plugin.

Unit rules first (sim/agents.py), then whole simulations of one fault on a small fleet with the
real engine and the shipped default policy: what a user of `simulate` would see change between
the `kind` agent and the real profiles.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from remediation_operator.domain import matching
from remediation_operator.domain.policy import Action, Policy
from remediation_operator.sim import agents, study
from remediation_operator.sim.agents import AgentProfile, AgentState
from remediation_operator.sim.faultmix import Cause, FaultMix, Symptom
from remediation_operator.sim.fleetspec import FleetSpec
from remediation_operator.sim.simulator import Simulation

ROOT = Path(__file__).resolve().parents[2]
XID62 = Symptom("AcceleratedHardwareReady", "False", "NvidiaXID62Error")
XID48 = Symptom("AcceleratedHardwareReady", "False", "NvidiaXID48Error")
XID63 = Symptom("AcceleratedHardwareReady", "False", "NvidiaXID63Error")
DCGM = Symptom("AcceleratedHardwareReady", "False", "DCGMHealthCode30")


def test_the_eks_agent_keeps_the_newest_reason_and_appends_the_messages() -> None:
    state = AgentState()
    assert agents.report(AgentProfile.eks, state, XID48)
    assert agents.report(AgentProfile.eks, state, XID63)
    shown = state.reported["AcceleratedHardwareReady"]
    assert shown.reason == "NvidiaXID63Error"
    assert "detected XID-48 on" in shown.message
    assert "detected XID-63 on" in shown.message
    assert state.marked_gpus == 1  # the device plugin marked the GPU at the XID 48
    assert not agents.report(AgentProfile.eks, state, XID63)  # same finding: nothing new


def test_npd_shows_gpu_problem_replaces_the_message_and_does_not_see_dcgm() -> None:
    state = AgentState()
    agents.report(AgentProfile.npd, state, XID48)
    agents.report(AgentProfile.npd, state, XID63)
    shown = state.reported["GPUProblem"]
    assert (shown.status, shown.reason) == ("True", "NvidiaXID63Error")
    assert "48" not in shown.message
    fresh = AgentState()
    assert not agents.report(AgentProfile.npd, fresh, DCGM)
    assert fresh.reported == {}


def test_a_restart_forgets_but_npd_replays_its_lookback() -> None:
    eks = AgentState()
    agents.report(AgentProfile.eks, eks, XID62)
    agents.restart_agent(AgentProfile.eks, eks, XID62, fault_age=10.0)
    assert eks.reported == {}
    assert eks.marked_gpus == 1  # the plugin is another process: only its restart forgets
    agents.restart_device_plugin(eks)
    assert eks.marked_gpus == 0
    npd = AgentState()
    agents.report(AgentProfile.npd, npd, XID62)
    agents.restart_agent(AgentProfile.npd, npd, XID62, fault_age=agents.NPD_LOOKBACK - 1)
    assert npd.reported["GPUProblem"].reason == "NvidiaXID62Error"
    agents.restart_agent(AgentProfile.npd, npd, XID62, fault_age=agents.NPD_LOOKBACK + 1)
    assert npd.reported == {}


def test_application_xids_mark_no_gpu() -> None:
    state = AgentState()
    agents.report(
        AgentProfile.eks, state, Symptom("AcceleratedHardwareReady", "False", "NvidiaXID13Error")
    )
    assert state.marked_gpus == 0


# Whole simulations --------------------------------------------------------------------------


def _one_fault(
    policy: Policy,
    mix: FaultMix,
    profile: AgentProfile,
    symptom: Symptom,
    reset_fixes: bool,
) -> Simulation:
    """Run a 4-node fleet with no random faults and one XID fault on the first node whose
    first GPU reset fixes it (or not), for two days."""
    cause: Cause = next(c for c in mix.causes if c.name == "faulty-gpu")
    cause = replace(
        cause, fixed_by={Action.GPUReset: 1.0 if reset_fixes else 0.0, Action.Reboot: 1.0}
    )
    fleet = FleetSpec(nodes=4, fault_rate_scale=0.0, jobs=None, agent=profile)
    sim = Simulation(policy, mix=mix, fleet=fleet, days=2, seed=1)

    async def go() -> None:
        sim._build_fleet()
        await sim._reconcile(())
        sim.now = 3600.0
        sim.ledger.advance(sim.now)
        await sim._apply_fault(sim.hosts[0], cause, symptom, False, 0.0, 3 * 86400.0)
        while (at := sim.agenda.peek_time()) is not None and at <= sim.end:
            event = sim.agenda.pop()
            sim.ledger.advance(event.at)
            sim.now = event.at
            await sim._handle(event.kind, event.arg, event.token)

    asyncio.run(go())
    return sim


def _policy() -> Policy:
    return study.load_policy(ROOT / "examples" / "gpu-xid-ladders-policy.yaml")


def test_with_the_kind_agent_a_reset_that_worked_is_seen_at_once(mix: FaultMix) -> None:
    sim = _one_fault(_policy(), mix, AgentProfile.kind, XID62, reset_fixes=True)
    assert sim.actions[Action.GPUReset] == 1
    assert sim.actions[Action.Reboot] == 0
    assert sim.outcomes["Succeeded"] == 1
    assert sim.hosts[0].available


def test_with_the_eks_agent_the_condition_stays_after_a_reset_that_worked(mix: FaultMix) -> None:
    policy = _policy()
    policy = replace(policy, validation=None)  # no verification: the sticky condition decides
    sim = _one_fault(policy, mix, AgentProfile.eks, XID62, reset_fixes=True)
    # The reset fixed the GPU, but the agent still shows XID 62: the ladder climbed to Reboot,
    # which restarted the agent (healthy at start) and the device plugin.
    assert sim.actions[Action.GPUReset] == 1
    assert sim.actions[Action.Reboot] == 1
    assert sim.outcomes["Succeeded"] == 1
    host = sim.hosts[0]
    assert host.available
    view = sim.cluster.views()[host.name]
    assert view.gpu_allocatable == view.gpu_capacity == 8
    assert matching.match(view, policy.faults, sim.moment) is None


def test_the_device_plugin_mark_shows_on_allocatable_until_a_restart(mix: FaultMix) -> None:
    sim = Simulation(_policy(), mix=mix, fleet=FleetSpec(nodes=2, jobs=None), days=1, seed=1)
    sim._build_fleet()
    host = sim.hosts[0]
    agents.report(AgentProfile.eks, host.agent, XID48)
    sim._publish(host)
    view = sim.cluster.views()[host.name]
    assert (view.gpu_capacity, view.gpu_allocatable) == (8, 7)
    sim.restart_pods(host.name, agent=False, device_plugin=True)
    view = sim.cluster.views()[host.name]
    assert (view.gpu_capacity, view.gpu_allocatable) == (8, 8)
    # The agent's condition is the agent's: the plugin's restart left it as it was.
    condition = view.condition("AcceleratedHardwareReady")
    assert condition is not None
    assert condition.status == "False"


def test_the_default_policy_verifies_a_reset_that_worked_without_a_reboot(mix: FaultMix) -> None:
    # validation.restartPods (D71): the agent's and the device plugin's pods are restarted
    # after the reset, the agent writes healthy at start, the validation passes: recovered.
    sim = _one_fault(_policy(), mix, AgentProfile.eks, XID48, reset_fixes=True)
    assert sim.actions[Action.GPUReset] == 1
    assert sim.actions[Action.Reboot] == 0
    assert sim.actions[Action.Replace] == 0
    assert sim.outcomes["Succeeded"] == 1
    host = sim.hosts[0]
    assert host.available
    assert sim.cluster.restarts[(host.name, "eks-node-monitoring-agent")] == 1
    assert sim.cluster.restarts[(host.name, "nvidia-device-plugin")] == 1
    view = sim.cluster.views()[host.name]
    assert view.gpu_allocatable == view.gpu_capacity == 8


def test_the_default_policy_climbs_when_the_restarted_agent_finds_the_fault_again(
    mix: FaultMix,
) -> None:
    sim = _one_fault(_policy(), mix, AgentProfile.eks, XID48, reset_fixes=False)
    assert sim.actions[Action.GPUReset] == 1
    assert sim.actions[Action.Replace] == 1  # XID 48's ladder: GPUReset, then Replace
    assert sim.replacements == 1


def test_under_npd_a_reset_that_worked_is_verified_too(mix: FaultMix) -> None:
    sim = _one_fault(_policy(), mix, AgentProfile.npd, XID62, reset_fixes=True)
    assert sim.actions[Action.GPUReset] == 1
    assert sim.actions[Action.Reboot] == 0
    assert sim.outcomes["Succeeded"] == 1
    assert sim.hosts[0].available
