"""kopf 1.45 runs against the emulator: it discovers, lists, watches and patches (subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remediation_emulator.apiserver import ThreadedApiServer
from tests.emulator.conftest import ready_node
from tests.emulator.crd_fixtures import remediation_crd

OPERATOR = """
import kopf

@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.watching.server_timeout = 10

@kopf.on.event("", "v1", "nodes")
def label_nodes(body, patch, **_):
    if "seen" not in (body.metadata.labels or {}):
        patch.metadata.labels["seen"] = "yes"

@kopf.on.create("remediation.gpuops.io", "v1alpha1", "remediations")
def start(patch, **_):
    patch.status["phase"] = "Running"
"""

pytestmark = pytest.mark.integration


def test_kopf_operator_reacts_to_nodes_and_custom_resources(
    threaded: ThreadedApiServer, tmp_path: Path
) -> None:
    threaded.store.create("customresourcedefinitions", remediation_crd())
    threaded.store.create("nodes", ready_node("gpu-1"))
    (tmp_path / "op.py").write_text(OPERATOR)
    config = threaded.write_kubeconfig(tmp_path / "kubeconfig", user="kopf-operator")
    kopf = Path(sys.executable).with_name("kopf")
    process = subprocess.Popen(
        [str(kopf), "run", "--all-namespaces", "--standalone", str(tmp_path / "op.py")],
        env={**os.environ, "KUBECONFIG": str(config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        threaded.store.create(
            "remediations", {"metadata": {"name": "r1"}, "spec": {"nodeName": "gpu-1"}}
        )
        deadline = time.monotonic() + 20
        done = False
        while time.monotonic() < deadline and not done:
            node = threaded.store.get("nodes", "gpu-1")
            rem = threaded.store.get("remediations", "r1")
            done = (
                node["metadata"].get("labels", {}).get("seen") == "yes"
                and (rem.get("status") or {}).get("phase") == "Running"
            )
            time.sleep(0.1)
    finally:
        process.terminate()
        output = process.communicate(timeout=20)[0]
    assert done, output[-3000:]
    writes = [e for e in threaded.request_log if e.is_write]
    assert writes
    assert {e.user for e in writes} == {"kopf-operator"}
    assert {(e.verb, e.resource) for e in threaded.request_log if e.code >= 400} == set()
