"""Sub-commands from other distributions (the `remediation_operator.commands` entry points).

Real: the `remediation-operator` process, with a hand-made distribution (a `.dist-info` with
`entry_points.txt`, which is all `importlib.metadata` reads) put on PYTHONPATH, the way an
installed add-on such as the emulator's distribution reaches the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ADDON = """
import argparse

SUMMARY = "{summary}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--greeting", default="hello", help="what to print")


def run(args: argparse.Namespace) -> int:
    print(f"{{args.greeting}} from the add-on")
    return 7
"""


def addon(root: Path, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """A distribution `fake-addon` under `root` declaring `entry_points` (name -> module)."""
    info = root / "fake_addon-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-addon\nVersion: 1.0\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text(
        "[remediation_operator.commands]\n" + "\n".join(lines) + "\n"
    )
    for module, summary in modules.items():
        (root / f"{module}.py").write_text(ADDON.format(summary=summary))
    return root


def run_cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run(
        [sys.executable, "-m", "remediation_operator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_an_installed_add_on_becomes_a_sub_command(tmp_path: Path) -> None:
    path = addon(tmp_path, {"greet": "fake_greet"}, {"fake_greet": "Print a greeting."})
    listed = run_cli(path, "--help")
    assert "Print a greeting." in listed.stdout
    result = run_cli(path, "greet", "--greeting", "hi")
    assert (result.returncode, result.stdout.strip()) == (7, "hi from the add-on")


def test_a_built_in_command_wins_a_name_clash(tmp_path: Path) -> None:
    path = addon(tmp_path, {"run": "fake_run"}, {"fake_run": "An impostor."})
    result = run_cli(path, "run", "--help")
    assert result.returncode == 0, result.stderr
    assert "An impostor." not in result.stdout
    assert "--metrics-address" in result.stdout


def test_an_add_on_that_cannot_load_is_named_and_skipped(tmp_path: Path) -> None:
    path = addon(tmp_path, {"broken": "fake_missing_module"}, {})
    result = run_cli(path, "check-policy", "--help")
    assert result.returncode == 0, result.stderr
    assert "ignoring sub-command 'broken' (fake_missing_module)" in result.stderr
    assert "ModuleNotFoundError" in result.stderr
