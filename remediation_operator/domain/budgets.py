"""Disruption budgets: how many nodes may be in a disruptive step at once, per action.

Karpenter-style: every budget whose `actions` include an action and whose schedule window is
open applies, and the strictest one wins. `nodes` is an integer or a percentage of the
selected nodes, rounded UP (10% of 5 nodes is 1). A budget that cannot be understood allows
zero (fail closed, as Karpenter does) and is reported so the policy's status can say why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from remediation_operator.domain import schedule
from remediation_operator.domain.policy import DISRUPTIVE, Action, Budget

_NODES = re.compile(r"^(?:(?P<percent>100|[0-9]{1,2})%|(?P<count>[0-9]+))$")

Window = Callable[[str, timedelta, datetime], bool]
"""Whether a schedule's window is open at an instant (`schedule.active`)."""


@dataclass(frozen=True)
class Limit:
    """What one budget allows right now."""

    budget: Budget
    nodes: int
    """The node count it allows (0 when invalid)."""
    invalid: str | None = None
    """Why the budget is invalid (one sentence), or None."""


def _describe(budget: Budget) -> str:
    scheduled = f" (schedule {budget.schedule!r})" if budget.schedule else ""
    actions = ",".join(a.value for a in sorted(budget.actions, key=list(Action).index))
    return f"budget nodes={budget.nodes!r} for {actions}{scheduled}"


@lru_cache(maxsize=256)
def problem(budget: Budget) -> str | None:
    """One sentence naming what is wrong with the budget, or None when it is valid."""
    if _NODES.match(budget.nodes.strip()) is None:
        return (
            f"{_describe(budget)} is invalid: nodes must be a whole number or a percentage"
            " from 0% to 100%; it allows zero nodes until fixed"
        )
    if not budget.actions:
        return f"{_describe(budget)} is invalid: it lists no actions"
    if budget.schedule is not None or budget.duration is not None:
        if budget.schedule is None or budget.duration is None:
            return (
                f"{_describe(budget)} is invalid: schedule and duration must be given together;"
                " it allows zero nodes until fixed"
            )
        try:
            schedule.parse(budget.schedule)
        except schedule.ScheduleError as err:
            return f"{_describe(budget)} is invalid: {err}; it allows zero nodes until fixed"
    return None


def nodes_allowed(budget: Budget, selected: int) -> int:
    """The budget's node count for `selected` nodes; percentages round up. 0 when invalid."""
    if problem(budget) is not None:
        return 0
    found = _NODES.match(budget.nodes.strip())
    assert found is not None  # problem() checked it
    if found["percent"] is not None:
        return -(-int(found["percent"]) * selected // 100)
    return int(found["count"])


def is_active(budget: Budget, now: datetime, window: Window = schedule.active) -> bool:
    """A budget without a schedule is always active; an invalid one always applies (as zero)."""
    if problem(budget) is not None:
        return True
    if budget.schedule is None or budget.duration is None:
        return True
    return window(budget.schedule, budget.duration, now)


def limits(
    budgets: Iterable[Budget], selected: int, now: datetime, window: Window = schedule.active
) -> tuple[Limit, ...]:
    """Every budget active now, with what it allows."""
    return tuple(
        Limit(b, nodes_allowed(b, selected), problem(b))
        for b in budgets
        if is_active(b, now, window)
    )


def blocking(
    limits_now: Iterable[Limit], action: Action, counts: Mapping[Budget, int]
) -> Limit | None:
    """The strictest active budget for `action` that has no room for one more node, if any.

    `counts` holds, per budget, the nodes it already counts (excluding the node asking).
    """
    worst: Limit | None = None
    worst_room = 0
    for limit in limits_now:
        if action not in limit.budget.actions:
            continue
        room = limit.nodes - counts.get(limit.budget, 0)
        if room <= 0 and (worst is None or room < worst_room):
            worst, worst_room = limit, room
    return worst


def headroom(limits_now: Iterable[Limit], counts: Mapping[Budget, int]) -> dict[Action, int]:
    """How many more nodes each budgeted disruptive action may take now (absent: unlimited)."""
    listed = tuple(limits_now)
    room: dict[Action, int] = {}
    for action in sorted(DISRUPTIVE, key=list(Action).index):
        free = [
            max(0, limit.nodes - counts.get(limit.budget, 0))
            for limit in listed
            if action in limit.budget.actions
        ]
        if free:
            room[action] = min(free)
    return room


def next_change(
    budgets: Iterable[Budget],
    now: datetime,
    change: Callable[[str, timedelta, datetime], datetime] = schedule.next_change,
) -> datetime | None:
    """The earliest instant a scheduled budget opens or closes (None: no valid schedules)."""
    times = [
        change(b.schedule, b.duration, now)
        for b in budgets
        if b.schedule is not None and b.duration is not None and problem(b) is None
    ]
    return min(times, default=None)
