"""Fixtures for the reliability suites: they try to break the operator and check what it left.

Real: the operator process (`python -m remediation_operator run`), killed with SIGKILL and
restarted; the API emulator over HTTP with its fault injection (500, 409, 429, delays, dropped
watches, 410 Gone); the emulated fleet (kubelet, Job runner, Karpenter). The `cluster` fixture
is the integration suite's own. Faked: time is short (second-long policy windows, the fleet's
FAST profile). The pure fuzz suites run the real parsing, node-view and planner code on
hypothesis-generated input; nothing is faked there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import cluster  # noqa: F401  (the shared fixture)

RUNS = int(os.environ.get("RELIABILITY_RUNS", "2"))
"""Seeded crash runs: a few in CI, `make reliability` asks for 50."""


FIGURES = os.environ.get("RELIABILITY_FIGURES")
"""When set, each run appends one JSON line here (the figures in docs/reliability.md)."""


def record_figures(record: dict[str, Any]) -> None:
    if FIGURES:
        with Path(FIGURES).open("a") as sink:
            sink.write(json.dumps(record) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability: tries to break the operator (issue 7)")
    config.addinivalue_line(
        "markers", "fleet(shape=Shape, config=FleetConfig): the emulated fleet for this test"
    )
