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
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import yaml

from remediation_operator.api.policy_parsing import InvalidPolicyError, parse_policy
from remediation_operator.domain.policy import Policy
from remediation_operator.sim import oracle as oracles
from remediation_operator.sim.faultmix import FaultMix
from remediation_operator.sim.fleetspec import FleetSpec
from remediation_operator.sim.simulator import SAMPLE_EVERY, START, Observer, Result, Simulation
from remediation_operator.sim.spec import SpecError
from remediation_operator.sim.timeline import Timeline

__all__ = ["START", "Study", "load_policy", "policies_from", "run"]


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

    def __post_init__(self) -> None:
        if not self.policies:
            raise SpecError("policy", "at least one policy is needed")
        if self.days <= 0:
            raise SpecError("days", f"must be greater than 0, got {self.days:g}")
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


def run(
    study: Study,
    *,
    timeline: Timeline | None = None,
    observer: Observer | None = None,
) -> list[Result]:
    """Run every policy of the study in turn (one event loop for all of them)."""

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
