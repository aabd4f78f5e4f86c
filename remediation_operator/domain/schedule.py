"""Cron schedules (UTC) for budgets that apply only in some windows, as Karpenter's do.

A budget with `schedule: "0 9 * * 1-5"` and `duration: 8h` is active from each scheduled
instant for `duration`. The planner asks two questions: is the budget active `now`, and when
does that answer next change (so it sleeps until exactly then instead of polling).

Syntax is the standard 5 fields (minute hour day-of-month month day-of-week) with `*`, `?` (day
fields), lists, ranges, steps, `N/step` (= `N-max/step`), month and weekday names, day-of-week
7 as Sunday, and the macros `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`,
`@hourly`. When both day fields are restricted a day matches if EITHER does (Vixie cron); a day
field written as `*` or `?` (without a step) leaves the other one alone. This is what
robfig/cron, which Karpenter uses for its budget schedules, does. Times are UTC only.
"""

from __future__ import annotations

import calendar
import itertools
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property, lru_cache

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
_DAYS = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

_SEARCH_DAYS = 366 * 9
"""How far back or forward to look for a scheduled day: covers Feb 29 across 2100 (8 years)."""

HORIZON = timedelta(days=366)
"""`next_change` never looks further than this; see its docstring."""


class ScheduleError(ValueError):
    """A schedule that does not parse; the message names the field and what was expected."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, _DAYS),
)


@dataclass(frozen=True)
class Cron:
    """A parsed schedule: the allowed values of each field, and the Vixie day rule's inputs."""

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    """0 is Sunday (7 is folded into 0)."""
    dom_star: bool
    dow_star: bool

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """Minutes after midnight at which the schedule fires on a matching day, ascending."""
        return tuple(sorted(h * 60 + m for h in self.hours for m in self.minutes))


def _number(text: str, spec: _Field) -> int:
    upper = text.upper()
    if upper in spec.names:
        return spec.names[upper]
    if not text.isdigit():
        raise ScheduleError(f"{spec.name} field: {text!r} is not a number or a known name")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise ScheduleError(f"{spec.name} field: {value} is out of range {spec.low}-{spec.high}")
    return value


def _parse_field(text: str, spec: _Field) -> tuple[frozenset[int], bool]:
    """The values a field allows, and whether it is an unrestricted `*`/`?` (star)."""
    values: set[int] = set()
    star = False
    for item in text.split(","):
        if not item:
            raise ScheduleError(f"{spec.name} field: empty item in {text!r}")
        body, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(
                    f"{spec.name} field: step {step_text!r} must be a positive integer"
                )
            step = int(step_text)
        if body in ("*", "?"):
            if body == "?" and spec.name not in ("day-of-month", "day-of-week"):
                raise ScheduleError(f"{spec.name} field: '?' is allowed only in day fields")
            low, high = spec.low, spec.high
            star = star or step == 1
        elif "-" in body:
            first, _, last = body.partition("-")
            low, high = _number(first, spec), _number(last, spec)
            if low > high:
                raise ScheduleError(f"{spec.name} field: range {body!r} runs backwards")
        else:
            low = _number(body, spec)
            high = spec.high if slash else low
        values.update(range(low, high + 1, step))
    return frozenset(values), star


def parse(expr: str) -> Cron:
    """Parse a 5-field cron expression or macro; raise ScheduleError naming the bad field."""
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("a schedule needs 5 fields: minute hour day-of-month month day-of-week")
    text = expr.strip()
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        raise ScheduleError("schedules are always UTC; remove the time zone prefix")
    if text.startswith("@"):
        if text.lower() not in _MACROS:
            raise ScheduleError(f"unknown macro {text!r}; use one of {', '.join(sorted(_MACROS))}")
        text = _MACROS[text.lower()]
    parts = text.split()
    if len(parts) != len(_FIELDS):
        raise ScheduleError(
            f"{expr!r} has {len(parts)} fields; a schedule needs 5:"
            " minute hour day-of-month month day-of-week"
        )
    (minutes, _), (hours, _), (doms, dom_star), (months, _), (dows, dow_star) = (
        _parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)
    )
    if 7 in dows:
        dows = (dows - {7}) | {0}
    cron = Cron(expr, minutes, hours, doms, months, dows, dom_star, dow_star)
    if (not dom_star) and dow_star and not _some_month_has_a_day(cron):
        raise ScheduleError(
            f"day-of-month field: no month in the month field has day {min(doms)}"
            f"{'' if len(doms) == 1 else ' or later listed days'}; the schedule would never fire"
        )
    return cron


