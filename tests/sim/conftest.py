"""Fixtures for the fleet simulator's tests.

Real: the operator's engine (`engine.reconciler.reconcile`), the planner, the in-memory cluster
that implements the engine's ports, the policy parser, the shipped fault mix and the example
and baseline policies. Faked: the world around them. Faults, repairs, reboots, Karpenter
replacements and training jobs are simulated, and time is the simulator's manual clock (no
sleeping): a 30-day run takes well under a second of wall time on a small fleet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation_operator.domain.policy import Policy
from remediation_operator.sim import faultmix, study
from remediation_operator.sim.faultmix import FaultMix

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def mix() -> FaultMix:
    return faultmix.load()


@pytest.fixture(scope="session")
def graduated() -> Policy:
    return study.load_policy(EXAMPLES / "gpu-xid-ladders-policy.yaml")


@pytest.fixture(scope="session")
def replace_first() -> Policy:
    return study.load_policy(EXAMPLES / "baselines" / "replace-on-first-fault.yaml")


@pytest.fixture(scope="session")
def wait_not_ready() -> Policy:
    return study.load_policy(EXAMPLES / "baselines" / "wait-for-notready.yaml")
