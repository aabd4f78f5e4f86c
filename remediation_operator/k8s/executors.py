"""Carry out GPUReset, Reboot and the validation after them: a Job pinned to the node, a
NodeAgent request, or nothing.

Each attempt has a name derived from the Remediation, the action and the attempt number, so a
restarted operator finds the Job it created before instead of starting a second one; the
NodeAgent request carries the same triple and the agent's acknowledgement must echo it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from remediation_operator.domain.fleet import Progress
from remediation_operator.domain.policy import (
    DIAGNOSTICS_MOUNT,
    Action,
    ActionExecutor,
    Executor,
)
from remediation_operator.k8s import names, nodes
from remediation_operator.k8s.client import ApiError, Client, path

TEMPLATE_FILES: Mapping[Action, str] = {
    Action.GPUReset: "gpu-reset.yaml",
    Action.Reboot: "reboot.yaml",
    Action.Validate: "validate.yaml",
    Action.Diagnose: "diagnose.yaml",
}
TTL_SECONDS_AFTER_FINISHED = 86400
"""A finished Job stays a day for `kubectl logs`; its outcome is in the Remediation already."""
_MAX_NAME = 63


@dataclass(frozen=True)
class Status:
    progress: Progress
    message: str = ""
    permanent: bool = False
    not_run: bool = False
    """With Failed: nothing ran (no template, the pod refused by admission): no verdict."""
    started: bool = True
    """Whether a pod of the attempt has run yet (False: none created, Pending, suspended)."""


class TemplateError(ValueError):
    """A Job template that cannot be used; the message names the file or field."""


def job_name(remediation: str, action: Action, attempt: int) -> str:
    """`<remediation>-<action>-<attempt>`, or a hashed shortening of it beyond 63 characters."""
    base = re.sub(r"[^a-z0-9-]", "-", f"{remediation}-{action.value.lower()}-{attempt}".lower())
    if len(base) <= _MAX_NAME:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    return f"{base[: _MAX_NAME - 11].rstrip('-')}-{digest}"


def load_templates(directory: str | None) -> dict[Action, dict[str, Any]]:
    """Read `gpu-reset.yaml`, `reboot.yaml` and `validate.yaml` from `--job-templates` (each
    may be absent)."""
    if not directory:
        return {}
    root = Path(directory)
    if not root.is_dir():
        raise TemplateError(f"--job-templates: {directory!r} is not a directory")
    found: dict[Action, dict[str, Any]] = {}
    for action, file in TEMPLATE_FILES.items():
        candidate = root / file
        if not candidate.exists():
            continue
        try:
            body = yaml.safe_load(candidate.read_text())
        except yaml.YAMLError as error:
            raise TemplateError(f"--job-templates: {candidate}: not YAML: {error}") from error
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise TemplateError(f"--job-templates: {candidate}: not a batch/v1 Job manifest")
        found[action] = body
    return found


def _as_job(template: Mapping[str, Any]) -> dict[str, Any]:
    """Accept a Job manifest, a Job spec (`template:`) or a pod template (`spec.containers`)."""
    body = copy.deepcopy(dict(template))
    if isinstance(body.get("spec"), dict) and "template" in body["spec"]:
        return body
    if "template" in body:
        return {"spec": body}
    if isinstance(body.get("spec"), dict) and "containers" in body["spec"]:
        return {"spec": {"template": body}}
    raise TemplateError(
        "jobTemplate: expected a batch/v1 Job manifest, a Job spec with `template`,"
        " or a pod template with `spec.containers`"
    )


def job_manifest(
    template: Mapping[str, Any],
    *,
    namespace: str,
    node: str,
    remediation: str,
    action: Action,
    attempt: int,
    fault_toleration: bool = True,
    env: Mapping[str, str] | None = None,
    claim: str | None = None,
) -> dict[str, Any]:
    job = _as_job(template)
    job["apiVersion"] = "batch/v1"
    job["kind"] = "Job"
    metadata = job.setdefault("metadata", {})
    for key in ("generateName", "resourceVersion", "uid", "creationTimestamp"):
        metadata.pop(key, None)
    metadata["name"] = job_name(remediation, action, attempt)
    metadata["namespace"] = namespace
    metadata.setdefault("labels", {}).update(
        {names.ACTION_LABEL: action.value, names.MANAGED_BY: names.MANAGER}
    )
    metadata.setdefault("annotations", {}).update(
        {names.REMEDIATION_ANNOTATION: remediation, names.NODE_ANNOTATION: node}
    )
    spec = job["spec"]
    spec.setdefault("ttlSecondsAfterFinished", TTL_SECONDS_AFTER_FINISHED)
    spec.setdefault("backoffLimit", 0)
    pod = spec["template"].setdefault("spec", {})
    pod["nodeName"] = node
    pod.setdefault("restartPolicy", "Never")
    tolerations = list(pod.get("tolerations") or [])
    wanted = [
        {"key": names.UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]
    if fault_toleration:
        wanted.append({"key": names.QUARANTINE_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    for toleration in wanted:
        if toleration not in tolerations:
            tolerations.append(toleration)
    pod["tolerations"] = tolerations
    for container in pod.get("containers") or []:
        # Ours win over the template's: the policy's validation level is what is asked for.
        given = [e for e in container.get("env") or [] if e.get("name") not in (env or {})]
        container["env"] = given + [{"name": k, "value": v} for k, v in (env or {}).items()]
        if not container["env"]:
            del container["env"]
    if claim:
        # The diagnostics' PersistentVolumeClaim, mounted where REMEDIATION_DIAGNOSTICS_DIR
        # points (domain.policy.Diagnostics.job).
        volumes = [v for v in pod.get("volumes") or [] if v.get("name") != "diagnostics"]
        volumes.append({"name": "diagnostics", "persistentVolumeClaim": {"claimName": claim}})
        pod["volumes"] = volumes
        for container in pod.get("containers") or []:
            mounts = [
                m for m in container.get("volumeMounts") or [] if m.get("name") != "diagnostics"
            ]
            mounts.append({"name": "diagnostics", "mountPath": DIAGNOSTICS_MOUNT})
            container["volumeMounts"] = mounts
    return job


def _has_pods(job: Mapping[str, Any]) -> bool:
    """Whether the Job controller got any pod of the Job created."""
    status = job.get("status") or {}
    return any(int(status.get(key) or 0) for key in ("active", "succeeded", "failed", "ready"))


def _ran(job: Mapping[str, Any]) -> bool:
    """Whether the Job's status shows a pod that ran: one is Ready (a running container with
    no readiness probe is Ready), or one ended. `active` alone also counts Pending pods (an
    image that cannot be pulled keeps its pod Pending and active for ever)."""
    status = job.get("status") or {}
    return any(int(status.get(key) or 0) for key in ("succeeded", "failed", "ready"))


def _suspended(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return bool((job.get("spec") or {}).get("suspend")) or any(
        c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions
    )


def _waiting(pod: Mapping[str, Any]) -> str:
    """Why a pod has not started, in the kubelet's words (`ImagePullBackOff: ...`), or ""."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            detail = waiting.get("message") or ""
            return f"{waiting['reason']}: {detail}" if detail else str(waiting["reason"])
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "unschedulable")
    return ""


