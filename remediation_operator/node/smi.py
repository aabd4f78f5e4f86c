"""What nvidia-smi says: its exit codes and the fields of `nvidia-smi -q -x` the steps read.

Exit codes, nvidia-smi(1) RETURN VALUE: 0 success, 2 invalid argument, 3 operation not
supported on the target device, 4 no permission, 6 object not found, 8 external power cables
not attached, 9 NVIDIA driver not loaded, 10 interrupt issue with the GPU, 12 NVML shared
library not found, 13 function not implemented in the local NVML, 14 infoROM corrupted, 15 the
GPU fell off the bus or became inaccessible, 255 other error or internal driver error
(docs/decisions.md D55). A reset that cannot ever work on this node (3, 4, 13) or a GPU that
fell off the bus (15) is permanent: the ladder climbs at once instead of retrying.

XML fields (`nvidia-smi -q -x`, one `<gpu>` per device, DTD nvsmi_device_v12): `uuid`,
`mig_mode/current_mig`, `processes/process_info/{pid,process_name}`, `fabric/state` (N/A,
Not Started, In Progress, Completed; NVSwitch systems), `remapped_rows/remapped_row_pending`
and `remapped_row_failure` (Yes/No), `ecc_errors/aggregate/sram_threshold_exceeded` (Yes/No,
Hopper and later) and the root's `attached_gpus`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """nvidia-smi(1) RETURN VALUE."""

    Success = 0
    InvalidArgument = 2
    NotSupported = 3
    NoPermission = 4
    NotFound = 6
    PowerCable = 8
    DriverNotLoaded = 9
    Interrupt = 10
    LibraryNotFound = 12
    FunctionNotFound = 13
    InfoRomCorrupted = 14
    GpuLost = 15
    Other = 255


MEANING: dict[int, str] = {
    0: "success",
    2: "invalid argument",
    3: "the operation is not supported on the target GPU",
    4: "no permission to perform the operation",
    6: "the GPU was not found",
    8: "external power cables are not attached",
    9: "the NVIDIA driver is not loaded",
    10: "interrupt issue with the GPU",
    12: "the NVML shared library was not found",
    13: "the local NVML does not implement the function",
    14: "the GPU's infoROM is corrupted",
    15: "the GPU fell off the bus or became inaccessible",
    255: "other error or internal driver error",
}

PERMANENT: frozenset[int] = frozenset(
    {ExitCode.NotSupported, ExitCode.NoPermission, ExitCode.FunctionNotFound, ExitCode.GpuLost}
)
"""Exit codes after which another attempt cannot succeed on this node: climb at once."""


def meaning(code: int) -> str:
    return MEANING.get(code, f"exit code {code}")


@dataclass(frozen=True)
class Process:
    pid: int
    name: str


@dataclass(frozen=True)
class Gpu:
    """One `<gpu>` of `nvidia-smi -q -x`, reduced to what the steps check."""

    bus_id: str
    uuid: str
    mig_enabled: bool
    processes: tuple[Process, ...]
    fabric_state: str
    """"N/A" where there is no NVSwitch fabric; else Not Started, In Progress or Completed."""
    remap_pending: bool
    remap_failed: bool
    sram_threshold_exceeded: bool

    @property
    def fabric_ready(self) -> bool:
        return self.fabric_state in ("N/A", "", "Completed")


@dataclass(frozen=True)
class Query:
    attached: int
    gpus: tuple[Gpu, ...]


class QueryError(ValueError):
    """`nvidia-smi -q -x` printed something that is not its XML."""


def _text(node: ElementTree.Element, path: str) -> str:
    found = node.find(path)
    return (found.text or "").strip() if found is not None else ""


def _yes(node: ElementTree.Element, path: str) -> bool:
    return _text(node, path).lower() == "yes"


def parse(xml: str) -> Query:
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as error:
        raise QueryError(f"nvidia-smi -q -x printed no valid XML: {error}") from error
    gpus = []
    for gpu in root.findall("gpu"):
        processes = tuple(
            Process(int(_text(p, "pid") or 0), _text(p, "process_name"))
            for p in gpu.findall("processes/process_info")
        )
        gpus.append(
            Gpu(
                bus_id=gpu.get("id", ""),
                uuid=_text(gpu, "uuid"),
                mig_enabled=_text(gpu, "mig_mode/current_mig") == "Enabled",
                processes=processes,
                fabric_state=_text(gpu, "fabric/state") or "N/A",
                remap_pending=_yes(gpu, "remapped_rows/remapped_row_pending"),
                remap_failed=_yes(gpu, "remapped_rows/remapped_row_failure"),
                sram_threshold_exceeded=_yes(gpu, "ecc_errors/aggregate/sram_threshold_exceeded"),
            )
        )
    attached = int(_text(root, "attached_gpus") or len(gpus))
    return Query(attached, tuple(gpus))
