"""The validation after a repair (`remediation-operator node validate`).

1. Wait for the GPU stack (within `--ready-timeout`): on GPU Operator nodes the driver and
   toolkit come up minutes after boot, and the operator's validator writes
   `/run/nvidia/validations/{driver,toolkit}-ready` when they are; everywhere, nvidia-smi must
   answer. A node whose stack never came up is a failed validation only if the driver
   answered with an error; a stack that is simply not there yet when time runs out gives no
   verdict (NotRun: the operator holds the node, D53).
2. nvidia-smi checks (`reset.check_health`): every GPU there, fabric Completed, no pending or
   failed row remap, SRAM threshold not exceeded: the checks the old template claimed.
3. DCGM diagnostics at REMEDIATION_DIAG_LEVEL against the node's own host engine where one
   runs (`dcgmi diag --host`); a second `nv-hostengine` beside the node's is a configuration
   DCGM's maintainers call unsupported (NVIDIA/DCGM issues 104, 108), so the program starts
   none: without a reachable host engine the DCGM part is skipped and said so.
The result names each failed check and its GPU.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remediation_operator.node import smi
from remediation_operator.node.host import NOT_FOUND, Ran
from remediation_operator.node.platform import GPU_OPERATOR_DRIVER_ROOT, Platform
from remediation_operator.node.reset import check_health
from remediation_operator.node.result import Check, Outcome, Result

Runner = Callable[[list[str]], Ran]
READY_FILES = ("driver-ready", "toolkit-ready")
"""gpu-operator validator: the files it writes under /run/nvidia/validations when ready."""


@dataclass(frozen=True)
class Settings:
    level: int = 2
    expected: int | None = None
    ready_timeout: float = 600.0
    hostengine: str = "localhost:5555"
    """The node's DCGM host engine (the GPU Operator's nvidia-dcgm and the EKS agent's
    dcgm-server listen on 5555); "" skips DCGM."""


@dataclass
class Validate:
    platform: Platform
    run: Runner
    settings: Settings
    sleep: Callable[[float], None]
    monotonic: Callable[[], float]

    def _result(self, outcome: Outcome, reason: str, message: str, *checks: Check) -> Result:
        return Result("validate", outcome, reason, message, self.platform.as_result(), checks)

    def _stack_ready(self) -> str:
        """What is not ready yet ("" when all is)."""
        if self.platform.driver_root == GPU_OPERATOR_DRIVER_ROOT:
            root = Path(self.platform.host_root) / "run/nvidia/validations"
            missing = [f for f in READY_FILES if not (root / f).exists()]
            if missing:
                return f"the GPU Operator's validator has not written {', '.join(missing)}"
        return ""

    def __call__(self) -> Result:
        end = self.monotonic() + self.settings.ready_timeout
        while True:
            waiting = self._stack_ready()
            ran = self.run([*self.platform.smi(), "-q", "-x"]) if not waiting else None
            if ran is not None and ran.code in (0, smi.ExitCode.GpuLost):
                break
            if ran is not None and ran.code not in (smi.ExitCode.DriverNotLoaded, NOT_FOUND):
                return self._result(
                    Outcome.PermanentFailure,
                    "QueryFailed",
                    f"nvidia-smi -q: {smi.meaning(ran.code)} ({ran.said})",
                )
            if self.monotonic() >= end:
                why = waiting or f"nvidia-smi: {smi.meaning(ran.code if ran else 0)}"
                return self._result(
                    Outcome.NotRun,
                    "GpuStackNotReady",
                    f"the GPU stack was not ready within {self.settings.ready_timeout:.0f}s"
                    f" ({why}): no check ran",
                )
            self.sleep(5.0)
        query = smi.parse(ran.stdout)
        count = self.settings.expected if self.settings.expected is not None else query.attached
        checks = check_health(query, count)
        if ran.code == smi.ExitCode.GpuLost:
            checks.append(Check("gpu-lost", "", False, ran.said))
        checks += self._dcgm(query)
        failed = [c for c in checks if not c.ok]
        if failed:
            first = failed[0]
            return self._result(
                Outcome.PermanentFailure,
                "ValidationFailed",
                f"{len(failed)} check(s) failed: {first.name} on {first.gpu or 'the node'}"
                f" ({first.detail})",
                *checks,
            )
        dcgm = any(c.name == "dcgm-diag" for c in checks)
        return self._result(
            Outcome.Succeeded,
            "ValidationPassed",
            f"{len(query.gpus)} GPU(s) healthy: count, fabric, row remaps, SRAM"
            + (
                f", DCGM diag level {self.settings.level}"
                if dcgm
                else "; DCGM skipped (no host engine)"
            ),
            *checks,
        )

    def _dcgm(self, query: smi.Query) -> list[Check]:
        if not self.settings.hostengine:
            return []
        tool = ["dcgmi"]
        if (
            shutil.which("dcgmi") is None
            and (Path(self.platform.host_root) / "usr/bin/dcgmi").exists()
        ):
            tool = ["chroot", self.platform.host_root, "dcgmi"]  # the host's DCGM client
        argv = [*tool, "diag", "-r", str(self.settings.level), "--host", self.settings.hostengine]
        ran = self.run(argv)
        if ran.code == NOT_FOUND:
            return []
        if ran.code != 0 and "host engine" in (ran.stderr + ran.stdout).lower():
            return []  # none reachable: never start a second one
        if ran.code == 0:
            return [Check("dcgm-diag", "", True, "")]
        return failed_tests(ran.stdout, query) or [Check("dcgm-diag", "", False, ran.said)]


_RESULT_ROW = re.compile(r"^\|\s*(?P<test>[^|]*?)\s*\|\s*(?P<result>[^|]*?)\s*\|?\s*$")
_FAILED_ON = re.compile(r"^Fail - GPUs?: (?P<ids>[\d, ]+)$")


def failed_tests(table: str, query: smi.Query) -> list[Check]:
    """The failed tests of `dcgmi diag`'s table, one Check per test and GPU. A row is
    `| <test> | Pass - All |`, or `Fail - GPU: <id>` (`GPUs: 0, 1`), possibly on a
    continuation row with an empty test column (DCGM 3.3 output, e.g. stas00/ml-engineering
    compute/accelerator/nvidia/debug.md). DCGM's GPU ids follow NVML's index order, which is
    `nvidia-smi -q -x`'s order, so an id names that GPU by UUID."""
    checks: list[Check] = []
    test = ""
    for line in table.splitlines():
        row = _RESULT_ROW.match(line.strip())
        if row is None or row["test"].startswith("-"):
            continue
        test = row["test"] or test
        failed = _FAILED_ON.match(row["result"])
        if failed is None:
            continue
        for ident in (i.strip() for i in failed["ids"].split(",") if i.strip()):
            index = int(ident)
            gpu = query.gpus[index].uuid if index < len(query.gpus) else f"GPU {index}"
            checks.append(Check(f"dcgm: {test}", gpu, False, row["result"]))
    return checks
