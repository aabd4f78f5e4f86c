"""Jobs pinned to a node run there and end, with the status the real Job controller writes.

A Job whose pod template names its node (`spec.nodeName`, or a nodeSelector on
`kubernetes.io/hostname`) starts when that node is Ready (status.startTime, active=1), runs for
a configured time and then succeeds or fails; a failure is retried up to `backoffLimit` as the
Job controller retries pods. The operator's executor Jobs carry the label
`remediation.gpuops.io/action`; when one succeeds its effect is applied to the node through the
node agent (GPUReset: reset the GPUs; Reboot: reboot the node). Finished Jobs with
`ttlSecondsAfterFinished` are deleted when it expires (the TTL-after-finished controller).

No Pods are created for these Jobs: the operator watches the Job, not its pods, and a pod
would only add traffic. Conditions follow Kubernetes 1.31+: `SuccessCriteriaMet` then
`Complete` (reason CompletionsReached), or `FailureTarget` then `Failed` (BackoffLimitExceeded).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from remediation_operator.emulator.fleet import health, manifests, placement, resources
from remediation_operator.emulator.fleet.agent import NodeAgent
from remediation_operator.emulator.fleet.client import ApiError, KubeClient, Obj
from remediation_operator.emulator.fleet.config import FleetConfig
from remediation_operator.emulator.fleet.controller import Controller
from remediation_operator.emulator.fleet.informer import Informer, version_number
from remediation_operator.emulator.fleet.kubelet import node_ready

ACTION_LABEL = "remediation.gpuops.io/action"


def pinned_node(job: Obj) -> str | None:
    spec = job.get("spec", {}).get("template", {}).get("spec", {})
    name = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(manifests.HOSTNAME_LABEL)
    return str(name) if name else None


def finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions", [])
    )


def started_status(now: datetime) -> dict[str, Any]:
    return {
        "status": {
            "startTime": health.timestamp(now),
            "active": 1,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
    }


def retry_status(failed: int) -> dict[str, Any]:
    return {"status": {"failed": failed, "active": 1}}


def succeeded_status(job: Obj, now: datetime) -> dict[str, Any]:
    stamp = health.timestamp(now)
    message = "Reached expected number of succeeded pods"
    return {
        "status": {
            "active": None,
            "ready": 0,
            "succeeded": 1,
            "completionTime": stamp,
            "conditions": [
                _condition("SuccessCriteriaMet", "CompletionsReached", message, stamp),
                _condition("Complete", "CompletionsReached", message, stamp),
            ],
        }
    }


def failed_status(job: Obj, failed: int, now: datetime) -> dict[str, Any]:
    stamp = health.timestamp(now)
    message = "Job has reached the specified backoff limit"
    return {
        "status": {
            "active": None,
            "ready": 0,
            "failed": failed,
            "conditions": [
                _condition("FailureTarget", "BackoffLimitExceeded", message, stamp),
                _condition("Failed", "BackoffLimitExceeded", message, stamp),
            ],
        }
    }


def _condition(type_: str, reason: str, message: str, stamp: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def finished_at(job: Obj) -> datetime | None:
    status = job.get("status", {})
    text = status.get("completionTime")
    if not text:
        for condition in status.get("conditions", []):
            if condition.get("type") == "Failed" and condition.get("status") == "True":
                text = condition.get("lastTransitionTime")
    return health.parse_timestamp(text) if text else None


class JobRunner:
    def __init__(
        self,
        client: KubeClient,
        nodes: Informer,
        jobs: Informer,
        agent: NodeAgent,
        config: FleetConfig,
        rng: random.Random,
        now: Callable[[], datetime],
    ) -> None:
        self.controller = Controller("jobs", self._reconcile, workers=config.workers)
        self._client = client
        self._nodes = nodes
        self._jobs = jobs
        self._agent = agent
        self._config = config
        self._rng = rng
        self._now = now
        self._by_node = placement.ByNode()
        self._runs: dict[str, float] = {}
        """By Job uid: when the current attempt started (event-loop time)."""
        self._written: dict[str, int] = {}
        """By Job uid: the resourceVersion of our latest status write (read-your-writes)."""
        self._outcomes: dict[str, bool] = {}
        """By Job uid + attempt: the decided outcome, so a failed status write is not re-rolled."""
        jobs.subscribe(self._on_job)
        nodes.subscribe(self._on_node)

    def _on_job(self, key: str, old: Obj | None, new: Obj | None) -> None:
        self._by_node.place(key, pinned_node(new) if new else None)
        self.controller.enqueue(key)

    def _on_node(self, key: str, old: Obj | None, new: Obj | None) -> None:
        if old is not None and new is not None and node_ready(old) == node_ready(new):
            return
        for job in self._by_node.on(key):
            self.controller.enqueue(job)

    async def run(self) -> None:
        await self.controller.run()

    def _duration(self, job: Obj) -> float:
        action = job["metadata"].get("labels", {}).get(ACTION_LABEL)
        return self._config.reset_duration if action == "GPUReset" else self._config.job_duration

    async def _reconcile(self, key: str) -> float | None:
        job = self._jobs.get(key)
        if job is None:
            return None
        meta = job["metadata"]
        if finished(job):
            return await self._expire(job)
        node_name = pinned_node(job)
        if node_name is None or job.get("spec", {}).get("suspend") or meta.get("deletionTimestamp"):
            return None
        node = self._nodes.get(node_name)
        if node is None or not self._config.owns(node) or not node_ready(node):
            return None  # woken again when the node becomes Ready
        uid = str(meta["uid"])
        if version_number(job) < self._written.get(uid, 0):
            return None  # our last status write is not in the cache yet; its event wakes us
        clock = asyncio.get_running_loop().time()
        status = job.get("status", {})
        if not status.get("startTime"):
            await self._status(job, started_status(self._now()))
            self._runs[uid] = clock
            return self._duration(job)
        started = self._runs.setdefault(uid, clock)
        remaining = started + self._duration(job) - clock
        if remaining > 0:
            return remaining
        failed = int(status.get("failed") or 0)
        attempt = f"{uid}/{failed}"
        ok = self._outcomes.get(attempt)
        if ok is None:
            ok = self._run_effect(job, node_name)
            self._outcomes[attempt] = ok
        if ok:
            await self._status(job, succeeded_status(job, self._now()))
        elif failed < int(job.get("spec", {}).get("backoffLimit", 6)):
            await self._status(job, retry_status(failed + 1))
            self._runs[uid] = clock
            return self._duration(job)
        else:
            await self._status(job, failed_status(job, failed + 1, self._now()))
        self._runs.pop(uid, None)
        return None

    def _run_effect(self, job: Obj, node_name: str) -> bool:
        if self._rng.random() < self._config.job_failure_probability:
            return False
        action = job["metadata"].get("labels", {}).get(ACTION_LABEL)
        if action == "GPUReset":
            return self._agent.gpu_reset(node_name)
        if action == "Reboot":
            return self._agent.reboot(node_name)
        return True

    async def _status(self, job: Obj, body: dict[str, Any]) -> None:
        meta = job["metadata"]
        written = await self._client.patch(
            resources.JOBS, meta["name"], body, namespace=meta["namespace"], subresource="status"
        )
        uid = str(meta["uid"])
        self._written[uid] = max(self._written.get(uid, 0), version_number(written))

    async def _expire(self, job: Obj) -> float | None:
        ttl = job.get("spec", {}).get("ttlSecondsAfterFinished")
        done = finished_at(job)
        if ttl is None or done is None:
            return None
        remaining = (done + timedelta(seconds=int(ttl)) - self._now()).total_seconds()
        if remaining > 0:
            return remaining
        meta = job["metadata"]
        try:
            await self._client.delete(
                resources.JOBS,
                meta["name"],
                namespace=meta["namespace"],
                uid=meta["uid"],
                propagation_policy="Background",
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
        return None
