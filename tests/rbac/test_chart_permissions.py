"""The operator runs the whole ladder with nothing but the chart's ServiceAccount permissions.

The emulator enforces RBAC from the rendered ClusterRole/ClusterRoleBinding/Role/RoleBinding,
the operator authenticates as the chart's ServiceAccount, and a fault climbs cordon, a forced
drain, the GPU-reset and reboot Jobs and Karpenter replacement without a single 403.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from remediation_emulator.fleet.manifests import Shape
from tests.rbac import scenarios
from tests.rbac.conftest import Chart, running_cluster

pytestmark = pytest.mark.integration


async def test_the_full_ladder_completes_under_the_charts_rbac(
    chart: Chart, tmp_path: Path
) -> None:
    shape = Shape(nodes=2, nodes_per_training_job=2, pdb_every=0)
    async with running_cluster(tmp_path, chart, enforce=True, shape=shape) as cluster:
        # The authorizer is live: the same account is refused what the chart does not grant.
        async with (
            aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {cluster.api.token(chart.user)}"}
            ) as session,
            session.get(f"{cluster.api.url}/api/v1/namespaces/default/secrets") as response,
        ):
            assert response.status == 403
            body = await response.json()
            assert chart.user in body["message"]

        cluster.api.request_log.clear()
        await cluster.start_operator("operator-a")
        node = cluster.node_names()[0]
        status = await scenarios.full_ladder(cluster, node, fail_on_403=chart.user)

        assert status["reason"] == "NodeReplaced"
        # The drain appears twice: the evictions that timed out, then the forced deletion.
        actions = [s["action"] for s in status["steps"]]
        assert actions.count("Drain") == 2
        assert list(dict.fromkeys(actions)) == [
            "Cordon",
            "Drain",
            "GPUReset",
            "Reboot",
            "Replace",
        ]
        assert cluster.node(node) is None
        mine = [e for e in cluster.api.request_log if e.user == chart.user]
        assert any(e.verb == "delete" and e.resource == "pods" for e in mine), "forced drain"
        assert any(e.verb == "create" and e.resource == "jobs" for e in mine), "executor Jobs"
        assert not scenarios.forbidden(cluster, chart.user)
