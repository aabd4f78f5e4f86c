"""The fault mix: which causes strike a GPU host, how often, how they show, what fixes them.

The simulator's outcome figures are only as good as this data, so it lives in a documented
YAML file (`data/fault-mix.yaml`, calibrated to the Llama 3 report) rather than in code, and is
parsed here into immutable values with errors that name the offending field.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from remediation_operator.domain.policy import Action
from remediation_operator.sim import spec
from remediation_operator.sim.spec import Range, SpecError

DEFAULT_PATH = Path(__file__).parent / "data" / "fault-mix.yaml"

FIXING_ACTIONS: tuple[Action, ...] = (Action.GPUReset, Action.Reboot, Action.Replace)
"""Actions that can clear a fault (cordon and drain only move work away)."""


@dataclass(frozen=True)
class Symptom:
    """The Node condition an agent publishes for a cause; it is what a policy can match."""

    type: str
    status: str
    reason: str


@dataclass(frozen=True)
class Signal:
    weight: float
    symptom: Symptom | None
    """None: the agent publishes nothing (a software crash, or a silent hardware fault)."""


@dataclass(frozen=True)
class Cause:
    name: str
    count: int
    signals: tuple[Signal, ...]
    persistent: bool
    """True: the node stays faulty until an action (or a human) fixes it."""
    not_ready: bool
    """True: the kubelet is unreachable while the fault lasts (Ready is not True)."""
    transient_share: float
    transient_lasts: Range
    fixed_by: Mapping[Action, float]

    def draw_symptom(self, rng: random.Random) -> Symptom | None:
        if len(self.signals) == 1:
            return self.signals[0].symptom
        pick = rng.uniform(0.0, sum(s.weight for s in self.signals))
        for signal in self.signals:
            pick -= signal.weight
            if pick <= 0:
                return signal.symptom
        return self.signals[-1].symptom


@dataclass(frozen=True)
class Durations:
    drain: Range
    gpu_reset: Range
    reboot: Range
    replace: Range
    manual_repair: Range
    job_crash_on_faulty_node: Range


DEFAULT_DIAGNOSTICS = Range(timedelta(minutes=2), timedelta(minutes=5))
"""ASSUMPTION: nvidia-bug-report.sh, the kernel log and a quick DCGM run take a few minutes."""


@dataclass(frozen=True)
class ValidationModel:
    """The validation Job after an in-place repair (a policy's `validation`, D37): how long it
    runs, and the chance that it fails on a host whose fault the repair did not fix."""

    duration: Range = field(
        default_factory=lambda: Range(timedelta(minutes=2), timedelta(minutes=5))
    )
    catches: float = 0.9


@dataclass(frozen=True)
class FaultMix:
    source: str
    hosts: int
    gpus_per_host: int
    days: float
    durations: Durations
    causes: tuple[Cause, ...]
    validation: ValidationModel = field(default_factory=ValidationModel)
    diagnostics: Range = DEFAULT_DIAGNOSTICS
    """How long the Diagnose Job before Reboot or Replace runs (a policy's `diagnostics`)."""

    def rate_per_host_day(self, cause: Cause) -> float:
        """Arrivals per host per day of one cause in the observed fleet."""
        return cause.count / (self.hosts * self.days)

    @property
    def total_rate_per_host_day(self) -> float:
        return sum(c.count for c in self.causes) / (self.hosts * self.days)


def load(path: Path | None = None) -> FaultMix:
    """Read a fault-mix file (the shipped Llama 3 mix by default)."""
    source = path or DEFAULT_PATH
    data = spec.read_yaml(source)
    try:
        return parse(data)
    except SpecError as exc:
        raise SpecError(exc.path, exc.field_message, str(source)) from exc


def parse(data: Any) -> FaultMix:
    root = spec.mapping(data, "")
    spec.only(root, "", {"basis", "durations", "causes", "validation", "diagnostics"})
    basis = spec.mapping(spec.required(root, "basis", ""), "basis")
    spec.only(basis, "basis", {"source", "hosts", "gpusPerHost", "days"})
    durations = _durations(spec.required(root, "durations", ""))
    raw_causes = spec.required(root, "causes", "")
    if not isinstance(raw_causes, list) or not raw_causes:
        raise SpecError("causes", "must be a non-empty list")
    causes = tuple(_cause(c, f"causes[{i}]") for i, c in enumerate(raw_causes))
    names = [c.name for c in causes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise SpecError(f"causes[{i}].name", f"{name!r} is listed twice")
    return FaultMix(
        source=spec.text(spec.required(basis, "source", "basis"), "basis.source"),
        hosts=spec.integer(spec.required(basis, "hosts", "basis"), "basis.hosts", minimum=1),
        gpus_per_host=spec.integer(
            spec.required(basis, "gpusPerHost", "basis"), "basis.gpusPerHost", minimum=1
        ),
        days=_positive(spec.required(basis, "days", "basis"), "basis.days"),
        durations=durations,
        causes=causes,
        validation=_validation(root.get("validation")),
        diagnostics=_diagnostics(root.get("diagnostics")),
    )


def _diagnostics(value: Any) -> Range:
    """Optional: `diagnostics: {duration: [min, max]}`."""
    if value is None:
        return DEFAULT_DIAGNOSTICS
    raw = spec.mapping(value, "diagnostics")
    spec.only(raw, "diagnostics", {"duration"})
    return spec.duration_range(
        spec.required(raw, "duration", "diagnostics"), "diagnostics.duration"
    )


def _validation(value: Any) -> ValidationModel:
    """Optional (a mix written before validation existed gets the defaults)."""
    if value is None:
        return ValidationModel()
    raw = spec.mapping(value, "validation")
    spec.only(raw, "validation", {"duration", "catches"})
    default = ValidationModel()
    duration = raw.get("duration")
    catches = raw.get("catches")
    return ValidationModel(
        duration=default.duration
        if duration is None
        else spec.duration_range(duration, "validation.duration"),
        catches=default.catches
        if catches is None
        else spec.probability(catches, "validation.catches"),
    )


def _positive(value: Any, path: str) -> float:
    result = spec.number(value, path)
    if result <= 0:
        raise SpecError(path, f"must be greater than 0, got {value!r}")
    return result


_DURATION_KEYS = {
    "drain": "drain",
    "gpuReset": "gpu_reset",
    "reboot": "reboot",
    "replace": "replace",
    "manualRepair": "manual_repair",
    "jobCrashOnFaultyNode": "job_crash_on_faulty_node",
}


def _durations(value: Any) -> Durations:
    raw = spec.mapping(value, "durations")
    spec.only(raw, "durations", set(_DURATION_KEYS))
    ranges = {
        attr: spec.duration_range(spec.required(raw, key, "durations"), f"durations.{key}")
        for key, attr in _DURATION_KEYS.items()
    }
    return Durations(**ranges)


def _cause(value: Any, path: str) -> Cause:
    raw = spec.mapping(value, path)
    spec.only(
        raw, path, {"name", "count", "signals", "persistent", "notReady", "transient", "fixedBy"}
    )
    persistent = spec.required(raw, "persistent", path)
    if not isinstance(persistent, bool):
        raise SpecError(f"{path}.persistent", f"must be true or false, got {persistent!r}")
    not_ready = raw.get("notReady", False)
    if not isinstance(not_ready, bool):
        raise SpecError(f"{path}.notReady", f"must be true or false, got {not_ready!r}")
    signals_raw = spec.required(raw, "signals", path)
    if not isinstance(signals_raw, list) or not signals_raw:
        raise SpecError(f"{path}.signals", "must be a non-empty list")
    signals = tuple(_signal(s, f"{path}.signals[{i}]") for i, s in enumerate(signals_raw))
    if sum(s.weight for s in signals) <= 0:
        raise SpecError(f"{path}.signals", "weights must add up to more than 0")
    share, lasts = 0.0, Range(timedelta(0), timedelta(0))
    if "transient" in raw:
        transient = spec.mapping(raw["transient"], f"{path}.transient")
        spec.only(transient, f"{path}.transient", {"share", "lasts"})
        share = spec.probability(
            spec.required(transient, "share", f"{path}.transient"), f"{path}.transient.share"
        )
        lasts = spec.duration_range(
            spec.required(transient, "lasts", f"{path}.transient"), f"{path}.transient.lasts"
        )
    fixed_by: dict[Action, float] = {Action.GPUReset: 0.0, Action.Reboot: 0.0, Action.Replace: 1.0}
    if "fixedBy" in raw:
        fixed_raw = spec.mapping(raw["fixedBy"], f"{path}.fixedBy")
        spec.only(fixed_raw, f"{path}.fixedBy", {a.value for a in FIXING_ACTIONS})
        for key, prob in fixed_raw.items():
            fixed_by[Action(key)] = spec.probability(prob, f"{path}.fixedBy.{key}")
    elif persistent:
        raise SpecError(f"{path}.fixedBy", "is required for a persistent cause")
    return Cause(
        name=spec.text(spec.required(raw, "name", path), f"{path}.name"),
        count=spec.integer(spec.required(raw, "count", path), f"{path}.count"),
        signals=signals,
        persistent=persistent,
        not_ready=not_ready,
        transient_share=share,
        transient_lasts=lasts,
        fixed_by=fixed_by,
    )


def _signal(value: Any, path: str) -> Signal:
    raw = spec.mapping(value, path)
    spec.only(raw, path, {"weight", "condition"})
    weight = spec.number(spec.required(raw, "weight", path), f"{path}.weight")
    condition = spec.required(raw, "condition", path)
    if condition is None:
        return Signal(weight, None)
    cond = spec.mapping(condition, f"{path}.condition")
    spec.only(cond, f"{path}.condition", {"type", "status", "reason"})
    status = spec.required(cond, "status", f"{path}.condition")
    if status not in ("True", "False", "Unknown"):
        raise SpecError(
            f"{path}.condition.status", f'must be "True", "False" or "Unknown", got {status!r}'
        )
    return Signal(
        weight,
        Symptom(
            type=spec.text(
                spec.required(cond, "type", f"{path}.condition"), f"{path}.condition.type"
            ),
            status=status,
            reason=spec.text(
                spec.required(cond, "reason", f"{path}.condition"), f"{path}.condition.reason"
            ),
        ),
    )
