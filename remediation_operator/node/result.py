"""What a node step reports: one JSON object on stdout and in the pod's termination message.

The operator reads the termination message of the Job's pod (at most 4096 bytes: Kubernetes'
limit for `terminationMessagePath`) into the step's record and Event, so the result says in
its `message` what was found and done first, and its details after. `outcome` is Succeeded,
Failed (another attempt may work) or PermanentFailure (none will on this node: the ladder
climbs at once) or NotRun (a validation that could not check anything: no verdict, the
operator holds the node); the process exits 0, 1, 2 or 3 to match.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

TERMINATION_LIMIT = 4096
"""Kubernetes truncates a termination message beyond 4096 bytes (core/v1 Container)."""


class Outcome(StrEnum):
    Succeeded = "Succeeded"
    Failed = "Failed"
    PermanentFailure = "PermanentFailure"
    NotRun = "NotRun"
    """A check that could not run (the GPU stack never came up): no verdict on the GPU."""


EXIT_CODES = {
    Outcome.Succeeded: 0,
    Outcome.Failed: 1,
    Outcome.PermanentFailure: 2,
    Outcome.NotRun: 3,
}


@dataclass(frozen=True)
class Check:
    """One check on one GPU ("" for the node as a whole)."""

    name: str
    gpu: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Result:
    command: str
    outcome: Outcome
    reason: str
    """One CamelCase word (ResetSucceeded, ResetNotSupported, GpusBusy, AlreadyRebooted...)."""
    message: str
    platform: dict[str, object] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    actions: tuple[str, ...] = ()
    """What the program did, in order (each command it ran that changed something)."""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def as_json(self) -> str:
        body = {
            "command": self.command,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "message": self.message,
            "platform": self.platform,
            "failedChecks": [
                {"check": c.name, "gpu": c.gpu, "detail": c.detail} for c in self.checks if not c.ok
            ],
            "actions": list(self.actions),
        }
        return json.dumps(body, separators=(",", ":"))

    def termination_message(self) -> str:
        """The JSON, cut to the limit by shortening the lists, never into invalid JSON."""
        text = self.as_json()
        if len(text.encode()) <= TERMINATION_LIMIT:
            return text
        short = Result(self.command, self.outcome, self.reason, self.message[:1500], self.platform)
        return short.as_json()


def write(result: Result, termination_log: str | None) -> None:
    print(result.as_json(), flush=True)
    if termination_log:
        # Outside a pod (no such path) stdout has it.
        with contextlib.suppress(OSError):
            Path(termination_log).write_text(result.termination_message(), encoding="utf-8")
