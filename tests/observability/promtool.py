"""Find Prometheus' `promtool` (Debian package `prometheus`), or say how to get it.

CI installs it (`make promtool`, run by .ci/run as root); elsewhere the tests that need it skip
with this message instead of passing silently.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

INSTALL = "apt-get install prometheus (or `make promtool` as root)"


def find() -> str | None:
    return shutil.which("promtool")


def run(promtool: str, args: Sequence[str], stdin: str | None = None) -> tuple[int, str]:
    """Exit code and combined output of one promtool invocation."""
    result = subprocess.run(
        [promtool, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120
    )
    return result.returncode, result.stdout + result.stderr
