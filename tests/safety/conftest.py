"""The whole-system safety model (issue 12).

Real: `engine.reconciler.reconcile`, the planner and everything under it, and
`sim.memory_cluster` (with the few knobs `world.SafetyCluster` adds). Faked: time (a manual
clock moved by the model; nothing sleeps), node agents (`world`: they write the node's
condition as the EKS node monitoring agent does) and administrators (the model's rules).
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # `make reliability` selects `-m reliability`; the long run of the model is one of them.
    config.addinivalue_line("markers", "reliability: tries to break the operator (issue 7)")
