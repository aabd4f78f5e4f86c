"""The node program against the fake GPU node (emulator/remediation_emulator/gpunode).

Real: the program (`python -m remediation_operator node ...` as a process, or its classes),
the fake tools as processes found on PATH. Faked: the GPU node's hardware and host (a state
file and a host root directory), and for the GPU clients the Kubernetes API (a hand-written
NodeApi whose label changes stop the clients the state file says hold the GPUs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from remediation_emulator.gpunode import state as fake
from remediation_operator.node.clients import PodSet

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FakeNode:
    path: Path
    host_root: Path

    def write(self, body: dict[str, Any]) -> None:
        fake.write(self.path, body)

    def read(self) -> dict[str, Any]:
        return fake.read(self.path)

    def host(self, *, os_id: str = "amzn", systemd: bool = True) -> None:
        (self.host_root / "etc").mkdir(parents=True, exist_ok=True)
        (self.host_root / "etc/os-release").write_text(f'ID="{os_id}"\n')
        if systemd:
            (self.host_root / "run/systemd/system").mkdir(parents=True, exist_ok=True)

    def run(self, *args: str) -> tuple[int, dict[str, Any], str]:
        """`remediation-operator node <args>`: exit code, JSON result, termination message."""
        log = self.host_root.parent / "termination-log"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "remediation_operator",
                "node",
                "--host-root",
                str(self.host_root),
                "--termination-log",
                str(log),
                *args,
            ],
            capture_output=True,
            text=True,
            env={**fake.environment(self.path), "FAKE_GPU_NODE_HOST": str(self.host_root)},
            cwd=ROOT,
            check=False,
            timeout=60,
        )
        assert done.stdout.strip(), done.stderr
        message = log.read_text() if log.exists() else ""
        return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), message


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    path = tmp_path / "gpu-node.json"
    fake.write(path, fake.node())
    for key, value in fake.environment(path).items():
        if key in ("PATH", "FAKE_GPU_NODE"):
            monkeypatch.setenv(key, value)
    found = FakeNode(path, tmp_path / "host")
    found.host()
    return found


@dataclass
class LabelledNodeApi:
    """The API as seen by the GPU clients step: labelling the node with every label of the
    preset makes the clients' pods go (as the GPU Operator's DaemonSets do), which frees the
    GPUs they held on the fake node; removing the labels brings them back."""

    node: FakeNode
    stop_labels: Mapping[str, str]
    pods_left: list[str] = field(default_factory=lambda: ["gpu-operator/nvidia-device-plugin-x"])
    labels_now: dict[str, str] = field(default_factory=dict)
    writes: list[dict[str, str | None]] = field(default_factory=list)
    stubborn: bool = False
    """The pods never go (a DaemonSet without the GPU Operator's node affinity)."""

    def labels(self, node: str) -> dict[str, str]:
        return dict(self.labels_now)

    def set_labels(self, node: str, labels: Mapping[str, str | None]) -> None:
        self.writes.append(dict(labels))
        for key, value in labels.items():
            if value is None:
                self.labels_now.pop(key, None)
            else:
                self.labels_now[key] = value
        stopped = all(self.labels_now.get(k) == v for k, v in self.stop_labels.items())
        state = self.node.read()
        state["holders"] = [] if stopped and not self.stubborn else ["nvidia-device-plugin"]
        self.node.write(state)

    def pods(self, node: str, pods: PodSet) -> list[str]:
        return [] if not self.node.read()["holders"] else list(self.pods_left)
