"""Budget schedules: cron parsing, whether a window is open now, and when that next changes."""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation_operator.domain import durations, schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# 2026-11-30 is a Monday.


@pytest.mark.parametrize(
    ("expr", "moment", "expected"),
    [
        ("0 9 * * 1-5", "2026-11-30T09:00", True),
        ("0 9 * * 1-5", "2026-11-30T08:59", False),
        ("0 9 * * 1-5", "2026-11-29T09:00", False),  # Sunday
        ("0 9 * * MON-FRI", "2026-12-04T09:00", True),  # Friday
        ("0 9 * * mon-fri", "2026-12-05T09:00", False),  # Saturday
        ("*/15 * * * *", "2026-11-30T10:45", True),
        ("*/15 * * * *", "2026-11-30T10:50", False),
        ("5/20 * * * *", "2026-11-30T10:45", True),  # 5, 25, 45
        ("5/20 * * * *", "2026-11-30T10:05", True),
        ("5/20 * * * *", "2026-11-30T10:15", False),
        ("0 0 1 JAN,jul *", "2026-07-01T00:00", True),
        ("0 0 1 JAN,jul *", "2026-06-01T00:00", False),
        ("30 2 * * 7", "2026-11-29T02:30", True),  # 7 is Sunday
        ("30 2 * * 0", "2026-11-29T02:30", True),
        ("0 12 1-10/3 * *", "2026-11-07T12:00", True),  # 1, 4, 7, 10
        ("0 12 1-10/3 * *", "2026-11-08T12:00", False),
        ("@hourly", "2026-11-30T13:00", True),
        ("@daily", "2026-11-30T00:00", True),
        ("@midnight", "2026-11-30T00:01", False),
        ("@weekly", "2026-11-29T00:00", True),  # Sunday
        ("@weekly", "2026-11-30T00:00", False),
        ("@monthly", "2026-12-01T00:00", True),
        ("@yearly", "2027-01-01T00:00", True),
        ("@annually", "2026-12-01T00:00", False),
        # Vixie: both day fields restricted -> either matches.
        ("0 0 13 * FRI", "2026-11-13T00:00", True),  # the 13th (a Friday too)
        ("0 0 13 * FRI", "2026-11-20T00:00", True),  # a Friday, not the 13th
        ("0 0 13 * FRI", "2026-12-13T00:00", True),  # the 13th, a Sunday
        ("0 0 13 * FRI", "2026-11-19T00:00", False),
        # One day field is `*`: only the other one restricts.
        ("0 0 13 * *", "2026-11-20T00:00", False),
        ("0 0 * * FRI", "2026-11-13T00:00", True),
        ("0 0 ? * FRI", "2026-11-19T00:00", False),
        # `*/2` is a restriction (robfig/cron), so both fields restricted -> either matches.
        ("0 0 */2 * MON", "2026-11-30T00:00", True),  # the 30th is not in 1,3,..,31; a Monday
        ("0 0 */2 * MON", "2026-11-29T00:00", True),  # 29 is in 1,3,5,...,29,31
        ("0 0 */2 * MON", "2026-11-28T00:00", False),
        ("0 0 29 2 *", "2028-02-29T00:00", True),
    ],
)
def test_fires_exactly_at_scheduled_minutes(expr: str, moment: str, expected: bool) -> None:
    assert schedule.active(expr, timedelta(seconds=1), at(moment)) is expected


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "5 fields"),
        ("0 9 * *", "has 4 fields"),
        ("0 9 * * * *", "has 6 fields"),
        ("60 9 * * *", "minute field: 60 is out of range 0-59"),
        ("0 24 * * *", "hour field: 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field: 0 is out of range 1-31"),
        ("0 0 * 13 *", "month field: 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field: 8 is out of range 0-7"),
        ("0 0 * * FUN", "day-of-week field: 'FUN' is not a number or a known name"),
        ("0 0 * FOO *", "month field: 'FOO' is not a number"),
        ("0 5-1 * * *", "hour field: range '5-1' runs backwards"),
        ("*/0 * * * *", "minute field: step '0' must be a positive integer"),
        ("*/x * * * *", "minute field: step 'x'"),
        ("1,,2 * * * *", "minute field: empty item"),
        ("? * * * *", "minute field: '?' is allowed only in day fields"),
        ("@often", "unknown macro '@often'"),
        ("CRON_TZ=Europe/Paris 0 9 * * *", "always UTC"),
        ("0 0 30 2 *", "would never fire"),
        ("0 0 31 4,6 *", "would never fire"),
    ],
)
def test_bad_schedules_name_the_field(expr: str, fragment: str) -> None:
    with pytest.raises(schedule.ScheduleError, match=fragment.replace("?", r"\?")):
        schedule.parse(expr)


def test_the_window_is_half_open_from_each_fire() -> None:
    workday = schedule.parse("0 9 * * 1-5")
    eight_hours = timedelta(hours=8)
    assert schedule.active(workday, eight_hours, at("2026-11-30T09:00"))
    assert schedule.active(workday, eight_hours, at("2026-11-30T16:59:59"))
    assert not schedule.active(workday, eight_hours, at("2026-11-30T17:00"))
    assert not schedule.active(workday, eight_hours, at("2026-11-30T08:59:59"))
    assert not schedule.active(workday, timedelta(0), at("2026-11-30T09:00"))


