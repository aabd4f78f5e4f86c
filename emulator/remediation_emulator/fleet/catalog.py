"""The catalog of GPU fault classes the emulated node agent can show, read from `faults.yaml`.

A fault class says how the fault appears on the Node (the EKS agent's reason and message) and
what repairs it (the chance that a GPU reset or a reboot clears it). Keeping it as a data file
lets the demo, the tests and the docs share one table whose sources are written next to it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml


class CatalogError(ValueError):
    """A malformed catalog entry or an unknown fault class; the message names it."""


@dataclass(frozen=True)
class FaultClass:
    name: str
    summary: str
    bucket: str
    """NVIDIA's immediate-action bucket for the XID (RESET_GPU, RESTART_BM, ...)."""
    reason: str
    """AcceleratedHardwareReady's reason while the fault is present (empty when silent)."""
    message: str
    reset_clears: float
    reboot_clears: float
    reset_fails: bool = False
    """The reset cannot run at all (GPU unreachable); the reset executor reports failure."""
    clears_by_itself: bool = False
    silent: bool = False
    """The agent stops heartbeating instead of reporting a condition."""
    validation_fails: bool = False
    """A repair that clears the condition leaves the fault latent: the validation Job after it
    (DCGM diagnostics) still fails, as a GPU with a pending row-remap failure does."""
    weight: int = 1
    """Relative frequency for the random injector."""


_FIELDS = {
    "name": str,
    "summary": str,
    "bucket": str,
    "reason": str,
    "message": str,
    "reset_clears": float,
    "reboot_clears": float,
    "reset_fails": bool,
    "clears_by_itself": bool,
    "silent": bool,
    "validation_fails": bool,
    "weight": int,
}
_REQUIRED = ("name", "summary", "bucket", "reason", "message", "reset_clears", "reboot_clears")


def _entry(index: int, raw: Any) -> FaultClass:
    if not isinstance(raw, dict):
        raise CatalogError(f"fault catalog entry {index}: expected a mapping, got {raw!r}")
    where = f"fault catalog entry {index} ({raw.get('name', '?')})"
    for key in _REQUIRED:
        if key not in raw:
            raise CatalogError(f"{where}: missing field {key!r}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        kind = _FIELDS.get(key)
        if kind is None:
            raise CatalogError(f"{where}: unknown field {key!r}")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise CatalogError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
        values[key] = value
    for key in ("reset_clears", "reboot_clears"):
        if not 0.0 <= values[key] <= 1.0:
            raise CatalogError(f"{where}: field {key!r} is a probability in [0, 1]")
    fault = FaultClass(**values)
    if not fault.silent and not fault.reason:
        raise CatalogError(f"{where}: field 'reason' is required unless the fault is silent")
    return fault


def parse(raw: Any) -> Mapping[str, FaultClass]:
    """Validate a parsed catalog document: a list of entries with unique names."""
    if not isinstance(raw, list) or not raw:
        raise CatalogError("fault catalog: expected a non-empty list of fault classes")
    catalog: dict[str, FaultClass] = {}
    for index, item in enumerate(raw):
        fault = _entry(index, item)
        if fault.name in catalog:
            raise CatalogError(f"fault catalog entry {index}: duplicate name {fault.name!r}")
        catalog[fault.name] = fault
    return catalog


def load() -> Mapping[str, FaultClass]:
    """The catalog shipped with the package (`faults.yaml`)."""
    text = importlib.resources.files(__package__).joinpath("faults.yaml").read_text()
    return parse(yaml.safe_load(text))


def lookup(catalog: Mapping[str, FaultClass], name: str) -> FaultClass:
    """The named class, or an error listing the known names."""
    try:
        return catalog[name]
    except KeyError:
        known = ", ".join(sorted(catalog))
        raise CatalogError(f"unknown fault class {name!r}; known classes: {known}") from None
