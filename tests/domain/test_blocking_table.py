"""Every reason the planner holds back, one row each, and what lifts it.

Each row builds a small fleet, plays a script on gpu-1 (see `fake_cluster.run`), and checks
the node's Remediation (or its absence), the reason, the effects and the next wake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import (
    Action,
    Budget,
    CircuitBreaker,
    ConditionMatch,
    Fault,
    Policy,
    Rate,
    Step,
)
from remediation_operator.domain.reasons import Reason
from remediation_operator.domain.remediation import Phase

from .fake_cluster import (
    HEARTBEAT,
    MIN,
    SEC,
    FakeCluster,
    describe,
    node,
    policy,
    run,
    sooner_silence,
    xid_fault,
)
from .test_ladder_table import CORDONED, DETECT, DRAINING

SILENT_THEN_DRAIN = Fault(
    name="agent-silent",
    match=(ConditionMatch(HEARTBEAT, stale_after=5 * MIN),),
    ladder=(Step(Action.Cordon), Step(Action.Drain)),
)

DEFAULT_POLICY = policy()
DEFAULT_NODE = node()


@dataclass(frozen=True)
class Row:
    script: str
    phase: Phase | None
    reason: Reason
    effects: list[str]
    wake: timedelta | None
    policy: Policy = DEFAULT_POLICY
    others: dict[str, NodeView] = field(default_factory=dict)
    """More nodes in the fleet besides gpu-1."""
    before: str = ""
    """A script played on `gpu-0` first (to use up a budget or the rate); gpu-1's script then
    starts where the clock is, and `wake` is measured from there."""


def fleet(count: int, faulty: int = 0, **labels: str) -> dict[str, NodeView]:
    return {
        f"a{i:02}": node(f"a{i:02}", faulty=i < faulty, labels=dict(labels)) for i in range(count)
    }


ROWS: dict[str, Row] = {
    "paused: no new Remediation": Row(DETECT, None, Reason.Paused, [], None, policy(paused=True)),
    "pause requested: no new Remediation": Row(
        DETECT, None, Reason.Paused, [], None, policy(pause_requests=("upgrade-team",))
    ),
    "paused mid-ladder: held, nothing undone": Row(
        CORDONED + " pause +5m plan", Phase.Blocked, Reason.Paused, ["!Paused"], 12 * MIN
    ),
    "unpaused: the ladder resumes": Row(
        CORDONED + " pause +5m plan unpause plan",
        Phase.Running,
        Reason.StepStarted,
        ["Evict", "!StepStarted"],
        7 * MIN + 5 * SEC,
    ),
    "paused mid-drain: no re-evict": Row(
        DRAINING + " pause +1m plan", Phase.Blocked, Reason.Paused, ["!Paused"], 13 * MIN
    ),
    "excluded node: no new Remediation": Row(
        "exclude " + DETECT, None, Reason.NodeExcluded, [], None
    ),
    "excluded mid-ladder: held": Row(
        CORDONED + " exclude +5m plan",
        Phase.Blocked,
        Reason.NodeExcluded,
        ["!NodeExcluded"],
        12 * MIN,
    ),
    "stale heartbeat: cordon only, then evidence insufficient": Row(
        "silence plan plan",
        Phase.Blocked,
        Reason.EvidenceInsufficient,
        ["!StepSucceeded", "!EvidenceInsufficient"],
        5 * MIN,
        policy(faults=(xid_fault(), SILENT_THEN_DRAIN)),
    ),
    "approval required: wait for it": Row(
        CORDONED + " +5m plan",
        Phase.Blocked,
        Reason.AwaitingApproval,
        ["!AwaitingApproval"],
        12 * MIN,
        policy(require_approval=frozenset({Action.Drain})),
    ),
    "approved: the step starts": Row(
        CORDONED + " +5m plan approve:Drain plan",
        Phase.Running,
        Reason.StepStarted,
        ["Evict", "!StepStarted"],
        7 * MIN + 5 * SEC,
        policy(require_approval=frozenset({Action.Drain})),
    ),
    "budget used up by another node": Row(
        CORDONED + " +5m plan",
        Phase.Blocked,
        Reason.BudgetExhausted,
        ["!BudgetExhausted"],
        12 * MIN,
        policy(budgets=(Budget("1"),)),
        others={"gpu-0": node("gpu-0")},
        before=DRAINING,
    ),
    "budget percent rounds up: 10% of 3 nodes is 1": Row(
        CORDONED + " +5m plan",
        Phase.Blocked,
        Reason.BudgetExhausted,
        ["!BudgetExhausted"],
        12 * MIN,
        policy(budgets=(Budget("10%"),)),
        others={"gpu-0": node("gpu-0"), "gpu-2": node("gpu-2")},
        before=DRAINING,
    ),
    "budget for another action does not apply": Row(
        CORDONED + " +5m plan",
        Phase.Running,
        Reason.StepStarted,
        ["Evict", "!StepStarted"],
        7 * MIN + 5 * SEC,
        policy(budgets=(Budget("0", frozenset({Action.Replace})),)),
    ),
    "invalid budget allows zero": Row(
        CORDONED + " +5m plan",
        Phase.Blocked,
        Reason.BudgetInvalid,
        ["!BudgetInvalid"],
        12 * MIN,
        policy(budgets=(Budget("ten"),)),
    ),
    "rate limit: one disruptive start per hour": Row(
        CORDONED + " +5m plan",
        Phase.Blocked,
        Reason.RateLimited,
        ["!RateLimited"],
        60 * MIN,
        policy(rate=Rate(1, timedelta(hours=1))),
        others={"gpu-0": node("gpu-0")},
        before=DRAINING,
    ),
    "breaker open: no new Remediation": Row(
        DETECT,
        None,
        Reason.CircuitOpen,
        ["!CircuitOpen"],
        None,
        policy(circuit_breaker=CircuitBreaker("20%")),
        others=fleet(9, faulty=2),
    ),
    "small pool: one node at a time": Row(
        DETECT,
        None,
        Reason.CircuitOpen,
        ["!FaultDetected"],
        2 * MIN,
        policy(circuit_breaker=CircuitBreaker("20%", min_nodes=5)),
        others=fleet(2, faulty=1),
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_blocking(row: Row) -> None:
    nodes = {"gpu-1": node(), **row.others}
    cluster = FakeCluster(row.policy, nodes)
    if row.before:
        run(cluster, row.before, name="gpu-0")
        cluster.focus = frozenset({"gpu-1"})  # the wake and effects of gpu-1 only
    start = cluster.now
    plan = run(cluster, row.script)
    state = cluster.active.get("gpu-1") or next(
        (s for s in reversed(cluster.finished) if s.node == "gpu-1"), None
    )
    assert plan.reasons["gpu-1"] is row.reason
    assert describe(plan.effects) == row.effects
    # The row gives the incident's wake; the plan also wakes when a heartbeat would go stale.
    expected = None if row.wake is None else start + row.wake
    assert plan.next_wake == sooner_silence(cluster, expected)
    if row.phase is None:
        assert state is None
    else:
        assert state is not None
        assert (state.phase, state.reason) == (row.phase, row.reason)
        assert state.message.endswith(".")
