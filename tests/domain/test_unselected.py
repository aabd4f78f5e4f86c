"""A node relabelled out of the selector mid-incident (issue 24, item 3): the planner closes
the incident `NodeUnselected` and gives back what the incident placed (never an
administrator's cordon); a node already handed over for replacement keeps its cordon; a
DryRun incident undoes nothing; a node that is really gone still closes `NodeDeleted`."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from remediation_operator.api import policy_parsing
from remediation_operator.domain import planner
from remediation_operator.domain.effects import Announce, ProtectFromConsolidation, Release
from remediation_operator.domain.fleet import NodeView, Snapshot
from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import (
    Outcome,
    Phase,
    RemediationState,
    StepRecord,
)
from tests.integration.conftest import policy

NOW = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)
POLICY = policy_parsing.parse_policy(policy())
STARTED = NOW - timedelta(minutes=5)
DRAINING = RemediationState(
    name="n1-r",
    node="n1",
    policy="gpu",
    fault="gpu-xid",
    phase=Phase.Running,
    reason=Reason.StepStarted,
    message="draining",
    started_at=STARTED,
    step_index=1,
    step=Action.Drain,
    attempt=1,
    step_started_at=STARTED,
    cordoned_by_us=True,
    steps=(
        StepRecord(Action.Cordon, 1, STARTED, Reason.StepSucceeded, "", STARTED, Outcome.Succeeded),
        StepRecord(Action.Drain, 1, STARTED, Reason.StepStarted, ""),
    ),
)
RELABELLED = NodeView(name="n1", labels={"role": "cpu"}, unschedulable=True, quarantined=True)


def plan(state: RemediationState, unselected: dict[str, NodeView]) -> planner.Plan:
    snapshot = Snapshot(nodes={}, active={"n1": state}, unselected=unselected)
    return planner.plan(snapshot, POLICY, NOW)


def test_leaving_the_selector_closes_node_unselected_and_releases_everything() -> None:
    result = plan(DRAINING, {"n1": RELABELLED})
    (closed,) = result.remediations
    assert (closed.phase, closed.reason) == (Phase.Cancelled, Reason.NodeUnselected)
    assert closed.steps[-1].outcome is Outcome.Cancelled
    effects = [e for e in result.effects if not isinstance(e, Announce)]
    assert effects == [Release("n1", uncordon=True), ProtectFromConsolidation("n1", on=False)]
    assert "no longer selects this node" in closed.message


def test_an_administrators_cordon_is_not_undone() -> None:
    admin = replace(DRAINING, cordoned_by_us=False)
    result = plan(admin, {"n1": RELABELLED})
    assert Release("n1", uncordon=False) in result.effects


def test_a_node_being_replaced_keeps_its_cordon() -> None:
    replacing = replace(DRAINING, step=Action.Replace, step_index=4)
    result = plan(replacing, {"n1": RELABELLED})
    (closed,) = result.remediations
    assert closed.reason is Reason.NodeUnselected
    assert not [e for e in result.effects if isinstance(e, Release)]


def test_a_dry_run_incident_undoes_nothing() -> None:
    result = plan(replace(DRAINING, dry_run=True, cordoned_by_us=False), {"n1": RELABELLED})
    assert result.remediations[0].reason is Reason.NodeUnselected
    assert [e for e in result.effects if not isinstance(e, Announce)] == []


def test_a_node_that_is_gone_still_closes_node_deleted() -> None:
    result = plan(DRAINING, {})
    assert result.remediations[0].reason is Reason.NodeDeleted
    assert not [e for e in result.effects if isinstance(e, Release)]


def test_a_node_deleted_and_recreated_between_plans_closes_without_uncordoning() -> None:
    recorded = replace(DRAINING, node_created_at=STARTED - timedelta(days=3))
    new = NodeView(
        name="n1",
        labels=dict(POLICY.node_selector.match_labels),
        unschedulable=True,  # an administrator cordoned the newcomer: it stays so
        created_at=NOW - timedelta(seconds=30),
    )
    snapshot = Snapshot(nodes={"n1": new}, active={"n1": recorded})
    result = planner.plan(snapshot, POLICY, NOW)
    closed = next(r for r in result.remediations if r.name == "n1-r")
    assert (closed.phase, closed.reason) == (Phase.Cancelled, Reason.NodeDeleted)
    assert "new Node of the same name" in closed.message
    assert Release("n1", uncordon=False) in result.effects
