"""Real agents on a real kube-apiserver (issue 21, D58, D60): the emulated agent lets the newest
finding overwrite the reason of AcceleratedHardwareReady=False and keeps lastTransitionTime,
as the EKS node monitoring agent does. A milder reason is no recovery (finding 3); a more
severe one moves the same incident onto its ladder (finding 6); a Drain does not make the
evidence old, so a 5-minute heartbeat does not hold a Drain -> Replace ladder (finding 1); a
reset that worked is verified by restarting the agent and the device plugin (findings 2, 5)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import E2E_CONFIG, Scenario
from tests.integration.conftest import eventually, is_cordoned_by_us
from tests.integration.test_real_agents import CONTACT_SUPPORT, DOUBLE_BIT, RESET, XID, fault
from tests.integration.test_recovery import stays
from tests.integration.test_verification import DEVICE_PLUGIN as VERIFY_DEVICE_PLUGIN
from tests.integration.test_verification import EKS_AGENT as VERIFY_EKS_AGENT


def steps(e2e: Scenario, node: str) -> list[dict[str, object]]:
    return list((e2e.remediation(node) or {}).get("status", {}).get("steps", []))


async def test_a_milder_reason_over_the_fault_does_not_give_the_node_back(
    scenario: Scenario,
) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(e2e.policy(faults=[CONTACT_SUPPORT, DOUBLE_BIT]))
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-48")
    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), within=30, what="cordon")
    await eventually(lambda: e2e.phase(node) == "Waiting", within=30, what="after the cordon")
    name = (e2e.remediation(node) or {})["metadata"]["name"]

    e2e.fleet.inject(node, "xid-63")
    await eventually(
        lambda: any(
            c["type"] == XID and c["reason"] == "NvidiaXID63Error"
            for c in (e2e.node(node) or {})["status"]["conditions"]
        ),
        what="the agent's new reason",
    )
    await stays(
        lambda: (
            e2e.phase(node) == "Waiting"
            and is_cordoned_by_us(e2e.node(node))
            and [r["metadata"]["name"] for r in e2e.remediations(node)] == [name]
        ),
        5.0,
        "the incident holds the node; no probation, no second incident",
    )
    assert "FaultCleared" not in e2e.event_reasons(node, "Node")


async def test_a_more_severe_reason_moves_the_same_incident_onto_its_ladder(
    scenario: Scenario,
) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(e2e.policy(faults=[CONTACT_SUPPORT, RESET]))
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-62")
    await eventually(lambda: e2e.phase(node) == "Waiting", within=30, what="after the cordon")
    name = (e2e.remediation(node) or {})["metadata"]["name"]

    e2e.fleet.inject(node, "xid-54")
    await eventually(
        lambda: any(s["action"] == "Replace" for s in steps(e2e, node)),
        within=60,
        what="the replace ladder reaches Replace",
    )
    assert [r["metadata"]["name"] for r in e2e.remediations(node)] == [name]
    assert [s["action"] for s in steps(e2e, node)] == ["Cordon", "Drain", "Replace"]
    assert "FaultWorsened" in e2e.event_reasons(node, "Node")
    assert "Recovered" not in e2e.event_reasons(node, "Node")


@pytest.mark.fleet(config=E2E_CONFIG.with_(heartbeat_period=300.0))
async def test_a_drain_then_replace_ladder_does_not_wait_for_the_next_heartbeat(
    scenario: Scenario,
) -> None:
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(e2e.policy(faults=[CONTACT_SUPPORT]))
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-54")
    await eventually(
        lambda: any(
            s["action"] == "Drain" and s.get("outcome") == "Succeeded" for s in steps(e2e, node)
        ),
        within=60,
        what="the drain ends",
    )
    drained = time.monotonic()
    await eventually(
        lambda: any(s["action"] == "Replace" for s in steps(e2e, node)),
        within=15,
        what="Replace starts",
    )
    assert time.monotonic() - drained < 15


@pytest.mark.fleet(config=E2E_CONFIG.with_(agent="eks", heartbeat_period=300.0))
async def test_an_agent_restart_after_a_failed_repair_does_not_give_the_node_back(
    scenario: Scenario,
) -> None:
    """Finding 4: the EKS agent restarts after a reset that could not run and reads healthy;
    the validation decides (and fails): the node is not given back."""
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(
        e2e.policy(
            faults=[
                fault(
                    "gpu-unreachable",
                    "NvidiaXID79Error",
                    [
                        {"action": "Cordon", "escalateAfter": "0s"},
                        {"action": "GPUReset", "timeout": "30s", "retries": 0},
                        {"action": "Replace", "timeout": "60s"},
                    ],
                )
            ],
            validation={"after": ["GPUReset"]},
        )
    )
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-79")
    await eventually(
        lambda: any(
            s["action"] == "GPUReset" and s.get("outcome") == "PermanentFailure"
            for s in steps(e2e, node)
        ),
        within=60,
        what="the reset failed",
    )
    e2e.fleet.restart_agent(node)
    await eventually(
        lambda: any(s["action"] == "Replace" for s in steps(e2e, node)),
        within=60,
        what="the validation fails and the ladder climbs to Replace",
    )
    validate = [s for s in steps(e2e, node) if s["action"] == "Validate"]
    assert [s.get("outcome") for s in validate] == ["PermanentFailure"]
    assert "Recovered" not in e2e.event_reasons(node, "Node")


@pytest.mark.fleet(
    config=E2E_CONFIG.with_(
        agent="eks", device_plugin_marks=True, reset_clears=1.0, heartbeat_period=300.0
    )
)
async def test_a_reset_that_worked_is_verified_and_the_node_recovers_without_a_reboot(
    scenario: Scenario,
) -> None:
    """Findings 2 and 5 (D71) on a real kube-apiserver, whose kube-controller-manager runs the
    DaemonSet controller that recreates the pods the operator deletes: the EKS agent (sticky)
    and the device plugin (7 of 8 GPUs) are restarted after the reset, the validation passes,
    the agent's fresh report is healthy, every GPU is advertised: Recovered, no Reboot."""
    e2e = scenario
    node = e2e.node_names()[0]
    e2e.apply(
        e2e.policy(
            faults=[
                fault(
                    "gpu-double-bit-ecc",
                    "NvidiaDoubleBitError",
                    [
                        {"action": "Cordon", "escalateAfter": "0s"},
                        {"action": "Drain", "timeout": "60s", "escalateAfter": "0s"},
                        {"action": "GPUReset", "timeout": "30s", "escalateAfter": "0s"},
                        {"action": "Reboot", "timeout": "60s"},
                        {"action": "Replace", "timeout": "60s"},
                    ],
                )
            ],
            validation={
                "after": ["GPUReset", "Reboot"],
                "timeout": "90s",
                "restartPods": [
                    VERIFY_EKS_AGENT,
                    {**VERIFY_DEVICE_PLUGIN, "namespace": e2e.shape.device_plugin_namespace},
                ],
            },
        )
    )
    await e2e.start_operator()

    e2e.fleet.inject(node, "xid-48")
    await eventually(
        lambda: (e2e.remediation(node) or {}).get("status", {}).get("reason") == "Recovered",
        within=120,
        what="recovered after the verified reset",
    )
    actions = [s["action"] for s in steps(e2e, node)]
    assert actions == ["Cordon", "Drain", "GPUReset", "RestartPods", "Validate"]
    gpus = (e2e.node(node) or {})["status"]["allocatable"]["nvidia.com/gpu"]
    assert gpus == "8"
    assert not is_cordoned_by_us(e2e.node(node))
    assert "GPUsNotAdvertised" not in e2e.event_reasons(node, "Node")
