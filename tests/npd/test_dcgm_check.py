"""The chart's DCGM health check (npd/check-dcgm-health.sh), run by /bin/sh against a fake
`dcgmi` that answers as DCGM does: the exit code is NPD's custom-plugin contract (0 healthy,
1 problem, 2 unknown) and stdout becomes the condition's message.

The fake prints the "Overall Health" row of `dcgmi health --check` (NVIDIA DCGM user guide,
"Health and Diagnostics": Healthy, Warning or Failure) or fails as an unreachable host engine
does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = (
    Path(__file__).resolve().parents[2] / "charts/remediation-operator/npd/check-dcgm-health.sh"
)

HEALTHY = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Healthy                                                  |
+---------------------------+----------------------------------------------------------+
"""
WARNING = HEALTHY.replace("| Healthy   ", "| Warning   ")
FAILURE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
| GPU ID: 3                 | Failure                                                  |
|                           | Memory system: Failure                                   |
|                           | - A double-bit ECC error has occurred on GPU 3.          |
+---------------------------+----------------------------------------------------------+
"""

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")


def fake_dcgmi(directory: Path, *, set_rc: int = 0, check_rc: int = 0, output: str = "") -> None:
    (directory / "check.txt").write_text(output)
    script = directory / "dcgmi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{directory}/calls"\n'
        f'case "$*" in *--set*) exit {set_rc};; esac\n'
        f'cat "{directory}/check.txt"\n'
        f"exit {check_rc}\n"
    )
    script.chmod(0o755)


def check(path: str, host: str = "10.0.0.7") -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "DCGM_HOST": host, "LANG": "C"}
    return subprocess.run(
        ["sh", str(SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=30
    )


def system_path() -> str:
    return os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())


@pytest.mark.parametrize(
    ("output", "code"), [(HEALTHY, 0), (WARNING, 0), (FAILURE, 1), ("no report\n", 2)]
)
def test_the_overall_health_decides_the_condition(tmp_path: Path, output: str, code: int) -> None:
    fake_dcgmi(tmp_path, output=output)
    result = check(f"{tmp_path}{os.pathsep}{system_path()}")
    assert result.returncode == code, result.stdout + result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == "health --host 10.0.0.7 --set a"  # watches set on the node's engine
    assert calls[1] == "health --host 10.0.0.7 --check"


def test_a_failure_says_what_failed(tmp_path: Path) -> None:
    fake_dcgmi(tmp_path, output=FAILURE)
    result = check(f"{tmp_path}{os.pathsep}{system_path()}")
    # One line for the condition's message: which GPU, which subsystem, DCGM's explanation.
    assert result.stdout.strip() == (
        "GPU ID: 3 Failure Memory system: Failure - A double-bit ECC error has occurred on GPU 3."
    )


def test_an_unreachable_host_engine_is_unknown_not_a_fault(tmp_path: Path) -> None:
    fake_dcgmi(tmp_path, set_rc=1)
    result = check(f"{tmp_path}{os.pathsep}{system_path()}")
    assert result.returncode == 2
    assert "cannot reach the DCGM host engine at 10.0.0.7" in result.stdout


def test_a_failing_check_command_is_unknown(tmp_path: Path) -> None:
    fake_dcgmi(tmp_path, check_rc=255, output="Error: unable to connect\n")
    result = check(f"{tmp_path}{os.pathsep}{system_path()}")
    assert result.returncode == 2
    assert "Error: unable to connect" in result.stdout


def test_an_image_without_dcgmi_is_unknown_and_says_so(tmp_path: Path) -> None:
    result = check(system_path())
    assert result.returncode == 2
    assert "dcgmi is not in this image" in result.stdout
