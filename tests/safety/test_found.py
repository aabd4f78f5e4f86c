"""What the safety model found, kept as plain tests: each replays one short sequence.

Each test is a sequence of the model's rules that broke an invariant: most were found by
hypothesis and minimised (against the tree before issue 12's fixes, `git archive cdf010a`,
or against the tree being fixed), the others were written from a defect's description and
caught by the model's invariants (docs/reliability.md says which). The docstring names the
invariant that broke and the defect. They run the same machine and the same checks as
`test_model.py`: a test fails with the violated invariant's message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from remediation_operator.domain.policy import Action, Mode
from tests.safety.model import SafetyModel
from tests.safety.world import NODES, AgentMode

CALM: dict[str, Any] = {
    "mode": Mode.Enforce,
    "ladder": "full",
    "fail": False,
    "tolerate": 0,
    "budget": None,
    "rate": False,
    "breaker": None,
    "approval": False,
    "history": False,
    "force": False,
    "escalate_pdb": False,
    "beta": None,
    "karpenter": True,
    "agents": [AgentMode.alive] * len(NODES),
    "faulty": [False] * len(NODES),
    "pdbs": [False] * len(NODES),
}
"""One policy (alpha) with the full ladder and no limits, every agent alive, all healthy."""


@contextmanager
def world(**changes: Any) -> Iterator[SafetyModel]:
    """The model set up as `CALM` with `changes`, torn down afterwards."""
    model = SafetyModel()
    try:
        model.setup(**{**CALM, **changes})
        yield model
    finally:
        model.teardown()


def test_a_node_whose_agent_never_reported_is_left_alone() -> None:
    """[no-source], defect 1: `{type, staleAfter}` took a condition never reported for a stale
    one and cordoned a healthy node at start-up."""
    with world(agents=[AgentMode.alive, AgentMode.alive, AgentMode.absent]) as model:
        model.wait(600)


def test_two_policies_never_both_open_an_incident_on_one_node() -> None:
    """[one-owner], defect 3: a second policy selecting n0 (created while alpha's incident was
    open) opened its own incident on the node."""
    with world(ladder="cordon") as model:
        model.fault(name="n0", cure=None)
        model.wait(120)
        model.create_policy(policy="beta", weight=1)


def test_two_policies_faulting_one_node_in_the_same_minute_do_not_spin() -> None:
    """[settles], defect 3: the two incidents' names collided; every reconcile hit a Conflict
    and asked to be called again at once (the CPU spin of the issue)."""
    with world(beta=-1, ladder="cordon") as model:
        model.fault(name="n0", cure=None)


def test_a_dead_agent_never_drives_a_disruptive_step() -> None:
    """[evidence], defect 4: with the agent dead after reporting the fault, GPUReset, Reboot and
    then Replace ran on the one report from before the first disruptive step. Since D60 the
    one report may carry the ladder through a Drain (it changes nothing on the hardware) while
    it is not stale, never past a repair."""
    with world() as model:
        model.fault(name="n0", cure=None)
        model.agent(name="n0", mode=AgentMode.dead)
        model.wait(600)
        model.wait(600)


def test_a_failed_incident_stays_failed_while_the_fault_stays() -> None:
    """[failed-stays-failed], defect 2: `onExhausted: Fail` closed the incident and a new one
    opened at once on the same fault, running the ladder again."""
    with world(ladder="reboot", fail=True) as model:
        model.fault(name="n0", cure=None)
        model.wait(600)
        model.wait(600)


def test_a_failed_incident_stays_failed_through_a_flap() -> None:
    """[failed-stays-failed], defect 2, as hypothesis first found it: a flapping fault under a
    `[Cordon]` ladder with `onExhausted: Fail`."""
    with world(ladder="cordon", fail=True) as model:
        model.flap(name="n0", period=5, times=4)


def test_a_pdb_protected_pod_stops_the_ladder_at_the_drain() -> None:
    """[pdb], defect 6: the drain's default `onTimeout: Escalate` went on to GPUReset (and
    Reboot) with the PDB-protected pod still on the node."""
    with world(faulty=[True, False, False], pdbs=[True, False, False]) as model:
        model.wait(600)
        model.wait(600)


def test_a_ladder_edit_mid_incident_repeats_no_succeeded_step() -> None:
    """[no-repeat], defect 10: GPUReset inserted before the finished Reboot; the stored step
    index, looked up in the new ladder, ran Reboot a second time."""
    with world(ladder="no-reset") as model:
        model.fault(name="n0", cure=None)
        model.wait(120)
        model.wait(120)
        model.edit_ladder(policy="alpha", ladder="full")
        model.wait(600)


def test_a_policy_deleted_after_a_switch_to_dry_run_gives_its_node_back() -> None:
    """[cleanup], defect 11: deleted while DryRun held its Enforce incident, the policy closed
    the incident `PolicyDeleted` and left the node cordoned, tainted and annotated."""
    with world(ladder="cordon") as model:
        model.fault(name="n0", cure=None)
        model.wait(30)
        model.flip_mode(policy="alpha")
        model.delete_policy(policy="alpha")


def test_replace_without_karpenter_does_not_report_the_node_replaced() -> None:
    """[observed], defect 12: with no NodeClaim CRD, Replace recorded Succeeded/NodeReplaced
    while the node was still there."""
    with world(ladder="replace", karpenter=False) as model:
        model.fault(name="n0", cure=None)
        model.wait(600)
        model.wait(600)


def test_the_small_pool_slot_passes_to_the_next_faulty_node() -> None:
    """[picked-up], defect 13: once the breaker's one small-pool node recovered, the next
    faulty node of the group stayed idle, schedulable and faulty."""
    with world(breaker=5) as model:
        model.fault(name="n0", cure=Action.GPUReset)
        model.fault(name="n1", cure=None)
        model.wait(600)
        model.wait(600)


def test_a_flapping_fault_opens_a_bounded_number_of_incidents() -> None:
    """[bounded], defect 15: a fault present 2 s and absent 2 s under `tolerate: 30s` opened
    (and closed) one Remediation per flap."""
    with world(ladder="cordon", tolerate=30) as model:
        model.flap(name="n0", times=6, period=2)
        model.flap(name="n0", times=6, period=2)


def test_a_flapping_fault_keeps_steps_bounded() -> None:
    """[bounded], defect 15: after the cordon, every flap appended records to `steps[]` (and
    restarted the PDB-blocked drain's attempt and timeout)."""
    with world(pdbs=[True, False, False]) as model:
        model.fault(name="n0", cure=None)
        model.wait(120)
        for _ in range(6):
            model.flap(name="n0", times=6, period=2)


def test_history_counts_only_incidents_that_reached_a_disruptive_step() -> None:
    """[history], defect 7: three stale-heartbeat incidents (cordon only) made the first real
    XID a repeat offender: Cordon, then straight to Replace."""
    with world(history=True) as model:
        for _ in range(3):
            model.agent(name="n0", mode=AgentMode.dead)
            model.wait(600)
            model.agent(name="n0", mode=AgentMode.alive)
            model.wait(600)
        model.fault(name="n0", cure=None)
        model.wait(600)


def test_the_exclude_annotation_keeps_the_operator_away() -> None:
    """[excluded], defect 14: the opt-out as an annotation (not a label) was ignored."""
    with world() as model:
        model.exclude(name="n0", how="annotation")
        model.fault(name="n0", cure=None)
        model.wait(600)


def test_a_breaker_closing_because_the_pool_shrank_picks_up_the_waiting_node() -> None:
    """[picked-up], found on the tree of 1 Dec 11:50 (after the fixes for defect 13): the group's
    breaker was open (1 of 3 nodes faulty), a healthy node was deleted, the pool became small
    and the breaker closed, but the plan after the deletion was focused on the deleted node
    and the faulty one waited, schedulable, with no wake-up to pick it up."""
    with world(ladder="cordon", breaker=3, karpenter=False, faulty=[False, False, True]) as model:
        model.delete_node(name="n0")


def test_a_flapping_fault_under_on_exhausted_fail_opens_a_bounded_number_of_incidents() -> None:
    """[bounded], found on the tree of 1 Dec 11:55 (defects 2 and 15 together): under a
    `[Cordon]` ladder with `onExhausted: Fail`, a fault flapping every 2-5 s ended an incident
    Failed every half minute and, as it "cleared and came back", opened the next one: 11 in
    six minutes (each kept 30 days)."""
    flaps = [(2, 2), (5, 6), (2, 2), (2, 2), (2, 3), (2, 6), (5, 6), (5, 6), (2, 2), (2, 5)]
    flaps += [(2, 2), (5, 2), (5, 4), (5, 6)]
    with world(ladder="cordon", fail=True, karpenter=False) as model:
        for period, times in flaps:
            model.flap(name="n0", period=period, times=times)


def test_a_forced_drain_names_the_pods_it_took_past_their_pdb() -> None:
    """[pdb], defects 6 and 17 (still failing on the tree of 1 Dec 11:55): with the drain's
    `onTimeout: Force`, the PDB-protected pod was deleted at the timeout and the Remediation's
    status said only "the remaining pods are being deleted (forced)", naming neither the pod
    nor its PodDisruptionBudget."""
    with world(force=True, faulty=[True, False, False], pdbs=[True, False, False]) as model:
        model.wait(600)
        model.wait(600)


def test_the_small_pool_slot_freed_by_an_administrator_passes_to_the_next_faulty_node() -> None:
    """[picked-up], defect 13, as hypothesis found it: in a small pool (breaker `minNodes: 5`)
    n1 held the one slot and n2 waited; an administrator's uncordon cancelled n1's incident,
    and n2 was still not picked up."""
    with world(ladder="cordon", breaker=5, faulty=[False, True, True]) as model:
        model.admin_cordon(name="n1", cordon=False)


def test_a_crash_between_our_uncordon_and_its_record_is_no_administrator_action() -> None:
    """[reported], found on the tree of 1 Dec 12:05 by the random long run (crash safety, the
    report of defect 3): recovery releases the node (uncordon) before it writes `Recovered`; the
    process died in between, and the next one took our own uncordon for an administrator's and
    closed the incident `Cancelled/AdminUncordoned` ("An administrator uncordoned the node"),
    which also holds the next incident of that fault back as if a human had taken over."""
    for writes in range(6):  # wherever the recovery's writes fall, the story must hold
        with world(ladder="cordon") as model:
            model.fault(name="n0", cure=None)
            model.wait(5)
            model.heal(name="n0")
            model.crash(writes=writes)
            model.wait(600)


def test_one_policy_giving_a_node_back_is_no_administrator_uncordon_for_the_other() -> None:
    """[reported], defect 3: both policies had an incident on n1; when one gave the node back
    (deleted), the other's incident closed `Cancelled/AdminUncordoned` though no administrator
    acted. (Found with only `reported` checked; with every invariant, `cdf010a` fails it
    earlier, on `settles`: the two incidents' names collide.)"""
    with world(beta=-1, ladder="cordon", faulty=[False, True, False]) as model:
        model.delete_policy(policy="alpha")
        model.create_policy(policy="alpha", weight=-1)
        model.delete_policy(policy="beta")


def test_a_forced_drain_after_flapping_names_the_pods_it_took_past_their_pdb() -> None:
    """[pdb], defects 6, 15 and 17, found on the tree of 1 Dec 12:15 by the random long run:
    after the fault flapped through the drain, `onTimeout: Force` deleted the PDB-protected pod
    and the status said "deleting the remaining pods", naming neither pod nor PDB."""
    flaps = [("n0", 2, 6), ("n1", 2, 2), ("n0", 2, 5), ("n0", 5, 2), ("n0", 5, 2), ("n0", 5, 2)]
    flaps += [("n0", 5, 2), ("n0", 5, 3), ("n0", 5, 4), ("n0", 5, 5), ("n0", 5, 6), ("n0", 2, 6)]
    with world(force=True, karpenter=False, pdbs=[True, False, False]) as model:
        for name, period, times in flaps:
            model.flap(name=name, period=period, times=times)


def test_a_new_machine_under_a_failed_nodes_name_is_picked_up() -> None:
    """[picked-up], found on the tree of 1 Dec 12:30 by the random long run: an incident ended
    Failed; the node was deleted and a new machine joined under the same name; its fault,
    reported 5 s after it joined, opened no incident: the old machine's Failed hold (keyed by
    node name) took the new machine's short healthy spell for a flap. A new machine (new
    creationTimestamp, bootID, providerID) is not the one a human was asked to look at."""
    with world(ladder="cordon", fail=True) as model:
        model.fault(name="n0", cure=None)
        model.wait(120)
        model.delete_node(name="n0")
        model.rejoin(name="n0")
        model.wait(5)
        model.fault(name="n0", cure=None)


def test_a_milder_finding_over_the_fault_never_ends_an_incident_as_recovered() -> None:
    """[sticky], issue 21 finding 3: the agent keeps its condition False and overwrites the
    reason with a milder finding no policy acts on (XID 62, then 63); the incident read it as
    recovery and gave the node back while its GPU was never repaired."""
    with world() as model:
        model.fault(name="n0", cure=None)
        model.wait(120)
        model.newer_finding(name="n0")
        model.wait(600)
        model.wait(600)


def test_an_agent_that_restarts_mid_ladder_keeps_the_invariants() -> None:
    """Real agents forget on restart (node-problem-detector's lookback, the EKS agent's start):
    the condition reads healthy while the fault stays; no invariant may break."""
    with world() as model:
        model.fault(name="n0", cure=None)
        model.wait(120)
        model.agent_restarts(name="n0")
        model.wait(600)
        model.fault(name="n0", cure=Action.Reboot)
        model.wait(600)
        model.wait(600)


def test_a_cordon_only_incident_hands_its_node_over_without_an_uncordon() -> None:
    """[handover], [cleanup], [one-owner] (issue 21, D76), written from the finding: alpha
    only cordons and holds n0; beta's ladder is edited to act on the same fault, so alpha's
    incident yields the node to beta's. The node must stay cordoned throughout, then end
    with nothing of ours on it once beta's incident is over. Also killed mid-hand-over."""
    with world(ladder="cordon", beta=-1) as model:
        model.edit_ladder(policy="beta", ladder="cordon")
        model.fault(name="n0", cure=Action.Reboot)
        model.wait(60)
        model.edit_ladder(policy="beta", ladder="reboot")
        model.wait(60)
        reasons = [r.state.reason.value for r in model.cluster.remediations("alpha")]
        reasons += [r.state.reason.value for r in model.cluster.remediations("beta")]
        assert "SupersededByPolicy" in reasons, reasons
        model.wait(600)
    with world(ladder="cordon", beta=-1) as model:
        model.edit_ladder(policy="beta", ladder="cordon")
        model.fault(name="n0", cure=None)
        model.wait(60)
        model.crash(writes=1)
        model.edit_ladder(policy="beta", ladder="replace")
        model.wait(600)
