"""Budgets: strictest active wins, percentages round up, invalid allows zero, schedules."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from remediation_operator.domain import budgets
from remediation_operator.domain.policy import Action, Budget

from .fake_cluster import T0

REPLACE = frozenset({Action.Replace})


@pytest.mark.parametrize(
    ("nodes", "selected", "allowed"),
    [
        ("10%", 5, 1),
        ("10%", 10, 1),
        ("10%", 11, 2),
        ("0%", 50, 0),
        ("100%", 7, 7),
        ("3", 100, 3),
        ("0", 9, 0),
    ],
)
def test_percentages_round_up(nodes: str, selected: int, allowed: int) -> None:
    assert budgets.nodes_allowed(Budget(nodes), selected) == allowed


@pytest.mark.parametrize("nodes", ["ten", "-1", "101%", "5.5", "", "10 %"])
def test_invalid_budget_allows_zero_and_says_why(nodes: str) -> None:
    budget = Budget(nodes)
    assert budgets.nodes_allowed(budget, 100) == 0
    problem = budgets.problem(budget)
    assert problem is not None
    assert repr(nodes) in problem
    assert "allows zero" in problem


def test_schedule_without_duration_is_invalid() -> None:
    problem = budgets.problem(Budget("1", schedule="0 9 * * 1-5"))
    assert problem is not None
    assert "together" in problem


def test_bad_cron_is_invalid_and_names_the_field() -> None:
    problem = budgets.problem(Budget("1", schedule="0 25 * * *", duration=timedelta(hours=1)))
    assert problem is not None
    assert "hour field" in problem


def test_strictest_active_budget_blocks() -> None:
    limits = budgets.limits([Budget("10%"), Budget("1", REPLACE)], 100, T0)
    counts = {Budget("10%"): 3, Budget("1", REPLACE): 1}
    blocking = budgets.blocking(limits, Action.Replace, counts)
    assert blocking is not None
    assert blocking.budget == Budget("1", REPLACE)
    assert budgets.blocking(limits, Action.Drain, counts) is None
    assert budgets.headroom(limits, counts) == {
        Action.Drain: 7,
        Action.GPUReset: 7,
        Action.Reboot: 7,
        Action.Replace: 0,
    }


def test_no_budget_means_unlimited() -> None:
    limits = budgets.limits([], 100, T0)
    assert budgets.blocking(limits, Action.Drain, {}) is None
    assert budgets.headroom(limits, {}) == {}


def test_scheduled_budget_applies_only_in_its_window() -> None:
    """With a stand-in window function: the schedule logic is one call."""
    business = Budget("0", REPLACE, schedule="0 9 * * 1-5", duration=timedelta(hours=8))

    def window_open(expr: str, duration: timedelta, now: datetime) -> bool:
        return expr == "0 9 * * 1-5" and 9 <= now.hour < 17

    morning = T0.replace(hour=10)
    night = T0.replace(hour=22)
    assert budgets.limits([business], 10, morning, window_open) != ()
    assert budgets.limits([business], 10, night, window_open) == ()


def test_scheduled_budget_with_the_real_cron() -> None:
    business = Budget("0", REPLACE, schedule="0 9 * * 1-5", duration=timedelta(hours=8))
    monday_10 = datetime(2026, 11, 30, 10, 0, tzinfo=T0.tzinfo)  # a Monday
    assert budgets.is_active(business, monday_10)
    assert not budgets.is_active(business, monday_10.replace(hour=18))
    assert budgets.next_change([business], monday_10) == monday_10.replace(hour=17)
