"""Times in statuses: RFC 3339 in UTC with a trailing `Z`, as Kubernetes writes them.

Fractional seconds are written only when present, so times from a manual test clock round-trip
exactly while real ones look like every other Kubernetes timestamp.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with `Z`; a naive datetime is taken to be UTC."""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    pattern = "%Y-%m-%dT%H:%M:%S.%fZ" if utc.microsecond else "%Y-%m-%dT%H:%M:%SZ"
    return utc.strftime(pattern)


def parse_time(text: str) -> datetime:
    """RFC 3339 (with `Z` or an offset) -> aware UTC datetime; ValueError names the input."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not an RFC 3339 time such as 2026-11-30T11:02:00Z") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; write it in UTC with a trailing Z")
    return moment.astimezone(UTC)


def format_optional(moment: datetime | None) -> str | None:
    return None if moment is None else format_time(moment)


def parse_optional(text: str | None) -> datetime | None:
    return None if text is None else parse_time(text)
