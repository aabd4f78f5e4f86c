"""Reading the simulator's YAML inputs (fault mix, fleet) with errors that name the field.

Both input files are written by people tuning a what-if study, so a typo must say exactly which
field is wrong (`causes[3].fixedBy.Reboot: 1.5 is not a probability between 0 and 1`) instead
of surfacing later as a strange report. The readers here are shared by `faultmix` and `fleetspec`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from remediation_operator.domain import durations


class SpecError(ValueError):
    """An input file (or one of its fields) is invalid; the message names the field."""

    def __init__(self, path: str, message: str, origin: str = "") -> None:
        self.path = path
        self.field_message = message
        where = f"{origin}: " if origin else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")


@dataclass(frozen=True)
class Range:
    """A duration drawn uniformly between `low` and `high` (inclusive) for each occurrence."""

    low: timedelta
    high: timedelta

    def draw(self, rng: random.Random) -> timedelta:
        if self.low == self.high:
            return self.low
        span = (self.high - self.low).total_seconds()
        return self.low + timedelta(seconds=rng.uniform(0.0, span))


def read_yaml(path: Path) -> Any:
    """Load one YAML document; a missing file or a syntax error raises SpecError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("", f"cannot read the file: {exc.strerror}", str(path)) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError("", f"is not valid YAML{line}", str(path)) from exc


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be a mapping, got {type(value).__name__}")
    return value


def only(value: Mapping[str, Any], path: str, allowed: set[str]) -> None:
    """Reject unknown keys: a misspelt key silently ignored would change the study."""
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        where = f"{path}." if path else ""
        raise SpecError(
            f"{where}{unknown[0]}", f"unknown field; expected one of {', '.join(sorted(allowed))}"
        )


def required(value: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in value:
        raise SpecError(f"{path}.{key}" if path else key, "is required")
    return value[key]


def integer(value: Any, path: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"must be an integer, got {value!r}")
    if value < minimum:
        raise SpecError(path, f"must be at least {minimum}, got {value}")
    return value


def number(value: Any, path: str, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(path, f"must be a number, got {value!r}")
    if value < minimum:
        raise SpecError(path, f"must be at least {minimum:g}, got {value!r}")
    return float(value)


def probability(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise SpecError(path, f"{value!r} is not a probability between 0 and 1")
    return float(value)


def text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(path, f"must be a non-empty string, got {value!r}")
    return value


def duration(value: Any, path: str) -> timedelta:
    try:
        return durations.parse(value)
    except durations.DurationError as exc:
        raise SpecError(path, str(exc)) from exc


def duration_range(value: Any, path: str) -> Range:
    """`[10m, 25m]` or a single duration `2m` (a fixed value)."""
    if isinstance(value, str):
        fixed = duration(value, path)
        return Range(fixed, fixed)
    if not isinstance(value, list) or len(value) != 2:
        raise SpecError(path, f"must be a duration or a [min, max] pair, got {value!r}")
    low = duration(value[0], f"{path}[0]")
    high = duration(value[1], f"{path}[1]")
    if high < low:
        raise SpecError(path, f"max {value[1]} is shorter than min {value[0]}")
    return Range(low, high)
