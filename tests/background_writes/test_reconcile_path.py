"""A fault's reconcile, on the real ports: the cordon goes out, Events and counts come after.

The reconcile is the engine's own (`engine.reconciler.reconcile`) over the adapters the
runtime builds, against the API emulator; only the background tasks are driven by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_emulator.apiserver import ApiServer
from remediation_operator.engine import reconciler
from remediation_operator.engine.ports import Ports
from remediation_operator.handlers import event_queue, policies
from remediation_operator.handlers.cluster_port import KubernetesCluster
from remediation_operator.handlers.node_cache import NodeCache
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.handlers.recorder import Recorder
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.events import EventRecorder
from remediation_operator.observability.metrics import Metrics
from tests.background_writes.conftest import ManualClock

CREATED = "2026-01-01T00:00:00Z"
POLICY: dict[str, Any] = {
    "apiVersion": "remediation.gpuops.io/v1alpha1",
    "kind": "RemediationPolicy",
    "metadata": {"name": "gpu", "generation": 1},
    "spec": {
        "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
        "startupGrace": "0s",
        "faults": [
            {
                "name": "gpu-xid",
                "match": [{"type": "AcceleratedHardwareReady", "status": "False"}],
                "tolerate": "0s",
                "ladder": [{"action": "Cordon"}],
                "onExhausted": "Hold",
            }
        ],
    },
}


def node(name: str, healthy: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": CREATED},
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "True" if healthy else "False",
                    "reason": "Healthy" if healthy else "NvidiaXID79Error",
                    "lastTransitionTime": CREATED,
                },
            ]
        },
    }


def writes(api: ApiServer, resource: str, subresource: str = "") -> int:
    return sum(
        1
        for e in api.request_log
        if e.is_write and e.resource == resource and e.subresource == subresource
    )


async def test_a_faults_reconcile_writes_no_event_and_no_summary(
    api: ApiServer, client: Client, clock: ManualClock
) -> None:
    cache = NodeCache()
    cache.watched = frozenset({"AcceleratedHardwareReady"})
    for name in ("n1", "n2", "n3"):
        cache.update(api.store.create("nodes", node(name, healthy=True)))
    now = datetime.now(UTC) + timedelta(hours=1)  # the emulator stamps creation: long booted
    records = KubernetesRecords(
        client, EventRecorder(client, "operator"), node_uid=cache.uid, clock=clock
    )
    records.synced = True
    body = api.store.create("remediationpolicies", POLICY)
    records.observe_policy("ADDED", body)
    policy = policies.accept(body).in_force
    assert policy is not None
    ports = Ports(
        cluster=KubernetesCluster(client, "remediation-system", {}, node_body=cache.body),
        records=records,
        recorder=Recorder(Metrics()),
    )
    await reconciler.reconcile(policy, cache.views, ports, now, None)  # first status: at once
    assert api.store.get("remediationpolicies", "gpu")["status"]["observedGeneration"] == 1

    faulty = api.store.patch(
        "nodes", "n2", {"status": node("n2", healthy=False)["status"]}, subresource="status"
    )
    assert cache.update(faulty)
    events, statuses = writes(api, "events"), writes(api, "remediationpolicies", "status")
    result = await reconciler.reconcile(policy, cache.views, ports, now, frozenset({"n2"}))

    assert api.store.get("nodes", "n2")["spec"]["unschedulable"] is True
    assert result.explained  # the decisions were announced...
    assert writes(api, "events") == events  # ...but not posted inside the reconcile
    assert writes(api, "remediationpolicies", "status") == statuses
    assert (await records.read_policy_state("gpu")).summary == result.summary

    records.start()
    await records.stop()  # what a clean shutdown (or the background tasks) then sends
    reasons = {e["reason"] for e in api.store.list("events", "default")}
    assert {str(r.reason) for r in result.explained if event_queue.worth_an_event(r)} <= reasons
    assert api.store.get("remediationpolicies", "gpu")["status"]["unhealthy"] == 1
