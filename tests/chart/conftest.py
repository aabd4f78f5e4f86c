"""Fixtures for the chart tests.

Real: the chart, helm v4 (`helm lint`, `helm template`, `helm install --dry-run=client`),
kubernetes-validate, check-jsonschema and the CRDs generated into crds/. Faked: nothing; there
is no cluster, so rendered manifests are parsed and validated, never applied. Tests that need a
tool skip with the command that installs it; tests that need crds/ skip until it is generated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart import chart_check

Document = dict[str, Any]


@pytest.fixture(scope="session")
def tools() -> chart_check.Tools:
    try:
        return chart_check.Tools.find()
    except chart_check.ToolMissingError as missing:
        pytest.skip(f"chart tools missing, run `make chart-check` to install them: {missing}")


@pytest.fixture(scope="session")
def crds() -> dict[chart_check.Kind, Document]:
    if not chart_check.crd_files(chart_check.CRDS):
        pytest.skip("crds/ is not generated yet: run `make crds`")
    return chart_check.load_crds()


def _key(values: Path | None) -> str:
    return "default" if values is None else values.stem


@pytest.fixture(scope="session")
def rendered(tools: chart_check.Tools) -> dict[str, list[Document]]:
    """Every values set's rendered objects, keyed "default" or the ci/ file's stem."""
    return {_key(v): chart_check.render(tools, v) for v in chart_check.values_files()}
