"""The command line as a user meets it: `--version`, help for every flag, --kubeconfig/--context.

Real: the `remediation-operator` parser and process (python -m remediation_operator).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

from remediation_emulator.commands import demo
from remediation_operator import cli

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remediation_operator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_version_is_the_distributions_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"remediation-operator {version}"


def test_every_flag_of_every_command_has_help() -> None:
    parser = cli._parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {'/'.join(action.option_strings)}"
        for name, command in sub.choices.items()
        for action in command._actions
        if action.option_strings and not action.help
    ]
    assert missing == []


def test_run_takes_a_kubeconfig_and_a_context_and_names_a_missing_context(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: a, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: a, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: a, user: a}}]\n"
    )
    result = run_cli(
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--context",
        "elsewhere",
        "--metrics-address",
        "127.0.0.1:0",
    )
    assert result.returncode == 1
    assert "elsewhere" in result.stderr
    assert str(kubeconfig) in result.stderr


def test_the_demo_policy_is_package_data_and_the_example_is_the_same_file() -> None:
    assert demo.DEMO_POLICY.is_file()
    assert demo.DEMO_POLICY.parent.name == "commands"
    example = ROOT / "examples" / "demo-policy.yaml"
    assert example.read_bytes() == demo.DEMO_POLICY.read_bytes()
