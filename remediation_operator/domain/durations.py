"""Durations as users write them in policies (`90s`, `5m`, `1h30m`, `168h`).

Kubernetes users know Go's duration syntax from Karpenter and kubelet flags, so policies use
the same shape; one parser serves validation, the CRD pattern and the planner.
"""

from __future__ import annotations

import re
from datetime import timedelta

PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
"""The pattern the CRD schema enforces; `parse` accepts exactly the same strings."""

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_WHOLE = re.compile(PATTERN)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class DurationError(ValueError):
    """A string that is not a duration; the message says what was expected."""


def parse(text: str) -> timedelta:
    """Parse `1h30m`-style text; raise DurationError with an actionable message."""
    if not isinstance(text, str) or not _WHOLE.match(text):
        raise DurationError(
            f"{text!r} is not a duration; write a number with a unit,"
            " such as 90s, 5m, 1h30m or 168h"
        )
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text))
    return timedelta(seconds=seconds)


def format(delta: timedelta) -> str:
    """Render a duration the way a user would write it (`1h30m`, `45s`, `0s`)."""
    total = delta.total_seconds()
    if total < 0:
        return "-" + format(-delta)
    if total != int(total):
        if total < 1:
            return f"{round(total * 1000)}ms"
        return f"{total:g}s"
    seconds = int(total)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"
