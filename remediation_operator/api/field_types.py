"""The string formats policies use (durations, regexes, counts, cron, names), as pydantic types.

Each type validates with the same parser the operator runs later, so a policy that passes
`check-policy` is one the planner can use, and carries the schema the CRD enforces for it
(a pattern where one exists), so `kubectl apply` rejects what it can before we ever see it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

from remediation_operator.api import timestamps
from remediation_operator.domain import durations, schedule
from remediation_operator.domain.reasons import Reason

COUNT_OR_PERCENT_PATTERN = r"^((100|[0-9]{1,2})%|[0-9]+)$"
"""A node count (`3`) or a percentage of the selected nodes (`10%`); Karpenter's budget shape."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _duration(text: str) -> str:
    durations.parse(text)
    return text


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"{text!r} is not a valid regular expression: {exc}") from None
    return text


def _cron(text: str) -> str:
    schedule.parse(text)
    return text


def _dns_label(text: str) -> str:
    if len(text) > 63 or not re.match(DNS_LABEL_PATTERN, text):
        raise ValueError(
            f"{text!r} is not a DNS label: use at most 63 lower-case letters, digits and '-',"
            " starting and ending with a letter or digit"
        )
    return text


def _timestamp(text: str) -> str:
    timestamps.parse_time(text)
    return text


def _count_or_percent(value: Any) -> str:
    """Keep the value as text (`"3"`, `"10%"`) as the domain does; ints become their digits."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is neither a node count nor a percentage such as '10%'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative; a node count is 0 or more")
        return str(value)
    if not re.match(COUNT_OR_PERCENT_PATTERN, value):
        raise ValueError(
            f"{value!r} is neither a node count (such as 3) nor a percentage from 0% to 100%"
        )
    return value


Duration = Annotated[
    str,
    AfterValidator(_duration),
    WithJsonSchema({"type": "string", "pattern": durations.PATTERN}),
]
"""Go-style duration text: `90s`, `5m`, `1h30m`, `168h`."""

Regex = Annotated[str, AfterValidator(_regex)]
"""A Python regular expression, matched against the whole value."""

CronSchedule = Annotated[str, AfterValidator(_cron)]
"""A 5-field cron expression or macro such as `@daily`, evaluated in UTC."""

DnsLabel = Annotated[
    str,
    AfterValidator(_dns_label),
    WithJsonSchema({"type": "string", "pattern": DNS_LABEL_PATTERN, "maxLength": 63}),
]

CountOrPercent = Annotated[
    str,
    BeforeValidator(_count_or_percent),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": COUNT_OR_PERCENT_PATTERN,
            "minimum": 0,
        }
    ),
]
"""An integer node count, or a string count or percentage (`"10%"`), kept as text."""

Timestamp = Annotated[
    str,
    AfterValidator(_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""An RFC 3339 time (`2026-11-30T11:02:00Z`); see `timestamps`."""

REASON_PATTERN = r"^[A-Z][A-Za-z0-9]*$"

ReasonWord = Annotated[
    Reason,
    WithJsonSchema({"type": "string", "pattern": REASON_PATTERN}),
]
"""A `Reason`. The CRD only asks for one CamelCase word, so adding a reason (the vocabulary is
append-only) needs no CRD change and an older CRD accepts a newer operator's statuses."""
