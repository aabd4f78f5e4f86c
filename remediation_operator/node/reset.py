"""The GPU reset protocol (`remediation-operator node reset`).

As NVIDIA's own reset tooling (NVSentinel `gpu_reset.sh`) and Google's GKE gpu-reset-tool do
it, and as nvidia-smi(1) `-r/--gpu-reset` requires:
1. query (`nvidia-smi -q -x`): the driver answers and no GPU fell off the bus (exit 15, or
   fewer GPUs than expected: the reset is skipped, a permanent failure);
2. pre-flight on the targets: MIG mode off (a reset is not attempted with MIG enabled);
3. stop the GPU clients (labels, clients.py) and wait for their pods to go;
4. no compute process left on a target (else: busy, a transient failure);
5. ONE `nvidia-smi --gpu-reset -i <uuid>,<uuid>,...` for every target: on A100 HGX without
   Fabric Manager all NVLink peers must be reset together, and one GPU at a time would leave
   the node partly reset;
6. post-checks: every GPU back, fabric state Completed on NVSwitch systems (waited for), no
   pending or failed row remap, SRAM threshold not exceeded (a reset clears the volatile ECC
   counters, so those are not what is read);
7. restore the clients, whatever happened (this also clears the device plugin's unhealthy
   mark).
The outcome maps nvidia-smi's exit codes (smi.py): not supported, no permission, not
implemented or GPU lost are permanent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from remediation_operator.node import smi
from remediation_operator.node.clients import ClientsError, GpuClients
from remediation_operator.node.host import Ran
from remediation_operator.node.platform import Platform
from remediation_operator.node.result import Check, Outcome, Result

Runner = Callable[[list[str]], Ran]

_PERMANENT_REASONS: dict[int, str] = {
    smi.ExitCode.NotSupported: "ResetNotSupported",
    smi.ExitCode.NoPermission: "ResetNoPermission",
    smi.ExitCode.FunctionNotFound: "ResetNotSupported",
    smi.ExitCode.GpuLost: "GpuLost",
}


@dataclass(frozen=True)
class Settings:
    gpus: tuple[str, ...] = ()
    """UUIDs to reset; empty: every GPU of the node."""
    expected: int | None = None
    """How many GPUs the node should have (the node's nvidia.com/gpu capacity); None: as many
    as before the reset."""
    clients_timeout: float = 300.0
    fabric_timeout: float = 120.0


@dataclass
class Reset:
    platform: Platform
    run: Runner
    clients: GpuClients | None
    settings: Settings
    sleep: Callable[[float], None]
    monotonic: Callable[[], float]

    def __post_init__(self) -> None:
        self.actions: list[str] = []
        self.smi = self.platform.smi()

    def _result(self, outcome: Outcome, reason: str, message: str, *checks: Check) -> Result:
        return Result(
            "reset",
            outcome,
            reason,
            message,
            self.platform.as_result(),
            checks,
            tuple(self.actions),
        )

    def _query(self) -> tuple[smi.Query | None, Ran]:
        ran = self.run([*self.smi, "-q", "-x"])
        if ran.code not in (0, smi.ExitCode.GpuLost):
            return None, ran
        try:
            return smi.parse(ran.stdout), ran
        except smi.QueryError:
            return None, ran

    def __call__(self) -> Result:
        before, ran = self._query()
        if ran.code == smi.ExitCode.GpuLost:
            return self._result(
                Outcome.PermanentFailure,
                "GpuLost",
                f"nvidia-smi -q: {smi.meaning(ran.code)} ({ran.said}); the reset is skipped",
            )
        if before is None:
            return self._failed_query(ran)
        expected = self.settings.expected
        if expected is not None and len(before.gpus) < expected:
            return self._result(
                Outcome.PermanentFailure,
                "GpuMissing",
                f"{len(before.gpus)} of {expected} GPUs answer: a GPU fell off the bus or is"
                " missing; the reset is skipped",
            )
        known = {g.uuid: g for g in before.gpus}
        targets = self.settings.gpus or tuple(known)
        unknown = [u for u in targets if u not in known]
        if unknown:
            return self._result(
                Outcome.PermanentFailure, "GpuMissing", f"no such GPU on this node: {unknown[0]}"
            )
        mig = [u for u in targets if known[u].mig_enabled]
        if mig:
            return self._result(
                Outcome.PermanentFailure,
                "MigEnabled",
                f"MIG mode is enabled on {', '.join(mig)}: a GPU reset is not attempted"
                " (disable MIG, or reboot)",
                *(Check("mig-mode", u, False, "Enabled") for u in mig),
            )
        try:
            done = self._with_clients_stopped(targets, len(before.gpus))
        finally:
            if self.clients is not None:
                restored = self.clients.restore()
                if restored:
                    self.actions.append("restored GPU clients: " + ", ".join(restored))
        return replace(done, actions=tuple(self.actions))

    def _failed_query(self, ran: Ran) -> Result:
        reason = "DriverNotLoaded" if ran.code == smi.ExitCode.DriverNotLoaded else "QueryFailed"
        return self._result(
            Outcome.Failed, reason, f"nvidia-smi -q: {smi.meaning(ran.code)} ({ran.said})"
        )

    def _with_clients_stopped(self, targets: tuple[str, ...], count: int) -> Result:
        if self.clients is not None:
            try:
                labels = self.clients.stop(self.settings.clients_timeout)
            except ClientsError as error:
                return self._result(Outcome.Failed, "GpuClientsRunning", str(error))
            if labels:
                self.actions.append("stopped GPU clients: " + ", ".join(labels))
        now, ran = self._query()
        if now is None:
            return self._failed_query(ran)
        busy = [
            Check(
                "compute-processes",
                g.uuid,
                False,
                ", ".join(f"{p.name} ({p.pid})" for p in g.processes),
            )
            for g in now.gpus
            if g.uuid in targets and g.processes
        ]
        if busy:
            return self._result(
                Outcome.Failed,
                "GpusBusy",
                f"{len(busy)} GPU(s) still in use: {busy[0].gpu} by {busy[0].detail}",
                *busy,
            )
        argv = [*self.smi, "--gpu-reset", "-i", ",".join(targets)]
        reset = self.run(argv)
        self.actions.append(" ".join(argv[-3:]) + f" -> exit {reset.code}")
        if reset.code != 0:
            return self._reset_failed(reset)
        return self._post_checks(targets, count)

    def _reset_failed(self, ran: Ran) -> Result:
        what = f"nvidia-smi --gpu-reset: {smi.meaning(ran.code)} ({ran.said})"
        if ran.code in smi.PERMANENT:
            return self._result(Outcome.PermanentFailure, _PERMANENT_REASONS[ran.code], what)
        if ran.code == smi.ExitCode.DriverNotLoaded:
            return self._result(Outcome.Failed, "DriverNotLoaded", what)
        return self._result(Outcome.Failed, "ResetFailed", what)

    def _post_checks(self, targets: tuple[str, ...], count: int) -> Result:
        end = self.monotonic() + self.settings.fabric_timeout
        while True:
            after, ran = self._query()
            if after is None or ran.code == smi.ExitCode.GpuLost:
                return self._result(
                    Outcome.PermanentFailure,
                    "GpuMissingAfterReset",
                    f"after the reset, nvidia-smi -q: {smi.meaning(ran.code)} ({ran.said})",
                )
            settling = [
                g
                for g in after.gpus
                if g.uuid in targets and g.fabric_state in ("Not Started", "In Progress")
            ]
            if not settling or self.monotonic() >= end:
                break
            self.sleep(2.0)
        checks = check_health(after, count, targets)
        failed = [c for c in checks if not c.ok]
        if failed:
            first = failed[0]
            return self._result(
                Outcome.PermanentFailure,
                "ResetDidNotHeal",
                f"after the reset, {first.name} failed on {first.gpu or 'the node'}:"
                f" {first.detail}",
                *checks,
            )
        return self._result(
            Outcome.Succeeded,
            "ResetSucceeded",
            f"reset {len(targets)} GPU(s) in one command; all {count} GPUs back and healthy",
            *checks,
        )


def check_health(query: smi.Query, count: int, targets: tuple[str, ...] = ()) -> list[Check]:
    """The checks a reset and a validation make: every GPU there, fabric Completed, no
    pending or failed row remap, SRAM threshold not exceeded."""
    present = {g.uuid for g in query.gpus}
    checks = [Check("gpu-count", "", len(query.gpus) >= count, f"{len(query.gpus)} of {count}")]
    checks += [
        Check("gpu-present", u, u in present, "missing") for u in targets if u not in present
    ]
    for gpu in query.gpus:
        checks.append(Check("fabric-state", gpu.uuid, gpu.fabric_ready, gpu.fabric_state))
        checks.append(Check("row-remap-pending", gpu.uuid, not gpu.remap_pending, "pending"))
        checks.append(Check("row-remap-failure", gpu.uuid, not gpu.remap_failed, "failed"))
        checks.append(
            Check("sram-threshold", gpu.uuid, not gpu.sram_threshold_exceeded, "exceeded")
        )
    return checks