@dataclass(frozen=True)
class Said:
    """What an executor pod said when it ended (its termination message)."""

    message: str
    permanent: bool = False
    not_run: bool = False
    """The node program could not check anything (outcome NotRun): no verdict."""


_SAID_LIMIT = 600
"""How much of a termination message reaches the step's record and Event."""


def node_said(text: str) -> Said | None:
    """A termination message as the step's record shows it. The node program writes one JSON
    object (`remediation_operator.node.result`): its message and failed checks (which check,
    which GPU), and `PermanentFailure` makes the failure permanent (the ladder climbs at once).
    Any other image's message is shown as written, cut to a readable length."""
    text = text.strip()
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return Said(text[:_SAID_LIMIT])
    if not isinstance(body, dict) or "outcome" not in body:
        return Said(text[:_SAID_LIMIT])
    message = f"{body.get('reason', '')}: {body.get('message', '')}".strip(": ")
    failed = [
        f"{c.get('check')} on {c.get('gpu') or 'the node'}"
        for c in body.get("failedChecks") or []
        if isinstance(c, dict)
    ]
    if failed:
        message += f" (failed: {', '.join(failed[:4])}{' ...' if len(failed) > 4 else ''})"
    outcome = body.get("outcome")
    return Said(
        message[:_SAID_LIMIT],
        permanent=outcome in ("PermanentFailure", "NotRun"),
        not_run=outcome == "NotRun",
    )


