"""`remediation-operator simulate` as a user runs it: the report, --compare, outputs, errors."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from remediation_operator import cli
from remediation_operator.sim import plot

from .conftest import EXAMPLES

DEFAULT = EXAMPLES / "gpu-xid-ladders-policy.yaml"
REPLACE_FIRST = EXAMPLES / "baselines" / "replace-on-first-fault.yaml"
NOT_READY = EXAMPLES / "baselines" / "wait-for-notready.yaml"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text("nodes: 64\nzones: 2\njobs: {nodesPerJob: 4}\n")
    return path


def test_the_report_answers_what_a_user_asks(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["simulate", "--policy", str(DEFAULT), "--fleet", str(fleet), "--days", "10", "--seed", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("64 nodes x 8 GPUs, 10 days, seed 2")
    for row in (
        "node availability",
        "GPU-hours unavailable",
        "job interruptions",
        "job success rate",
        "actions: Cordon",
        "actions: Replace",
        "replacements",
        "time to recover p50",
        "time to recover p95",
        "hours blocked",
    ):
        assert row in out
    assert "gpu-xid-ladders" in out.splitlines()[2]


def test_compare_puts_policies_side_by_side_and_writes_every_output(
    fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeline, report = tmp_path / "t.csv", tmp_path / "r.json"
    code = cli.main(
        [
            "simulate",
            "--policy", str(DEFAULT),
            "--compare", str(REPLACE_FIRST), str(NOT_READY),
            "--fleet", str(fleet),
            "--days", "15",
            "--timeline", str(timeline),
            "--json", str(report),
            "--check-invariants",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    header = out.splitlines()[2].split()
    # The oracle (the best any policy could do on the same faults) always comes last.
    assert header == ["gpu-xid-ladders", "replace-on-first-fault", "wait-for-notready", "oracle"]
    assert "invariants held at" in out
    reports = json.loads(report.read_text())
    assert [r["policy"] for r in reports] == header
    assert [r["oracle"] for r in reports] == [False, False, False, True]
    assert len({r["faults"] for r in reports}) == 1  # the same fault history for all four
    with timeline.open() as stream:
        rows = list(csv.DictReader(stream))
    assert {r["policy"] for r in rows} == set(header)
    assert {"fault", "remediation", "cordon"} <= {r["event"] for r in rows}
    assert all(r["time"].endswith("Z") for r in rows)


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="plot extra not installed"
)
def test_plot_draws_a_png(fleet: Path, tmp_path: Path) -> None:
    out = tmp_path / "a.png"
    code = cli.main(
        [
            "simulate",
            "--policy",
            str(DEFAULT),
            "--fleet",
            str(fleet),
            "--days",
            "3",
            "--plot",
            str(out),
        ]
    )
    assert code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_fails_fast_with_the_install_hint(
    fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(plot, "available", lambda: False)
    out = tmp_path / "a.png"
    code = cli.main(
        ["simulate", "--policy", str(DEFAULT), "--fleet", str(fleet), "--plot", str(out)]
    )
    assert code == 2
    assert "remediation-operator[plot]" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("nodes: -1\n", "nodes: must be at least 1"),
        ("nodes: 8\njobs: {nodesPerJob: 500}\n", "jobs.nodesPerJob: 500 is more"),
        ("nodes: [1\n", "not valid YAML at line"),
    ],
)
def test_a_bad_fleet_file_exits_2_naming_the_field(
    tmp_path: Path, content: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text(content)
    assert cli.main(["simulate", "--policy", str(DEFAULT), "--fleet", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "fleet.yaml" in err
    assert words in err


def test_an_invalid_policy_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(DEFAULT.read_text().replace("tolerate: 2m", "tolerate: 2 minutes", 1))
    assert cli.main(["simulate", "--policy", str(bad), "--days", "1"]) == 2
    err = capsys.readouterr().err
    assert "p.yaml" in err
    assert "tolerate" in err


def test_two_compared_policies_need_distinct_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--policy", str(DEFAULT), "--compare", str(DEFAULT)]) == 2
    assert "both named 'gpu-xid-ladders'" in capsys.readouterr().err


def test_the_report_is_the_same_in_another_process(fleet: Path, tmp_path: Path) -> None:
    # String hashing differs between processes: nothing may depend on set order of names.
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"r{hash_seed}.json"
        subprocess.run(
            [
                sys.executable, "-m", "remediation_operator", "simulate",
                "--policy", str(DEFAULT), "--fleet", str(fleet), "--days", "10",
                "--json", str(out),
            ],
            check=True,
            capture_output=True,
            env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        outputs.append(json.loads(out.read_text()))
    assert outputs[0] == outputs[1]


def test_a_file_without_a_policy_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "node.yaml"
    other.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    assert cli.main(["simulate", "--policy", str(other)]) == 2
    assert "no RemediationPolicy document" in capsys.readouterr().err
