"""The fake GPU node's state file: what its nvidia-smi reports and what a reset changes.

One JSON object (FAKE_GPU_NODE names its path). `gpus`: each with `uuid`, `bus_id`, `mig`
(current MIG mode Enabled), `processes` (compute processes: pid, name), `fabric` (N/A, Not
Started, In Progress, Completed), `remap_pending`, `remap_failed`, `sram_exceeded`,
`reset_supported`, `lost` (fell off the bus). Node-wide: `driver_loaded`, `root` (permission
to reset), `holders` (clients that keep a reset from running, e.g. the device plugin; the
test's or the emulator's stand-in for the GPU clients removes them), `missing_after_reset`
(UUIDs that do not come back), `fabric_settle` (queries after a reset before the fabric is
Completed again), `boot_id`, and what happened: `calls` (argv of each invocation), `resets`,
`reboots`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BIN = Path(__file__).with_name("bin")
"""Put this first on PATH to run against the fake node."""


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "bus_id": f"00000000:{0x10 + index:02X}:00.0",
        "mig": False,
        "processes": [],
        "fabric": "N/A",
        "remap_pending": False,
        "remap_failed": False,
        "sram_exceeded": False,
        "reset_supported": True,
        "lost": False,
    }
    body.update(overrides)
    return body


def node(gpus: Iterable[dict[str, Any]] | int = 8, **overrides: Any) -> dict[str, Any]:
    listed = [gpu(i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
    body: dict[str, Any] = {
        "gpus": listed,
        "driver_loaded": True,
        "root": True,
        "holders": [],
        "missing_after_reset": [],
        "fabric_settle": 0,
        "boot_id": "8d1bb0c2-0f6f-4b3e-9d7e-1f0d2a9c5e01",
        "calls": [],
        "resets": [],
        "reboots": 0,
    }
    body.update(overrides)
    return body


def write(path: Path, state: dict[str, Any]) -> None:
    path.write_text(json.dumps(state, indent=1), encoding="utf-8")


def read(path: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return body


def environment(path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose PATH finds the fake tools first and whose FAKE_GPU_NODE is `path`."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["FAKE_GPU_NODE"] = str(path)
    return env
