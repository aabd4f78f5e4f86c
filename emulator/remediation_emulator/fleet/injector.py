"""Random fault injection for the demo: faults arrive at a rate per node per hour.

Arrivals are a Poisson process (the number of faults in a tick is Poisson-distributed with
mean rate x healthy nodes x tick), the class is drawn by the catalog's weights (the Llama 3
root-cause counts), and the node among those currently healthy. Randomness comes from the
fleet's seeded generator, so a demo run can be replayed with `--seed`.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping, Sequence

from remediation_emulator.fleet.agent import NodeAgent
from remediation_emulator.fleet.catalog import FaultClass
from remediation_emulator.fleet.informer import Informer


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson-distributed count (Knuth's method; the means here are small)."""
    if mean <= 0:
        return 0
    limit = math.exp(-mean)
    count, product = 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def pick(rng: random.Random, faults: Sequence[FaultClass]) -> FaultClass:
    return rng.choices(list(faults), weights=[f.weight for f in faults], k=1)[0]


class Injector:
    def __init__(
        self,
        agent: NodeAgent,
        nodes: Informer,
        faults: Mapping[str, FaultClass],
        rate_per_node_hour: float,
        rng: random.Random,
        tick: float = 1.0,
    ) -> None:
        self.injected: list[tuple[str, str]] = []
        """(node, fault class) in injection order."""
        self._agent = agent
        self._nodes = nodes
        self._faults = [f for f in faults.values() if f.weight > 0]
        self._rate = rate_per_node_hour
        self._rng = rng
        self._tick = tick

    def healthy(self) -> list[str]:
        out = []
        for name in sorted(self._nodes.cache):
            h = self._agent.health(name)
            if h is None or (h.fault is None and not h.rebooting):
                out.append(name)
        return out

    def step(self) -> list[tuple[str, str]]:
        """One tick's injections (applied through the agent)."""
        candidates = self.healthy()
        count = poisson(self._rng, self._rate * len(candidates) * self._tick / 3600.0)
        done = []
        for _ in range(min(count, len(candidates))):
            node = candidates.pop(self._rng.randrange(len(candidates)))
            fault = pick(self._rng, self._faults)
            self._agent.inject(node, fault.name)
            done.append((node, fault.name))
        self.injected.extend(done)
        return done

    async def run(self) -> None:
        if self._rate <= 0 or not self._faults:
            return
        while True:
            await asyncio.sleep(self._tick)
            self.step()
