"""Structured logs: one JSON object per line, event names are snake_case facts.

Operators read logs with `kubectl logs | jq`; a fixed shape (`event`, `level`, `timestamp`,
plus bound `node`, `policy`, `step`, `reason`) lets them filter one node's story without
regular expressions. `console` is for people running the operator in a terminal.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from remediation_operator.domain import bounds

FORMATS = ("json", "console")
LIST_ITEMS = 100
"""Items kept of a list field (a `reconciled` line lists what a plan applied)."""


def _bounded_value(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return bounds.cut(value, limit)
    if isinstance(value, list | tuple) and (
        len(value) > LIST_ITEMS or any(isinstance(v, str) and len(v) > limit for v in value)
    ):
        kept = [bounds.cut(v, limit) if isinstance(v, str) else v for v in value[:LIST_ITEMS]]
        if len(value) > LIST_ITEMS:
            kept.append(f"…and {len(value) - LIST_ITEMS} more")
        return kept
    return value


def bounded(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Every field of a log line within `bounds.LOG_TEXT` characters (a traceback within four
    times that): a log line never carries a megabyte copied from the cluster (D52)."""
    for key, value in event.items():
        limit = 4 * bounds.LOG_TEXT if key == "exception" else bounds.LOG_TEXT
        event[key] = _bounded_value(value, limit)
    return event


class _Stderr:
    """Whatever `sys.stderr` is at the time of writing (test capture swaps it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


LEVELS = ("debug", "info", "warning", "error")


def configure(log_format: str = "json", level: str = "info") -> None:
    """Route structlog (and the standard library's logging, e.g. kopf's) to stderr."""
    if log_format not in FORMATS:
        raise ValueError(f"--log-format: {log_format!r} is not one of {', '.join(FORMATS)}")
    if level.lower() not in LEVELS:
        raise ValueError(f"--log-level: {level!r} is not one of {', '.join(LEVELS)}")
    numeric = logging.getLevelNamesMapping()[level.upper()]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, bounded, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # Third-party libraries (kopf, aiohttp) log through `logging`: render them the same way.
    handler = logging.StreamHandler(_Stderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                bounded,
                renderer,
            ],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # kopf is chatty at INFO about every watch event; keep it at WARNING unless debugging.
    root.setLevel(numeric)
    logging.getLogger("kopf").setLevel(numeric if numeric <= logging.DEBUG else logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def get(name: str = "remediation_operator", **bound: Any) -> Any:
    """A bound logger; `bound` values (node=, policy=, ...) appear on every line it writes."""
    return structlog.get_logger(name).bind(**bound)
