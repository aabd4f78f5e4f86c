"""The safety model under hypothesis: deterministic in CI, long and random in `make reliability`.

CI runs a fixed, derandomized set of sequences within a fixed budget (well under a minute on
two cores) and does not shrink a failure (that can take minutes); `SAFETY_SHRINK=1` replays the
same sequences and shrinks what fails. `SAFETY_EXAMPLES=<n>` (and `SAFETY_STEPS=<n>`, default
60) asks for that many random sequences with fresh randomness, shrunk when they fail;
`make reliability` sets it (`HYPOTHESIS_PROFILE=random` alone means 1,000). Sequences that once
broke an invariant are replayed as plain tests in `test_found.py`.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.safety.model import SafetyModel

RANDOM = os.environ.get("HYPOTHESIS_PROFILE") == "random"
EXAMPLES = int(os.environ.get("SAFETY_EXAMPLES", "1000" if RANDOM else "0"))
"""0: the CI profile (fixed sequences). Otherwise this many random sequences."""

pytestmark = [
    pytest.mark.reliability,
    # A guard against a hang, not a budget: CI's 400 sequences take 17 s of one core, but
    # `make test` runs them beside three other workers on two shared cores (D78), where they
    # took up to 316 s with other test runs sharing the machine. A long run gets about a
    # second per sequence plus ten minutes to shrink what it finds.
    pytest.mark.timeout(600 if not EXAMPLES else 600 + EXAMPLES),
]

SHRINK = (Phase.shrink,)
CI_PHASES = (Phase.explicit, Phase.generate) + (SHRINK if os.environ.get("SAFETY_SHRINK") else ())
"""No `explain` phase anywhere: its line tracer makes each run many times slower on Python
3.11. No shrinking in CI unless asked: shrinking a long sequence can take minutes."""

COMMON = settings(
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.register_profile(
    "safety-ci",
    COMMON,
    derandomize=True,
    max_examples=400,
    stateful_step_count=50,
    phases=CI_PHASES,
)
settings.register_profile(
    "safety-long",
    COMMON,
    derandomize=False,
    max_examples=max(EXAMPLES, 1),
    stateful_step_count=int(os.environ.get("SAFETY_STEPS", "60")),
    phases=(Phase.explicit, Phase.generate, *SHRINK),
)

TestSafetyModel = SafetyModel.TestCase
TestSafetyModel.settings = settings.get_profile("safety-long" if EXAMPLES else "safety-ci")
