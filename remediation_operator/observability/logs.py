"""Structured logs: one JSON object per line, event names are snake_case facts.

Operators read logs with `kubectl logs | jq`; a fixed shape (`event`, `level`, `timestamp`,
plus bound `node`, `policy`, `step`, `reason`) lets them filter one node's story without
regular expressions. `console` is for people running the operator in a terminal.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

FORMATS = ("json", "console")


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
        processors=[*shared, structlog.processors.format_exc_info, renderer],
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
