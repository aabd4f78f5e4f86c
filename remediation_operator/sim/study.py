"""A what-if study: several policies over the same fleet, fault history and seed, side by side.

`remediation-operator simulate` is a thin shell over this module: it reads the inputs (policy
files through the same parser the operator uses, so a policy that simulates is a policy that
applies), runs every policy in one event loop, and hands back one result per policy, followed
by the oracle's (`sim/oracle.py`): the same faults handled with perfect knowledge, so every
report shows how far each policy is from the best any policy could do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import yaml

from remediation_operator.api.policy_parsing import InvalidPolicyError, parse_policy
from remediation_operator.domain.policy import Mode, Policy
from remediation_operator.sim import oracle as oracles
from remediation_operator.sim.faultmix import FaultMix
from remediation_operator.sim.fleetspec import FleetSpec
from remediation_operator.sim.simulator import SAMPLE_EVERY, START, Observer, Result, Simulation
from remediation_operator.sim.spec import SpecError
from remediation_operator.sim.timeline import Timeline

__all__ = ["START", "Study", "as_enforce", "load_policy", "policies_from", "run", "run_seeds"]


def load_policy(path: Path) -> Policy:
    """The RemediationPolicy in a YAML file (the first document of that kind).

    Raises SpecError naming the file and, for an invalid policy, every bad field.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("", f"cannot read the file: {exc.strerror}", str(path)) from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError("", f"is not valid YAML{line}", str(path)) from exc
    policies = [
        d for d in documents if isinstance(d, dict) and d.get("kind") == "RemediationPolicy"
    ]
    if not policies:
        raise SpecError("kind", "no RemediationPolicy document in the file", str(path))
    try:
        return parse_policy(policies[0])
    except InvalidPolicyError as exc:
        details = "; ".join(str(e) for e in exc.errors)
        raise SpecError("", f"invalid RemediationPolicy: {details}", str(path)) from exc


@dataclass(frozen=True)
class Study:
    policies: tuple[Policy, ...]
    mix: FaultMix
    fleet: FleetSpec
    days: float
    seed: int
    sample_every: timedelta = SAMPLE_EVERY
    oracle: bool = True
    """Also run the oracle on the same faults (its result comes last)."""
    seeds: int = 1
    """How many seeds `run_seeds` runs: `seed`, `seed + 1`, ... (each its own fault history)."""

    def __post_init__(self) -> None:
        if not self.policies:
            raise SpecError("policy", "at least one policy is needed")
        if self.days <= 0:
            raise SpecError("days", f"must be greater than 0, got {self.days:g}")
        if not 1 <= self.seeds <= MAX_SEEDS:
            raise SpecError("seeds", f"must be from 1 to {MAX_SEEDS}, got {self.seeds}")
        names = [p.name for p in self.policies]
        if self.oracle and oracles.NAME in names:
            raise SpecError(
                "metadata.name",
                f"{oracles.NAME!r} names the oracle's column in the report; rename the policy",
            )
        for i, name in enumerate(names):
            if name in names[:i]:
                raise SpecError(
                    "metadata.name",
                    f"two compared policies are both named {name!r}; rename one",
                )


MAX_SEEDS = 100
"""More seeds than this is a mistake (each seed is a whole study)."""


def run_seeds(
    study: Study,
    *,
    timeline: Timeline | None = None,
    observer: Observer | None = None,
) -> list[list[Result]]:
    """`run` for `study.seeds` consecutive seeds from `study.seed`, one list of results per
    seed. The timeline, if any, records the first seed only; the observer sees every seed."""
    return [
        run(
            replace(study, seed=study.seed + i),
            timeline=timeline if i == 0 else None,
            observer=observer,
        )
        for i in range(study.seeds)
    ]


def as_enforce(policies: Sequence[Policy]) -> tuple[Policy, ...]:
    """The policies with DryRun switched to Enforce (`simulate --as-enforce`): what a policy
    shipped in DryRun, such as the chart's default, would do once it is put in force."""
    return tuple(replace(p, mode=Mode.Enforce) for p in policies)


def run(
    study: Study,
    *,
    timeline: Timeline | None = None,
    observer: Observer | None = None,
) -> list[Result]:
    """Run every policy of the study in turn (one event loop for all of them), for `seed`."""

    async def everything() -> list[Result]:
        results = []
        for policy in study.policies:
            simulation = Simulation(
                policy,
                mix=study.mix,
                fleet=study.fleet,
                days=study.days,
                seed=study.seed,
                timeline=timeline,
                observer=observer,
                sample_every=study.sample_every,
            )
            results.append(await simulation.run())
        if study.oracle:
            best = oracles.Oracle(
                mix=study.mix,
                fleet=study.fleet,
                days=study.days,
                seed=study.seed,
                timeline=timeline,
                sample_every=study.sample_every,
            )
            results.append(await best.run())
        return results

    return asyncio.run(everything())


def policies_from(paths: Sequence[Path]) -> tuple[Policy, ...]:
    return tuple(load_policy(p) for p in paths)
