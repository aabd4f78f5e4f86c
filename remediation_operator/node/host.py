"""Running a host tool (nvidia-smi, dcgmi, nsenter, apiclient) and reading what it said.

One place runs processes, with a timeout, and turns "not installed" and "timed out" into
results rather than exceptions, so every step reports what happened in its JSON result.
The tools are found on PATH: the real ones in the image or the host, the fake GPU node's
in tests (tests/node_program/fake_node).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NOT_FOUND = 127
"""The shell's exit code for a command that does not exist (POSIX), used for a missing tool."""
TIMED_OUT = 124
"""timeout(1)'s exit code for a command it had to stop, used the same way here."""


@dataclass(frozen=True)
class Ran:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    @property
    def said(self) -> str:
        """The tool's last words (stderr, else stdout), one line, for messages."""
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return text[-1][:300] if text else ""


def run(
    argv: Sequence[str], *, timeout: float = 600.0, env: Mapping[str, str] | None = None
) -> Ran:
    """Run `argv`; never raises for a missing tool or a timeout (codes 127 and 124)."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except FileNotFoundError:
        return Ran(tuple(argv), NOT_FOUND, "", f"{argv[0]}: not found on PATH")
    except subprocess.TimeoutExpired:
        return Ran(tuple(argv), TIMED_OUT, "", f"{argv[0]}: no answer within {timeout:.0f}s")
    return Ran(tuple(argv), done.returncode, done.stdout, done.stderr)


def environment() -> dict[str, str]:
    return dict(os.environ)
