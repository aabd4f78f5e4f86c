"""`make demo` must show a newcomer the ladder moving, then stop cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_demo_climbs_the_ladder_and_stops_cleanly(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "remediation_operator",
            "demo",
            "--nodes",
            "8",
            "--fault-rate",
            "0",
            "--duration",
            "95",  # the reset-class fault is reset about 40 s in, verified about 15 s later
            "--workdir",
            str(workdir),
        ],
        # Outside the checkout: the demo's policy and CRDs come from the installed package.
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=220,
    )
    output = result.stdout
    assert result.returncode == 0, result.stderr + output[-2000:]
    # The printed table has the columns of `kubectl get remediations`.
    assert re.search(r"NAME\s+NODE\s+FAULT\s+STEP\s+PHASE\s+ATTEMPT\s+REASON\s+AGE", output)
    # The injected reboot-class fault is cordoned, then drained (the ladder moves on its own).
    row = r"gpu-0001-\S+\s+gpu-0001\s+gpu-unreachable\s+"
    assert re.search(row + r"Cordon\s", output)
    assert re.search(row + r"(Drain|Reboot|Replace)\s", output)
    # The operator did the work: the fleet line counts nodes quarantined by us.
    assert re.search(r"[1-9]\d* quarantined by us", output)
    # It stopped cleanly: both children ended and the kubeconfig is gone.
    assert not (workdir / "kubeconfig").exists()
    assert (workdir / "operator.log").exists()
    assert (workdir / "sandbox.log").exists()
    # The reset-class fault's GPU reset ran the node program against the fake GPU node: it
    # stopped the GPU clients, reset every GPU in one command and restored them (D55).
    log = (workdir / "sandbox.log").read_text()
    (reset,) = [line for line in log.splitlines() if "node program on gpu-0004: GPUReset" in line]
    assert "stopped GPU clients: nvidia.com/gpu.deploy.device-plugin=false" in reset
    assert "--gpu-reset -i GPU-" in reset
    assert "restored GPU clients" in reset
    # The agent is sticky (the EKS agent, the sandbox's default): after the reset the operator
    # restarted the agent and device plugin pods on the node, validated it, and gave it back
    # without a reboot (D71).
    log_lines = [
        line
        for line in (workdir / "operator.log").read_text().splitlines()
        if "node=gpu-0004" in line
    ]
    decisions = [m.group(1) for m in map(re.compile(r"\] +(\w+)").search, log_lines) if m]
    assert "node_pods_restarted" in decisions
    assert "validation_passed" in decisions
    started = {
        m.group(1) for m in map(re.compile(r"step_started .* step=(\w+)").search, log_lines) if m
    }
    assert started == {"Cordon", "Drain", "GPUReset"}, "no reboot after a verified reset"
