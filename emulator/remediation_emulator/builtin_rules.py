"""Defaults and validation of built-in types where a real server would change or reject a write.

Only the rules a client of this project can trip over are here (see docs/emulator.md): a Pod
needs containers with a name and an image; a Job is defaulted like the real API (backoffLimit
6, completions/parallelism 1, restartPolicy Always in its template unless set, a generated
selector and controller-uid labels) and then rejected unless its template's restartPolicy is
Never or OnFailure, and its template is immutable; a PDB cannot set both minAvailable and
maxUnavailable; a Secret's type defaults to Opaque. Messages follow
k8s.io/kubernetes/pkg/apis/*/validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remediation_emulator.errors import Cause
from remediation_emulator.resources import ResourceType

Obj = dict[str, Any]
PODS = ("", "pods")
JOBS = ("batch", "jobs")
PDBS = ("policy", "poddisruptionbudgets")
SECRETS = ("", "secrets")


def _pod_spec_defaults(spec: Mapping[str, Any]) -> Obj:
    out = dict(spec)
    out.setdefault("restartPolicy", "Always")
    out.setdefault("terminationGracePeriodSeconds", 30)
    out.setdefault("dnsPolicy", "ClusterFirst")
    out.setdefault("schedulerName", "default-scheduler")
    return out


def defaults(rtype: ResourceType, obj: Obj) -> Obj:
    """obj with the server-side defaults of its type (applied on create)."""
    if rtype.key == PODS and isinstance(obj.get("spec"), Mapping):
        return {**obj, "spec": _pod_spec_defaults(obj["spec"])}
    if rtype.key == JOBS and isinstance(obj.get("spec"), Mapping):
        spec = dict(obj["spec"])
        uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template = dict(spec.get("template") or {})
        meta = dict(template.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        template["metadata"] = meta
        if isinstance(template.get("spec"), Mapping):
            template["spec"] = _pod_spec_defaults(template["spec"])
        spec["template"] = template
        return {**obj, "spec": spec}
    if rtype.key == SECRETS and not obj.get("type"):
        return {**obj, "type": "Opaque"}
    return obj


def _containers(spec: Mapping[str, Any], path: str) -> list[Cause]:
    containers = spec.get("containers") or []
    if not containers:
        return [Cause("FieldValueRequired", "Required value", f"{path}.containers")]
    causes = []
    for i, container in enumerate(containers):
        for field in ("name", "image"):
            if not (isinstance(container, Mapping) and container.get(field)):
                causes.append(
                    Cause("FieldValueRequired", "Required value", f"{path}.containers[{i}].{field}")
                )
    return causes


def validate(
    rtype: ResourceType, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[Cause]:
    spec = obj.get("spec") or {}
    if rtype.key == PODS:
        return _containers(spec, "spec")
    if rtype.key == JOBS:
        template_spec = (spec.get("template") or {}).get("spec") or {}
        causes = _containers(template_spec, "spec.template.spec")
        policy = template_spec.get("restartPolicy")
        if policy not in ("Never", "OnFailure"):
            causes.append(
                Cause(
                    "FieldValueNotSupported",
                    f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"',
                    "spec.template.spec.restartPolicy",
                )
            )
        if old is not None and (old.get("spec") or {}).get("template") != spec.get("template"):
            causes.append(
                Cause("FieldValueInvalid", "Invalid value: field is immutable", "spec.template")
            )
        return causes
    if (
        rtype.key == PDBS
        and spec.get("minAvailable") is not None
        and (spec.get("maxUnavailable") is not None)
    ):
        return [
            Cause(
                "FieldValueInvalid",
                "Invalid value: minAvailable and maxUnavailable cannot be both set",
                "spec",
            )
        ]
    return []
