"""Random fault arrivals: counts follow the rate, classes follow the catalog's weights."""

from __future__ import annotations

import random
from collections import Counter

from remediation_emulator.fleet import catalog, injector


def test_poisson_counts_average_to_the_mean() -> None:
    rng = random.Random(3)
    draws = [injector.poisson(rng, 0.5) for _ in range(20000)]
    assert abs(sum(draws) / len(draws) - 0.5) < 0.03
    assert injector.poisson(rng, 0.0) == 0


def test_fault_classes_are_drawn_by_weight() -> None:
    faults = list(catalog.load().values())
    rng = random.Random(5)
    counts = Counter(injector.pick(rng, faults).name for _ in range(20000))
    total_weight = sum(f.weight for f in faults)
    share = counts["xid-48"] / 20000
    assert abs(share - 72 / total_weight) < 0.02
