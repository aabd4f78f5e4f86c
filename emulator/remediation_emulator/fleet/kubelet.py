"""The emulated kubelets of every node (and the pod garbage collector): pod lifecycles.

A pod bound to a Ready node becomes Running and Ready; a pod being deleted is removed once its
grace period is over (DELETE with gracePeriodSeconds=0, exactly what a kubelet sends after
stopping the containers); nothing happens on a node that is NotReady (rebooting), where running
pods lose readiness until the node is back; pods bound to a node that no longer exists are
deleted, as the pod GC controller does. The grace period is capped by `max_pod_grace` so tests
and the demo need not wait 30 s per pod.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from remediation_emulator.fleet import health, placement, resources
from remediation_emulator.fleet.client import ApiError, KubeClient, Obj, PatchType
from remediation_emulator.fleet.config import FleetConfig
from remediation_emulator.fleet.controller import Controller
from remediation_emulator.fleet.informer import Informer


def node_ready(node: Obj) -> bool:
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == health.READY:
            return bool(condition.get("status") == "True")
    return False


def _job_owned(pod: Obj) -> bool:
    refs = pod.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("kind") == "Job" and r.get("controller") for r in refs)


def _node_program(pod: Obj) -> bool:
    """A pod the Job runner recorded for a run of the node program (fleet/jobs.py)."""
    containers = pod.get("spec", {}).get("containers") or [{}]
    return list(containers[0].get("command") or [])[:2] == ["remediation-operator", "node"]


def pod_ready(pod: Obj) -> bool:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def host_ip(node: Obj) -> str:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return ""


def pod_ip(uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).digest()
    return f"10.{128 + digest[0] % 64}.{digest[1]}.{digest[2] or 1}"


def running_status(pod: Obj, node: Obj, now: datetime, *, ready: bool) -> dict[str, Any]:
    """The status a kubelet reports for a pod whose containers run (ready or not)."""
    status = pod.get("status", {})
    stamp = health.timestamp(now)
    started = status.get("startTime") or stamp
    restarts = {
        c.get("name"): c.get("restartCount", 0) for c in status.get("containerStatuses", [])
    }
    was_running = status.get("phase") == "Running"
    flag = "True" if ready else "False"
    conditions: list[dict[str, Any]] = [
        {"type": "PodReadyToStartContainers", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": flag},
        {"type": "ContainersReady", "status": flag},
        {"type": "PodScheduled", "status": "True"},
    ]
    previous = {c.get("type"): c for c in status.get("conditions", [])}
    for condition in conditions:
        before = previous.get(condition["type"])
        kept = before.get("lastTransitionTime") if before is not None else None
        same = before is not None and before.get("status") == condition["status"]
        condition["lastProbeTime"] = None
        condition["lastTransitionTime"] = kept if same and kept else stamp
        if condition["type"] in ("Ready", "ContainersReady") and not ready:
            condition["reason"] = "ContainersNotReady"
    ip = pod_ip(str(pod["metadata"]["uid"]))
    node_ip = host_ip(node)
    containers = []
    for container in pod.get("spec", {}).get("containers", []):
        name = container.get("name")
        count = int(restarts.get(name, 0)) + (
            1 if was_running and ready and not pod_ready(pod) else 0
        )
        state: dict[str, Any] = (
            {"running": {"startedAt": stamp if count else started}}
            if ready
            else {"waiting": {"reason": "ContainerCreating"}}
        )
        containers.append(
            {
                "name": name,
                "image": container.get("image", ""),
                "imageID": f"{container.get('image', '')}@sha256:{'0' * 64}",
                "containerID": f"containerd://{hashlib.sha256(f'{ip}{name}{count}'.encode()).hexdigest()}",
                "ready": ready,
                "started": ready,
                "restartCount": count,
                "state": state,
            }
        )
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": node_ip,
            "hostIPs": [{"ip": node_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": started,
            "qosClass": "BestEffort",
            "containerStatuses": containers,
        }
    }


class Kubelet:
    def __init__(
        self,
        client: KubeClient,
        nodes: Informer,
        pods: Informer,
        config: FleetConfig,
        now: Callable[[], datetime],
    ) -> None:
        self.controller = Controller("kubelet", self._reconcile, workers=config.workers)
        self._client = client
        self._nodes = nodes
        self._pods = pods
        self._config = config
        self._now = now
        self._by_node = placement.ByNode()
        self._deleting_since: dict[str, float] = {}
        self._orphan_since: dict[str, float] = {}
        pods.subscribe(self._on_pod)
        nodes.subscribe(self._on_node)

    def pods_on(self, node: str) -> set[str]:
        return self._by_node.on(node)

    def _on_pod(self, key: str, old: Obj | None, new: Obj | None) -> None:
        self._by_node.place(key, (new or {}).get("spec", {}).get("nodeName"))
        self.controller.enqueue(key)

    def _on_node(self, key: str, old: Obj | None, new: Obj | None) -> None:
        if old is not None and new is not None and node_ready(old) == node_ready(new):
            return
        for pod in self._by_node.on(key):
            self.controller.enqueue(pod)

    async def run(self) -> None:
        await self.controller.run()

    def _forget(self, key: str) -> None:
        self._deleting_since.pop(key, None)
        self._orphan_since.pop(key, None)

    async def _remove(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            await self._client.delete(
                resources.PODS,
                meta["name"],
                namespace=meta["namespace"],
                grace_period_seconds=0,
                uid=meta["uid"],
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    async def _reconcile(self, key: str) -> float | None:
        pod = self._pods.get(key)
        if pod is None:
            self._forget(key)
            self._by_node.place(key, None)
            return None
        node_name = pod.get("spec", {}).get("nodeName")
        if not node_name:
            return None
        clock = asyncio.get_running_loop().time()
        node = self._nodes.get(node_name)
        if node is None:
            since = self._orphan_since.setdefault(key, clock)
            remaining = since + self._config.orphan_pod_gc_after - clock
            if remaining > 0:
                return remaining
            await self._remove(pod)
            return None
        self._orphan_since.pop(key, None)
        if not self._config.owns(node):
            return None  # a real kubelet runs this node
        ready = node_ready(node)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if not ready:
                return None  # the kubelet is down; it finishes the deletion when back
            since = self._deleting_since.setdefault(key, clock)
            grace = min(
                float(meta.get("deletionGracePeriodSeconds") or 0), self._config.max_pod_grace
            )
            remaining = since + grace - clock
            if remaining > 0:
                return remaining
            await self._remove(pod)
            return None
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return None
        if _job_owned(pod) and (self._config.job_controller or _node_program(pod)):
            return None  # the Job runner runs Jobs' pods to completion (or records them ended)
        running = pod.get("status", {}).get("phase") == "Running"
        if ready and running and pod_ready(pod):
            return None
        if not ready and not (running and pod_ready(pod)):
            return None
        body = running_status(pod, node, self._now(), ready=ready)
        await self._client.patch(
            resources.PODS,
            meta["name"],
            body,
            namespace=meta["namespace"],
            subresource="status",
            patch_type=PatchType.STRATEGIC,
        )
        return None
