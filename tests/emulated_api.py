"""The API emulator with our CRDs installed, and a client of ours connected to it.

Shared by the test packages that talk to a real HTTP API server in-process (their conftests
import the fixtures by name), so each does not build its own copy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_emulator import apiserver
from remediation_emulator.apiserver import ApiServer
from remediation_operator.k8s.client import Client

ROOT = Path(__file__).resolve().parents[1]

CORDON_POLICY: dict[str, Any] = {
    "apiVersion": "remediation.gpuops.io/v1alpha1",
    "kind": "RemediationPolicy",
    "metadata": {"name": "gpu"},
    "spec": {
        "nodeSelector": {},
        "faults": [
            {
                "name": "gpu-xid",
                "match": [{"type": "GPU", "status": "False"}],
                "ladder": [{"action": "Cordon"}],
            }
        ],
    },
}
"""A minimal valid RemediationPolicy `gpu` (one fault, Cordon only)."""


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with apiserver.serve() as server:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            server.store.create("customresourcedefinitions", yaml.safe_load(crd.read_text()))
        yield server


@pytest.fixture
async def client(api: ApiServer, tmp_path: Path) -> AsyncIterator[Client]:
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user="operator")
    connected = await Client.from_environment(str(config))
    yield connected
    await connected.close()
