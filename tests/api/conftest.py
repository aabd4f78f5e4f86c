"""Tests of the API layer: models, conversions, validation, generated CRDs and docs, commands.

Real: everything: pydantic validation, the repository's committed crds/, docs/policy.md and
examples/, and the `remediation-operator` command run in-process. Faked: nothing; there is no
API server here, so the CRD schema is checked by walking it (structural rules) and by
validating the examples with `jsonschema`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GOOD_EXAMPLES = sorted(EXAMPLES.glob("*.yaml"))
INVALID_EXAMPLES = sorted((EXAMPLES / "invalid").glob("*.yaml"))


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture
def minimal() -> dict[str, Any]:
    """A fresh copy of examples/minimal-policy.yaml to break in one way per test."""
    loaded: dict[str, Any] = load(EXAMPLES / "minimal-policy.yaml")
    return loaded