@pytest.mark.parametrize(
    ("expr", "duration", "now", "change"),
    [
        # Inactive: the next fire opens the window.
        ("0 9 * * 1-5", "8h", "2026-11-30T08:00", "2026-11-30T09:00"),
        ("0 9 * * 1-5", "8h", "2026-12-04T17:00", "2026-12-07T09:00"),  # Fri -> Mon
        # Active: the window closes `duration` after the last fire.
        ("0 9 * * 1-5", "8h", "2026-11-30T10:00", "2026-11-30T17:00"),
        ("0 9 * * 1-5", "8h", "2026-11-30T09:00", "2026-11-30T17:00"),
        # Overlapping windows merge: hourly fires with a 90m window never close within a day...
        ("0 * * * *", "90m", "2026-11-30T10:30", "2027-12-01T10:30"),  # ...or ever: horizon
        # ...but 9-17h hourly with 90m closes at 17:00 + 90m.
        ("0 9-17 * * *", "90m", "2026-11-30T10:30", "2026-11-30T18:30"),
        # A gap inside the day longer than the window.
        ("0 9,10,15 * * *", "2h", "2026-11-30T09:30", "2026-11-30T12:00"),
        ("0 9,10,15 * * *", "2h", "2026-11-30T12:00", "2026-11-30T15:00"),
        # Daily windows that touch end to end never close: report the horizon.
        ("@daily", "24h", "2026-11-30T05:00", "2027-12-01T05:00"),
        # Daily windows with a one-minute gap close at 23:59.
        ("@daily", "1439m", "2026-11-30T05:00", "2026-11-30T23:59"),
        # Leap day: from 2026 the next Feb 29 is in 2028.
        ("0 0 29 2 *", "1h", "2026-11-30T05:00", "2027-12-01T05:00"),  # beyond the horizon
        ("0 0 29 2 *", "1h", "2027-12-01T05:00", "2028-02-29T00:00"),
        # Sub-minute precision of `now` is kept.
        ("0 9 * * *", "30s", "2026-11-30T09:00:10", "2026-11-30T09:00:30"),
    ],
)
def test_next_change_is_the_exact_flip(expr: str, duration: str, now: str, change: str) -> None:
    d = durations.parse(duration)
    got = schedule.next_change(expr, d, at(now))
    assert got == at(change)
    if got - at(now) < schedule.HORIZON:
        before = schedule.active(expr, d, got - timedelta(microseconds=1))
        assert schedule.active(expr, d, got) is not before
        assert schedule.active(expr, d, at(now)) is before


def test_naive_times_are_taken_as_utc_and_stay_naive() -> None:
    got = schedule.next_change("0 9 * * *", timedelta(hours=1), datetime(2026, 11, 30, 8))
    assert got == datetime(2026, 11, 30, 9)
    assert got.tzinfo is None


def test_aware_times_in_other_zones_are_compared_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    # 10:00 in Paris is 09:00 UTC.
    assert schedule.active(
        "0 9 * * *", timedelta(minutes=1), datetime(2026, 11, 30, 10, tzinfo=paris)
    )


# --- cross-check against brute force: every minute of a few weeks, scanned one by one ---------


_START = datetime(2026, 12, 1, tzinfo=UTC)


def _fires(cron: schedule.Cron, start: datetime, days: int) -> list[datetime]:
    found = []
    for minute in range(days * 24 * 60):
        t = start + timedelta(minutes=minute)
        if t.minute in cron.minutes and t.hour in cron.hours and cron.day_matches(t.date()):
            found.append(t)
    return found


def _brute_active(fires: list[datetime], duration: timedelta, moment: datetime) -> bool:
    i = bisect_right(fires, moment)  # fires[:i] are <= moment
    return i > 0 and fires[i - 1] > moment - duration


exprs = st.builds(
    lambda minutes, hours, dom, dow: (
        f"{','.join(map(str, sorted(minutes)))} {','.join(map(str, sorted(hours)))} {dom} * {dow}"
    ),
    st.sets(st.sampled_from([0, 10, 15, 30, 45, 59]), min_size=1, max_size=3),
    st.sets(st.integers(0, 23), min_size=1, max_size=6),
    st.sampled_from(["*", "1-7", "*/3", "15"]),
    st.sampled_from(["*", "1-5", "0,6", "3"]),
)


@settings(max_examples=40, deadline=None)
@given(exprs, st.integers(1, 36 * 60), st.integers(0, 7 * 24 * 60))
def test_agrees_with_brute_force(expr: str, minutes: int, offset: int) -> None:
    cron = schedule.parse(expr)
    duration = timedelta(minutes=minutes)
    fires = _fires(cron, _START - timedelta(days=3), 24)
    now = _START + timedelta(minutes=offset)
    assert schedule.active(cron, duration, now) is _brute_active(fires, duration, now)
    change = schedule.next_change(cron, duration, now)
    if change > now + timedelta(days=10):
        return  # beyond the scanned weeks
    state = _brute_active(fires, duration, now)
    probe = now + timedelta(minutes=1) - timedelta(seconds=now.second)
    while probe < change:  # nothing flips before `change`...
        assert _brute_active(fires, duration, probe) is state, probe
        probe += timedelta(minutes=1)
    assert _brute_active(fires, duration, change) is not state  # ...and it flips at `change`
