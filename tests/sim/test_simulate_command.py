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


def test_several_seeds_print_the_mean_the_range_and_each_seed(
    fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "seeds.json"
    code = cli.main(
        [
            "simulate", "--policy", str(DEFAULT), "--fleet", str(fleet),
            "--days", "20", "--seed", "5", "--seeds", "3", "--json", str(out_json),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("64 nodes x 8 GPUs, 20 days, 3 seeds (5, 6, 7): mean (lowest-highest)")
    document = json.loads(out_json.read_text())
    assert document["seeds"] == [5, 6, 7]
    per_seed = document["reports"]
    assert [[r["policy"] for r in run] for run in per_seed] == [["gpu-xid-ladders", "oracle"]] * 3
    # The printed cell is the mean over the seeds, with their lowest and highest values.
    faults = [run[0]["faults"] for run in per_seed]
    assert len(set(faults)) > 1, "the seeds should draw different fault histories"
    row = next(line for line in out.splitlines() if line.startswith("faults (all causes)"))
    mean = sum(faults) / 3
    shown = str(int(mean)) if mean.is_integer() else f"{mean:,.1f}"
    assert f"{shown} ({min(faults)}-{max(faults)})" in row
    # Then the headline figures seed by seed, each seed's own values.
    for run in per_seed:
        seed = run[0]["seed"]
        line = next(x for x in out.splitlines() if x.startswith(f"seed {seed}: replacements"))
        assert line.split()[-2:] == [str(run[0]["replacements"]), str(run[1]["replacements"])]


def test_seeds_out_of_range_exit_2(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["simulate", "--policy", str(DEFAULT), "--fleet", str(fleet), "--seeds", "0"])
    assert code == 2
    assert "seeds: must be from 1 to 100, got 0" in capsys.readouterr().err


def test_fault_counts_per_cause_and_effective_training_time_are_reported(
    fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "r.json"
    args = ["simulate", "--policy", str(DEFAULT), "--fleet", str(fleet), "--days", "20"]
    assert cli.main([*args, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    policy, oracle = json.loads(out_json.read_text())
    by_cause = policy["faults_by_cause"]
    assert sum(by_cause.values()) == policy["faults"] > 0
    assert by_cause == oracle["faults_by_cause"]  # the same fault history for every column
    for cause, count in by_cause.items():
        if count:
            assert f"  {cause} " in out
    assert 0.0 < policy["effective_training"] < 1.0
    assert "effective training time" in out


def test_loss_rows_keep_the_fault_mix_order_whatever_the_seed(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    orders: list[list[str]] = []
    for seed in ("1", "2", "3"):
        args = ["simulate", "--policy", str(REPLACE_FIRST), "--fleet", str(fleet), "--days", "30"]
        assert cli.main([*args, "--seed", seed]) == 0
        lines = capsys.readouterr().out.splitlines()
        causes = [x.split()[0] for x in lines if x.startswith("  ") and x.split()[0] != "caused"]
        lost = [x.split()[2] for x in lines if x.startswith("lost to: ")]
        mix = [c for c in causes if c in lost]  # causes print in the fault mix's order
        assert lost[: len(mix)] == mix
        orders.append(lost)
    assert all(orders), "no loss to compare"


def test_a_dry_run_policy_is_flagged_and_can_be_simulated_in_force(
    fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dry = tmp_path / "dry.yaml"
    dry.write_text(DEFAULT.read_text().replace("mode: Enforce", "mode: DryRun"))
    assert "mode: DryRun" in dry.read_text()
    out_json = tmp_path / "r.json"
    args = ["simulate", "--policy", str(dry), "--fleet", str(fleet), "--days", "20"]
    assert cli.main([*args, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "note: gpu-xid-ladders is mode: DryRun" in out
    as_dry = json.loads(out_json.read_text())[0]
    assert as_dry["mode"] == "DryRun"
    assert as_dry["replacements"] == 0
    assert cli.main([*args, "--as-enforce", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "DryRun" not in out
    in_force = json.loads(out_json.read_text())[0]
    assert in_force["mode"] == "Enforce"
    assert in_force["availability"] > as_dry["availability"]


def test_the_plot_compares_policies_by_daily_level_and_by_running_loss() -> None:
    from remediation_operator.sim.ledger import Sample

    # Ten-minute samples over two days: 2 nodes down all of day 0, none on day 1.
    samples = [Sample(hours=i / 6, available=0.0, in_flight=0, faulty=0) for i in range(2 * 24 * 6)]
    down = [2.0 if s.hours < 24 else 0.0 for s in samples]
    days = [s.hours / 24 for s in samples]
    assert plot._daily_means(days, down) == ([0.0, 1.0], [2.0, 0.0])
    running = list(plot._cumulative_hours(samples, down))
    assert running[0] == 0.0
    assert running[6 * 24] == pytest.approx(48.0)  # 2 nodes x 24 h, then nothing more
    assert running[-1] == pytest.approx(48.0)
