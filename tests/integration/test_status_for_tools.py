"""Status that tools can read, from the real operator process: a Remediation's conditions tell
`kubectl wait` and kstatus when an incident is running and when it is over, and `kubectl get
rpol` shows the mode in effect (its default applied) and whether pause requests hold it."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import aiohttp
import pytest

from tests.integration.conftest import CONFIG, Cluster, cordon_only, eventually, policy

pytestmark = pytest.mark.integration

TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


def conditions(cluster: Cluster, node: str) -> dict[str, str]:
    remediation = cluster.remediation(node) or {}
    found = (remediation.get("status") or {}).get("conditions") or []
    return {c["type"]: c["status"] for c in found}


async def kubectl(cluster: Cluster, *args: str) -> tuple[int, str]:
    config = cluster.tmp / "kubeconfig-kubectl"
    cluster.api.write_kubeconfig(config)
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(cluster.tmp)}
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=CONFIG.with_(agent="kind"))
async def test_an_incident_is_reconciling_then_ready_and_kubectl_wait_sees_it(
    cluster: Cluster,
) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (Debian package `kubectl`)")
    node = cluster.node_names()[0]
    cluster.apply(policy(faults=cordon_only()))
    await cluster.start_operator()
    cluster.fleet.inject(node, "xid-62")
    await eventually(
        lambda: (
            conditions(cluster, node)
            == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
        ),
        what="Reconciling while the fault holds",
    )
    name = (cluster.remediation(node) or {})["metadata"]["name"]
    code, out = await kubectl(
        cluster, "wait", f"remediation/{name}", "--for=condition=Reconciling", "--timeout=5s"
    )
    assert code == 0, out
    cluster.fleet.clear(node)
    code, out = await kubectl(
        cluster, "wait", f"remediation/{name}", "--for=condition=Ready", "--timeout=60s"
    )
    assert code == 0, out
    assert f"remediation.remediation.gpuops.io/{name} condition met" in out
    status = (cluster.remediation(node) or {})["status"]
    assert status["phase"] == "Succeeded"
    assert conditions(cluster, node) == {
        "Ready": "True",
        "Reconciling": "False",
        "Stalled": "False",
    }
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == status["reason"]
    assert ready["lastTransitionTime"] == status["finishedAt"]
    assert ready["observedGeneration"] == 1


async def policy_row(cluster: Cluster, name: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {cluster.api.token('tester')}", "Accept": TABLE}
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{cluster.api.url}/apis/remediation.gpuops.io/v1alpha1/remediationpolicies/{name}",
            headers=headers,
        ) as answer,
    ):
        table = await answer.json()
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


async def test_policy_columns_show_the_effective_mode_and_pause_requests(
    cluster: Cluster,
) -> None:
    body = policy(faults=cordon_only())
    body["spec"].pop("mode", None)  # defaulted: Enforce
    body["spec"]["pauseRequests"] = ["upgrade-team"]
    cluster.apply(body)
    await cluster.start_operator()
    await eventually(lambda: cluster.policy_status().get("paused") is True, what="paused in status")
    row = await policy_row(cluster, "gpu")
    assert (row["Mode"], row["Paused"]) == ("Enforce", True)

    body["spec"]["pauseRequests"] = []
    body["spec"]["mode"] = "DryRun"
    cluster.apply(body)
    await eventually(
        lambda: (
            (cluster.policy_status().get("paused"), cluster.policy_status().get("mode"))
            == (False, "DryRun")
        ),
        what="resumed, DryRun",
    )
    row = await policy_row(cluster, "gpu")
    assert (row["Mode"], row["Paused"]) == ("DryRun", False)
