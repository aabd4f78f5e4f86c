"""The quarantine taint's value names the fault the incident follows now (issue 21, D77).

`kubectl describe node` shows `remediation.gpuops.io/quarantine=<fault>:NoSchedule`; after the
incident moved onto a more severe fault (D58, FaultWorsened) it kept naming the first one, so
a person reading the node saw the wrong fault. Real: the planner, the reconciler and the
in-memory cluster.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediation_operator.domain.policy import Action, ConditionMatch, Fault, Policy, Step
from remediation_operator.domain.reasons import Reason
from remediation_operator.sim.memory_cluster import QUARANTINE, QUARANTINED_BY
from tests.engine.conftest import Harness

XID = "AcceleratedHardwareReady"
NODE = "gpu-0"
CONTACT_SUPPORT = Fault(
    name="gpu-contact-support",
    match=(ConditionMatch(XID, "False", r"NvidiaXID54Error"),),
    ladder=(Step(Action.Cordon), Step(Action.Drain), Step(Action.Replace)),
)
RESET = Fault(
    name="gpu-xid-reset",
    match=(ConditionMatch(XID, "False", r"NvidiaXID62Error"),),
    ladder=(Step(Action.Cordon, escalate_after=timedelta(hours=1)), Step(Action.Drain)),
)
POLICY = Policy(name="gpu", faults=(CONTACT_SUPPORT, RESET))


class ProcessKilledError(Exception):
    """Stands for the operator process dying at that instant."""


def taint_value(harness: Harness) -> str | None:
    taints = harness.cluster.node(NODE)["spec"].get("taints", [])
    values = [t["value"] for t in taints if t["key"] == QUARANTINE]
    return values[0] if values else None


async def cordoned_for_the_reset(harness: Harness) -> None:
    harness.cluster.set_condition(NODE, XID, "False", "NvidiaXID62Error")
    await harness.reconcile(POLICY)
    await harness.reconcile(POLICY)
    assert taint_value(harness) == RESET.name


async def test_the_taint_names_the_fault_followed_after_it_worsened(harness: Harness) -> None:
    await cordoned_for_the_reset(harness)

    harness.cluster.set_condition(NODE, XID, "False", "NvidiaXID54Error")  # newest reason wins
    await harness.reconcile(POLICY)
    (record,) = harness.cluster.remediations()
    assert record.state.fault == CONTACT_SUPPORT.name
    assert Reason.FaultWorsened in [e.reason for e in harness.recorder.explanations]
    assert taint_value(harness) == CONTACT_SUPPORT.name
    assert harness.cluster.node(NODE)["metadata"]["annotations"][QUARANTINED_BY] == "gpu"
    assert harness.cluster.node(NODE)["spec"]["unschedulable"] is True


async def test_killed_before_the_move_is_recorded_the_taint_still_ends_right(
    harness: Harness,
) -> None:
    """The taint is re-pointed before the record of the move (as a cordon is, D14): a crash in
    between leaves the record on the old fault, and the next round moves it again."""
    await cordoned_for_the_reset(harness)
    harness.cluster.set_condition(NODE, XID, "False", "NvidiaXID54Error")
    harness.cluster.inject("update_remediation", ProcessKilledError())
    with pytest.raises(ProcessKilledError):
        await harness.reconcile(POLICY)
    (record,) = harness.cluster.remediations()
    assert record.state.fault == RESET.name

    await harness.reconcile(POLICY)
    (record,) = harness.cluster.remediations()
    assert record.state.fault == CONTACT_SUPPORT.name
    assert taint_value(harness) == CONTACT_SUPPORT.name