def agent_request(remediation: str, action: Action, attempt: int) -> str:
    return f"{action.value}:{remediation}:{attempt}"


class Executors:
    """Start and observe executor attempts against one API server."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        templates: Mapping[Action, Mapping[str, Any]] | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._templates = dict(templates or {})

    def _template(self, action: Action, executor: ActionExecutor) -> Mapping[str, Any]:
        template = executor.job_template or self._templates.get(action)
        if template is None:
            key = {
                Action.GPUReset: "actions.gpuReset",
                Action.Reboot: "actions.reboot",
                Action.Validate: "validation",
                Action.Diagnose: "diagnostics",
            }[action]
            raise TemplateError(
                f"no Job template for {action.value}: set spec.{key}.jobTemplate"
                f" in the policy or give --job-templates with {TEMPLATE_FILES[action]}"
            )
        return template

    async def start(
        self, node: str, remediation: str, action: Action, attempt: int, executor: ActionExecutor
    ) -> Status:
        """Start the attempt; a template problem comes back as a permanent failure."""
        if executor.executor is Executor.Noop:
            return Status(Progress.Succeeded, "Noop executor: nothing to do")
        if executor.executor is Executor.NodeAgent:
            await nodes.annotate(
                self._client, node, names.AGENT_REQUEST, agent_request(remediation, action, attempt)
            )
            return Status(Progress.InProgress, "requested from the node agent")
        try:
            job = job_manifest(
                self._template(action, executor),
                namespace=self._namespace,
                node=node,
                remediation=remediation,
                action=action,
                attempt=attempt,
                env=executor.env,
                claim=executor.claim,
            )
        except TemplateError as error:
            return Status(Progress.Failed, str(error), permanent=True)
        jobs = path("batch/v1", "jobs", namespace=self._namespace)
        try:
            await self._client.create(jobs, job)
        except ApiError as error:
            if error.status == 409:
                # Usually AlreadyExists (an earlier try of this attempt got through), but a 409
                # can also be a lost race that created nothing: only a Job that is really there
                # counts as started; otherwise the 409 goes up and the step is retried, rather
                # than waiting for a Job that will never run until the step times out (found by
                # tests/reliability/test_api_faults.py).
                name = job["metadata"]["name"]
                try:
                    await self._client.get(
                        path("batch/v1", "jobs", name, namespace=self._namespace)
                    )
                except ApiError as missing:
                    if missing.status == 404:
                        raise error from missing
                    raise
                return Status(Progress.InProgress, f"Job {name} exists")
            if error.status in (400, 422):
                return Status(Progress.Failed, f"Job rejected: {error.message}", permanent=True)
            raise
        return Status(Progress.InProgress, f"Job {self._namespace}/{job['metadata']['name']}")

    async def status(
        self, node: str, remediation: str, action: Action, attempt: int, executor: ActionExecutor
    ) -> Status:
        if executor.executor is Executor.Noop:
            return Status(Progress.Succeeded, "Noop executor: nothing to do")
        if executor.executor is Executor.NodeAgent:
            return await self._agent_status(node, agent_request(remediation, action, attempt))
        name = job_name(remediation, action, attempt)
        try:
            job = await self._client.get(path("batch/v1", "jobs", name, namespace=self._namespace))
        except ApiError as error:
            if error.status != 404:
                raise
            try:
                self._template(action, executor)
            except TemplateError as missing:
                return Status(Progress.Failed, str(missing), permanent=True, not_run=True)
            return Status(Progress.Absent, f"no Job {self._namespace}/{name}", started=False)
        for condition in (job.get("status") or {}).get("conditions") or []:
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Complete":
                said = await self._said(name)
                detail = f": {said.message}" if said is not None else ""
                return Status(Progress.Succeeded, f"Job {name} completed{detail}")
            if condition.get("type") == "Failed":
                said = await self._said(name)
                detail = condition.get("message") or condition.get("reason") or "failed"
                if said is not None:
                    return Status(
                        Progress.Failed,
                        f"Job {name} failed: {said.message}",
                        permanent=said.permanent,
                        not_run=said.not_run,
                    )
                return Status(Progress.Failed, f"Job {name} failed: {detail}")
        if not _has_pods(job):
            refused = await self._refused(name)
            if refused is not None:
                return refused
        if _ran(job):
            return Status(Progress.InProgress, f"Job {self._namespace}/{name} running")
        return await self._unstarted(job, name)

    async def _said(self, name: str) -> Said | None:
        """What the Job's last pod said in its termination message (`node_said`)."""
        pods = await self._client.get(
            path("v1", "pods", namespace=self._namespace), labelSelector=f"job-name={name}"
        )
        items = sorted(
            pods.get("items") or [],
            key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""),
        )
        for pod in reversed(items):
            status = pod.get("status") or {}
            ended = [
                *(status.get("containerStatuses") or []),
                *(status.get("initContainerStatuses") or []),
            ]
            for container in ended:
                terminated = (container.get("state") or {}).get("terminated") or {}
                said = node_said(str(terminated.get("message") or ""))
                if said is not None:
                    return said
        return None

    async def _unstarted(self, job: Mapping[str, Any], name: str) -> Status:
        """A Job none of whose pods has run yet: running if its pod is Running now, else not
        started, saying why (suspended, the kubelet's waiting reason, not scheduled)."""
        where = f"Job {self._namespace}/{name}"
        if _suspended(job):
            return Status(Progress.InProgress, f"{where} is suspended", started=False)
        pods = await self._client.get(
            path("v1", "pods", namespace=self._namespace), labelSelector=f"job-name={name}"
        )
        items = pods.get("items") or []
        if any(
            (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
            for p in items
        ):
            return Status(Progress.InProgress, f"{where} running")
        whys = [w for w in (_waiting(p) for p in items) if w]
        if whys:
            return Status(
                Progress.InProgress, f"{where}: its pod has not started: {whys[0]}", started=False
            )
        if items:
            return Status(Progress.InProgress, f"{where}: its pod is Pending", started=False)
        return Status(Progress.InProgress, f"{where}: no pod of it has started", started=False)

    async def _refused(self, name: str) -> Status | None:
        """The Job controller could not create the Job's pod (Pod Security, quota, a missing
        RuntimeClass...): it says so only in a `FailedCreate` Event on the Job and keeps
        retrying, so without this the step would wait out its timeout. A refusal by
        admission does not heal by waiting, so it is a permanent failure with the API's
        reason (kubernetes pkg/controller/job: `FailedCreate` events from the pod control)."""
        events = await self._client.get(
            path("v1", "events", namespace=self._namespace),
            fieldSelector=f"involvedObject.kind=Job,involvedObject.name={name}",
        )
        for event in reversed(events.get("items") or []):
            involved = event.get("involvedObject") or {}
            if event.get("reason") == "FailedCreate" and involved.get("name") == name:
                detail = str(event.get("message") or "pod creation refused")
                return Status(
                    Progress.Failed,
                    f"Job {self._namespace}/{name} cannot create its pod: {detail}",
                    permanent=True,
                    not_run=True,
                    started=False,
                )
        return None

    async def _agent_status(self, node: str, request: str) -> Status:
        body = await nodes.read(self._client, node)
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        ack = annotations.get(names.AGENT_ACK, "")
        if ack == f"{request}:Succeeded":
            return Status(Progress.Succeeded, "the node agent reported success")
        if ack == f"{request}:Failed":
            return Status(Progress.Failed, "the node agent reported failure")
        if annotations.get(names.AGENT_REQUEST) == request:
            return Status(Progress.InProgress, "waiting for the node agent's acknowledgement")
        return Status(Progress.Absent)