def _some_month_has_a_day(cron: Cron) -> bool:
    longest = {m: calendar.monthrange(2000, m)[1] for m in range(1, 13)}  # 2000: a leap year
    return any(d <= longest[m] for m in cron.months for d in cron.days_of_month)


@lru_cache(maxsize=256)
def _parsed(expr: str) -> Cron:
    return parse(expr)


def _cron(expr_or_cron: str | Cron) -> Cron:
    """Callers pass the policy's text on every plan; parse each distinct text once."""
    return expr_or_cron if isinstance(expr_or_cron, Cron) else _parsed(expr_or_cron)


def _utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _like(result: datetime, template: datetime) -> datetime:
    """Give the result the same awareness as the caller's `now`."""
    return result.replace(tzinfo=None) if template.tzinfo is None else result


def _at(day: date, offset: int) -> datetime:
    return datetime.combine(day, time(offset // 60, offset % 60), tzinfo=UTC)


def previous(expr_or_cron: str | Cron, at: datetime) -> datetime | None:
    """The latest scheduled instant at or before `at`, or None if none in the last 9 years."""
    cron = _cron(expr_or_cron)
    moment = _utc(at)
    offsets = cron.offsets
    minute_of_day = moment.hour * 60 + moment.minute
    day = moment.date()
    for back in range(_SEARCH_DAYS):
        current = day - timedelta(days=back)
        if not cron.day_matches(current):
            continue
        candidates = offsets if back else [o for o in offsets if o <= minute_of_day]
        if candidates:
            return _like(_at(current, candidates[-1]), at)
    return None


def following(expr_or_cron: str | Cron, after: datetime) -> datetime | None:
    """The earliest scheduled instant strictly after `after`, or None within 9 years."""
    cron = _cron(expr_or_cron)
    moment = _utc(after)
    offsets = cron.offsets
    # A fire at offset o on `moment`'s own day is strictly after it iff o > its minute (a fire
    # in the same minute is at or before `moment`, since fires are on the whole minute).
    minute_of_day = moment.hour * 60 + moment.minute
    day = moment.date()
    for ahead in range(_SEARCH_DAYS):
        current = day + timedelta(days=ahead)
        if not cron.day_matches(current):
            continue
        candidates = offsets if ahead else [o for o in offsets if o > minute_of_day]
        if candidates:
            return _like(_at(current, candidates[0]), after)
    return None


def active(expr_or_cron: str | Cron, duration: timedelta, now: datetime) -> bool:
    """True when a scheduled instant t exists with now - duration < t <= now."""
    if duration <= timedelta(0):
        return False
    last = previous(expr_or_cron, now)
    return last is not None and _utc(last) > _utc(now) - duration


def next_change(expr_or_cron: str | Cron, duration: timedelta, now: datetime) -> datetime:
    """The first instant after `now` at which `active(...)` gives a different answer.

    A schedule whose windows overlap into one that never ends (`* * * * *` for 1h) or that will
    not fire again within 9 years has no such instant: the answer is then `now + HORIZON`, a
    harmless time to ask again.
    """
    cron = _cron(expr_or_cron)
    moment = _utc(now)
    horizon = moment + HORIZON
    if not active(cron, duration, moment):
        if duration <= timedelta(0):
            return _like(horizon, now)
        start = following(cron, moment)
        return _like(start if start is not None and start <= horizon else horizon, now)
    last = previous(cron, moment)
    assert last is not None  # active() found it
    return _like(min(_window_end(cron, duration, last, horizon), horizon), now)


def _window_end(cron: Cron, duration: timedelta, fire: datetime, horizon: datetime) -> datetime:
    """When the run of overlapping windows that contains `fire`'s window ends.

    Scheduled instants are (matching day) x (the same minute offsets every day), so the run ends
    after the first gap between consecutive instants that is longer than `duration`. The gaps
    inside a day are the same every day; only when one of them is long enough does a day need
    scanning offset by offset.
    """
    offsets = cron.offsets
    step = timedelta(minutes=1)
    inner_gap_long_enough = any((b - a) * step > duration for a, b in itertools.pairwise(offsets))
    day = fire.date()
    offset = fire.hour * 60 + fire.minute
    while _at(day, offset) <= horizon:
        if inner_gap_long_enough:
            later = [o for o in offsets if o >= offset]
            for a, b in itertools.pairwise(later):
                if (b - a) * step > duration:
                    return _at(day, a) + duration
        last_today = _at(day, offsets[-1])
        nxt = following(cron, last_today)
        if nxt is None or nxt - last_today > duration:
            return last_today + duration
        day, offset = nxt.date(), offsets[0]
    return horizon
