"""Fixtures for the hostile-cluster suites (issue 24): the integration suite's emulator,
fleet and operator process, fed objects of the sizes and shapes a real cluster can hold."""

from __future__ import annotations

import pytest

from tests.engine.conftest import harness  # noqa: F401  (the engine suite's fixture)
from tests.integration.conftest import cluster  # noqa: F401  (the shared fixture)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hostile: objects at the API server's limits (issue 24)")
    config.addinivalue_line("markers", "reliability: tries to break the operator (issue 7)")
    config.addinivalue_line(
        "markers", "fleet(shape=Shape, config=FleetConfig): the emulated fleet for this test"
    )
