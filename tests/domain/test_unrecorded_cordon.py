"""A cordon the operator wrote but never recorded (it stopped in between) is never leaked.

The engine cordons before it writes the Remediation (docs/decisions.md D14), so the node's
own marks (`quarantined_by`, `uncordon_on_release`) are the only record such a cordon has.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from remediation_operator.domain import planner
from remediation_operator.domain.effects import Announce, Cordon, Release
from remediation_operator.domain.fleet import NodeView, Snapshot
from remediation_operator.domain.policy import Mode
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase, RemediationState
from tests.domain.fake_cluster import MIN, SEC, T0, node, policy, xid_fault

POLICY = policy(faults=(xid_fault(tolerate=timedelta(0)),))


def marked(name: str = "gpu-1", *, faulty: bool = False, ours: bool = True) -> NodeView:
    """A node as our cordon leaves it (unschedulable, tainted, marked by policy "gpu")."""
    return node(
        name,
        faulty=faulty,
        unschedulable=True,
        quarantined=True,
        quarantined_by="gpu",
        uncordon_on_release=ours,
    )


def plan(
    *nodes: NodeView,
    finished: tuple[RemediationState, ...] = (),
    focus: frozenset[str] | None = None,
    at_: timedelta = timedelta(0),
    **policy_changes: object,
) -> planner.Plan:
    snapshot = Snapshot(nodes={n.name: n for n in nodes}, finished=finished, focus=focus)
    return planner.plan(snapshot, replace(POLICY, **policy_changes), T0 + at_)  # type: ignore[arg-type]


def reasons(result: planner.Plan) -> list[Reason]:
    return [e.reason for e in result.effects if isinstance(e, Announce)]


def test_a_healthy_node_with_our_unrecorded_cordon_is_released_and_uncordoned() -> None:
    result = plan(marked(), node("gpu-2"))

    assert Release("gpu-1", uncordon=True) in result.effects
    assert reasons(result) == [Reason.UnrecordedCordonReleased]
    assert result.reasons["gpu-1"] is Reason.UnrecordedCordonReleased
    assert result.remediations == ()


def test_a_node_an_administrator_had_cordoned_keeps_its_cordon() -> None:
    result = plan(marked(ours=False))

    assert Release("gpu-1", uncordon=False) in result.effects


def test_a_faulty_node_with_our_unrecorded_cordon_reopens_its_incident_as_ours() -> None:
    result = plan(marked(faulty=True))

    (opened,) = result.remediations
    assert opened.cordoned_by_us, "the mark proves the cordon was ours: it is undone at the end"
    assert Reason.AlreadyCordoned not in reasons(result)
    assert Cordon("gpu-1") in result.effects
    assert not any(isinstance(e, Release) for e in result.effects)


def test_another_policys_cordon_is_left_alone() -> None:
    assert plan(replace(marked(), quarantined_by="other")).effects == ()


def test_a_policy_switched_to_dry_run_still_gives_back_its_own_cordon() -> None:
    """Undoing our own effects never depends on the current mode (issue 12, defect 11)."""
    assert Release("gpu-1", uncordon=True) in plan(marked(), mode=Mode.DryRun).effects


def test_a_deleted_policy_gives_back_its_unrecorded_cordon_even_on_a_faulty_node() -> None:
    result = plan(marked(faulty=True), deleted=True)

    assert Release("gpu-1", uncordon=True) in result.effects
    assert result.remediations == ()


def test_a_focused_plan_judges_only_its_nodes() -> None:
    result = plan(marked(), node("gpu-2"), focus=frozenset({"gpu-2"}))

    assert result.effects == ()


def test_a_view_that_may_predate_our_own_release_is_judged_after_the_grace() -> None:
    """Right after a Remediation ends, the watch may not yet show the release it made: the
    stale view must not be mistaken for an unrecorded cordon (a false Event)."""
    ended = RemediationState(
        name="gpu-1-20261130t1050",
        node="gpu-1",
        policy="gpu",
        fault="gpu-xid-reset",
        phase=Phase.Succeeded,
        reason=Reason.Recovered,
        message="Recovered.",
        started_at=T0 - 10 * MIN,
        finished_at=T0 - 10 * SEC,
    )

    early = plan(marked(), finished=(ended,))
    assert early.effects == ()
    assert early.next_wake == T0 - 10 * SEC + planner.UNRECORDED_GRACE

    late = plan(marked(), finished=(ended,), at_=planner.UNRECORDED_GRACE)
    assert Release("gpu-1", uncordon=True) in late.effects


def test_an_administrators_uncordon_of_an_unrecorded_cordon_is_honoured() -> None:
    """Our cordon, then a crash before its record, then `kubectl uncordon`: the incident is
    recorded as cancelled (not reopened and cordoned again), our taint comes off, and the
    next plan, with the fault unchanged, stays out."""
    uncordoned = replace(marked(faulty=True), unschedulable=False)

    result = plan(uncordoned)

    (closed,) = result.remediations
    assert (closed.phase, closed.reason) == (Phase.Cancelled, Reason.AdminUncordoned)
    assert Release("gpu-1", uncordon=False) in result.effects
    assert not any(isinstance(e, Cordon) for e in result.effects)

    released = replace(uncordoned, quarantined=False, quarantined_by="", uncordon_on_release=False)
    again = plan(released, finished=(closed,), at_=MIN)
    assert again.remediations == ()
    assert again.reasons["gpu-1"] is Reason.AdminUncordoned
