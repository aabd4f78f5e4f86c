"""Structured logs: one JSON object per line with the bound fields."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from remediation_operator.observability import logs


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_event_level_timestamp_and_bound_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("json", "info")
    logs.get(node="gpu-17", policy="gpu").info("step_started", step="Drain", reason="StepStarted")
    logs.get().debug("hidden")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 1
    line = lines[0]
    assert line["event"] == "step_started"
    assert line["level"] == "info"
    assert line["timestamp"].endswith("Z")
    assert (line["node"], line["policy"], line["step"]) == ("gpu-17", "gpu", "Drain")


@pytest.mark.parametrize(
    ("fmt", "level", "flag"), [("xml", "info", "--log-format"), ("json", "loud", "--log-level")]
)
def test_bad_settings_name_the_flag(fmt: str, level: str, flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        logs.configure(fmt, level)
