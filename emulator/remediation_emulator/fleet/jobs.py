"""Jobs pinned to a node run there and end, with the status the real Job controller writes.

A Job whose pod template names its node (`spec.nodeName`, or a nodeSelector on
`kubernetes.io/hostname`) starts when that node is Ready (status.startTime, active=1), runs for
a configured time and then succeeds or fails; a failure is retried up to `backoffLimit` as the
Job controller retries pods. The operator's executor Jobs carry the label
`remediation.gpuops.io/action`; when one succeeds its effect is applied to the node through the
node agent (GPUReset: reset the GPUs; Reboot: reboot the node; Validate: the Job passes only
if the node shows no fault and no repair left one latent, `FaultClass.validation_fails`;
Diagnose: the reports are written, it succeeds).
Finished Jobs with `ttlSecondsAfterFinished` are deleted when it expires (the
TTL-after-finished controller).

No Pods are created for these Jobs (the operator watches the Job, not its pods, and a pod
would only add traffic), except one ended pod per run of the node program
(`FleetConfig.node_program`): the program's result is the pod's termination message, where
the operator reads it on a real cluster (which check failed on which GPU, and whether the
failure is permanent); it goes when its Job is deleted, as the garbage collector removes it.
Conditions follow Kubernetes 1.31+: `SuccessCriteriaMet` then `Complete` (reason
CompletionsReached), or `FailureTarget` then `Failed` (BackoffLimitExceeded).

On a real API server (`FleetConfig.job_controller`) the real Job controller creates the pods
and owns Job status; the runner then plays the kubelet for those pods only, as kwok does: a pod
bound to a Ready node the fleet plays becomes Running, and after the action's duration ends
Succeeded (exit code 0) or Failed (exit code 1), with the action's effect applied on success;
the Job controller counts it, retries or finishes the Job, and deletes it after its TTL.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from remediation_emulator.fleet import health, kubelet, manifests, placement, resources
from remediation_emulator.fleet.agent import NodeAgent
from remediation_emulator.fleet.client import ApiError, KubeClient, Obj, PatchType
from remediation_emulator.fleet.config import FleetConfig
from remediation_emulator.fleet.controller import Controller
from remediation_emulator.fleet.informer import Informer, version_number
from remediation_emulator.fleet.kubelet import node_ready
from remediation_emulator.fleet.node_program import (
    DEVICE_PLUGIN_LABEL,
    DEVICE_PLUGIN_PREFIX,
    NodeProgram,
    Ran,
    place_device_plugin,
    runs_program,
)

log = logging.getLogger(__name__)
ACTION_LABEL = "remediation.gpuops.io/action"
POD_PREFIX = "pod:"
"""Work-queue keys of Job pods (real Job controller mode) are `pod:<namespace>/<name>`."""
GONE_PREFIX = "gone:"
"""Work-queue keys of deleted Jobs whose node-program pods go with them: `gone:<ns>/<name>`."""


def owning_job(pod: Obj) -> str | None:
    """The `namespace/name` key of the Job that controls this pod, if any."""
    meta = pod.get("metadata", {})
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            return f"{meta.get('namespace')}/{ref.get('name')}"
    return None


def terminated_status(pod: Obj, now: datetime, *, succeeded: bool) -> dict[str, Any]:
    """What a kubelet reports once every container of a pod has exited."""
    stamp = health.timestamp(now)
    started = pod.get("status", {}).get("startTime") or stamp
    code = 0 if succeeded else 1
    reason = "Completed" if succeeded else "Error"
    containers = [
        {
            "name": c.get("name"),
            "image": c.get("image", ""),
            "imageID": f"{c.get('image', '')}@sha256:{'0' * 64}",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": stamp,
                }
            },
        }
        for c in pod.get("spec", {}).get("containers", [])
    ]
    conditions = [
        {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": stamp},
        {
            "type": "ContainersReady",
            "status": "False",
            "reason": "PodCompleted",
            "lastTransitionTime": stamp,
        },
    ]
    return {
        "status": {
            "phase": "Succeeded" if succeeded else "Failed",
            "conditions": conditions,
            "startTime": started,
            "containerStatuses": containers,
        }
    }


def _plugin_label(node: Obj | None) -> str | None:
    labels = (node or {}).get("metadata", {}).get("labels") or {}
    value = labels.get(DEVICE_PLUGIN_LABEL)
    return str(value) if value is not None else None


def pinned_node(job: Obj) -> str | None:
    spec = job.get("spec", {}).get("template", {}).get("spec", {})
    name = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(manifests.HOSTNAME_LABEL)
    return str(name) if name else None


def finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions", [])
    )


UNPULLABLE_REGISTRY = ".invalid/"
"""An image from a registry under the `.invalid` top-level domain (RFC 2606: never resolves)
cannot be pulled: its pod stays Pending (ImagePullBackOff) and active for ever, never Ready,
as on a real node whose registry is unreachable."""


def unpullable(job: Obj) -> bool:
    spec = job.get("spec", {}).get("template", {}).get("spec", {})
    images = [str(c.get("image", "")) for c in spec.get("containers") or []]
    return any(UNPULLABLE_REGISTRY in image.split("/", 1)[0] + "/" for image in images)


def started_status(now: datetime, *, ready: bool = True) -> dict[str, Any]:
    """The Job's pod was created; `ready`: it runs (a container without a readiness probe is
    Ready once running); not ready: it is Pending (the Job controller counts it active)."""
    return {
        "status": {
            "startTime": health.timestamp(now),
            "active": 1,
            "ready": 1 if ready else 0,
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
        self.program = NodeProgram(client.connection) if config.node_program else None
        """Runs executor Jobs that call the node program against a fake GPU node."""
        self._pods: Informer | None = None
        jobs.subscribe(self._on_job)
        nodes.subscribe(self._on_node)

    def run_pods_of(self, pods: Informer) -> None:
        """Play the kubelet for Jobs' pods (a real Job controller creates them)."""
        self._pods = pods
        pods.subscribe(self._on_pod)

    def _on_pod(self, key: str, old: Obj | None, new: Obj | None) -> None:
        pod = new or old
        if pod is None or owning_job(pod) is None:
            return
        self._by_node.place(POD_PREFIX + key, (new or {}).get("spec", {}).get("nodeName"))
        self.controller.enqueue(POD_PREFIX + key)

    def _on_job(self, key: str, old: Obj | None, new: Obj | None) -> None:
        if self._config.job_controller:
            return  # the real Job controller runs it; its pods are what we play
        if new is None and old is not None and self.program is not None and runs_program(old):
            self.controller.enqueue(GONE_PREFIX + key)
            return
        self._by_node.place(key, pinned_node(new) if new else None)
        self.controller.enqueue(key)

    def _on_node(self, key: str, old: Obj | None, new: Obj | None) -> None:
        if (
            self.program is not None
            and new is not None
            and _plugin_label(old) != _plugin_label(new)
        ):
            self.controller.enqueue(DEVICE_PLUGIN_PREFIX + key)
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
        if key.startswith(POD_PREFIX):
            return await self._reconcile_pod(key)
        if key.startswith(GONE_PREFIX):
            await self._collect_pods(key[len(GONE_PREFIX) :])
            return None
        if key.startswith(DEVICE_PLUGIN_PREFIX):
            node = self._nodes.get(key[len(DEVICE_PLUGIN_PREFIX) :])
            if node is not None:
                running = await place_device_plugin(self._client, node)
                # The plugin process ends with its pod and a new one starts with the next.
                self._agent.device_plugin_running(node["metadata"]["name"], running)
            return None
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
        if unpullable(job):
            if not status.get("startTime"):
                await self._status(job, started_status(self._now(), ready=False))
            return None  # Pending for ever: ImagePullBackOff
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
            if self.program is not None and runs_program(job):
                ok = await self._run_program(job, node, attempt)
            else:
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

    async def _reconcile_pod(self, key: str) -> float | None:
        """One Job pod, as its node's kubelet runs it (deletion is the Kubelet's job)."""
        assert self._pods is not None
        pod = self._pods.get(key[len(POD_PREFIX) :])
        if pod is None:
            return None
        meta = pod["metadata"]
        status = pod.get("status", {})
        node_name = pod.get("spec", {}).get("nodeName")
        if not node_name or meta.get("deletionTimestamp"):
            return None
        if status.get("phase") in ("Succeeded", "Failed"):
            return None
        node = self._nodes.get(node_name)
        if node is None or not self._config.owns(node) or not node_ready(node):
            return None  # woken again when the node becomes Ready
        uid = str(meta["uid"])
        if version_number(pod) < self._written.get(uid, 0):
            return None
        clock = asyncio.get_running_loop().time()
        job_key = owning_job(pod)
        job = self._jobs.get(job_key) if job_key else None
        if job is None:
            return 0.1  # the Job is not in our cache yet
        if status.get("phase") != "Running":
            body = kubelet.running_status(pod, node, self._now(), ready=True)
            await self._pod_status(pod, body)
            self._runs[uid] = clock
            return self._duration(job)
        started = self._runs.setdefault(uid, clock)
        remaining = started + self._duration(job) - clock
        if remaining > 0:
            return remaining
        ok = self._outcomes.get(uid)
        if ok is None:
            ok = self._run_effect(job, node_name)
            self._outcomes[uid] = ok
        await self._pod_status(pod, terminated_status(pod, self._now(), succeeded=ok))
        self._runs.pop(uid, None)
        return None

    async def _pod_status(self, pod: Obj, body: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            written = await self._client.patch(
                resources.PODS,
                meta["name"],
                body,
                namespace=meta["namespace"],
                subresource="status",
                patch_type=PatchType.STRATEGIC,
            )
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        uid = str(meta["uid"])
        self._written[uid] = max(self._written.get(uid, 0), version_number(written))

    async def _run_program(self, job: Obj, node: Obj, attempt: str) -> bool:
        """Run the node program against the node's fake GPU node; on success apply the
        action's effect (a reset that ran, a reboot it requested) to the emulated node."""
        assert self.program is not None
        name = node["metadata"]["name"]
        action = job["metadata"].get("labels", {}).get(ACTION_LABEL)
        healthy = self._agent.validate(name) if action == "Validate" else True
        ran = await self.program.run(job, node, healthy)
        # What the program did, for the sandbox's log (`make demo` shows the reset's clients).
        log.info(
            "node program on %s: %s %s (exit %d): %s",
            name,
            action,
            ran.result.get("reason", ""),
            ran.code,
            "; ".join(str(a) for a in ran.result.get("actions") or []) or ran.message,
        )
        await self._record_pod(job, node, ran)
        if ran.code != 0:
            return False
        if action == "GPUReset":
            return self._agent.gpu_reset(name)
        if action == "Reboot" and ran.result.get("reason") == "RebootRequested":
            return self._agent.reboot(name)
        return True

    async def _record_pod(self, job: Obj, node: Obj, ran: Ran) -> None:
        """The ended pod of this run, as the Job controller and the kubelet leave it: labelled
        `job-name`, owned by the Job, its container terminated with the program's exit code
        and its result as the termination message (`terminationMessagePolicy: File`)."""
        meta = job["metadata"]
        template = job["spec"]["template"]
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            "job-name": meta["name"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
        }
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {**template.get("spec", {}), "nodeName": node["metadata"]["name"]},
        }
        try:
            pod = await self._client.create(resources.PODS, body, namespace=meta["namespace"])
        except ApiError as error:
            log.warning("node program pod for %s not recorded: %s", meta["name"], error.message)
            return
        status = terminated_status(pod, self._now(), succeeded=ran.code == 0)
        for container in status["status"]["containerStatuses"]:
            terminated = container["state"]["terminated"]
            terminated["exitCode"] = ran.code
            terminated["message"] = ran.said
        await self._pod_status(pod, status)

    async def _collect_pods(self, key: str) -> None:
        """The garbage collector's part: a deleted Job's node-program pods go with it."""
        namespace, _, name = key.partition("/")
        pods = await self._client.list(
            resources.PODS, namespace=namespace, label_selector=f"job-name={name}"
        )
        for pod in pods.get("items") or []:
            try:
                await self._client.delete(
                    resources.PODS, pod["metadata"]["name"], namespace=namespace
                )
            except ApiError as error:
                if error.status != 404:
                    raise

    def _run_effect(self, job: Obj, node_name: str) -> bool:
        if self._rng.random() < self._config.job_failure_probability:
            return False
        action = job["metadata"].get("labels", {}).get(ACTION_LABEL)
        if action == "GPUReset":
            return self._agent.gpu_reset(node_name)
        if action == "Reboot":
            return self._agent.reboot(node_name)
        if action == "Validate":
            return self._agent.validate(node_name)
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
