"""Request bodies in Kubernetes protobuf, decoded to the JSON the rest of the emulator speaks.

Why: kubectl's typed commands (`kubectl create namespace`, `create configmap`, `create secret`,
`create serviceaccount`, `create role`...) and every client-go clientset send built-in objects
as `application/vnd.kubernetes.protobuf`, and client-go falls back to JSON after a 415 only for
CBOR, never for protobuf (k8s.io/client-go/rest `UnsupportedMediaType`: "all generated clients
accessing built-in kube resources are forced to protobuf"). A JSON-only emulator therefore
breaks those commands outright, where a real server accepts them.

The wire format (k8s.io/apimachinery/pkg/runtime/serializer/protobuf): the 4 bytes `k8s\\0`,
then a `runtime.Unknown` {typeMeta{apiVersion, kind}, raw, contentEncoding, contentType} whose
`raw` is the object's own message. The field numbers of the types below are those of
k8s.io/api and k8s.io/apimachinery `generated.proto` (stable: they are the wire protocol).
Go's zero values are sent for every non-pointer field; as the real server decodes into Go
structs where a zero value and an absent field are the same thing, zero values of non-pointer
fields are dropped here, and pointer fields (marked) are kept as sent.

Only the types those commands send are known. Any other type is refused with 415 and the real
server's message for a format it cannot read, as custom resources are (docs/emulator.md).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from remediation_emulator import errors

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
ACCEPTED = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    """string, bool, int, bytes, time, microtime, intorstr, raw (JSON bytes), a message name,
    or skip: a status, which the server resets on create anyway."""
    repeated: bool = False
    map: bool = False
    """map<string, kind>: repeated entries {1: key, 2: value}."""
    pointer: bool = False
    """A Go pointer: sent only when set, so a zero value is meaningful and kept."""


def _f(name: str, kind: str = "string", *flags: str) -> Field:
    return Field(name, kind, "repeated" in flags, "map" in flags, "pointer" in flags)


MESSAGES: dict[str, dict[int, Field]] = {
    "ObjectMeta": {
        1: _f("name"),
        2: _f("generateName"),
        3: _f("namespace"),
        4: _f("selfLink"),
        5: _f("uid"),
        6: _f("resourceVersion"),
        7: _f("generation", "int"),
        8: _f("creationTimestamp", "time"),
        9: _f("deletionTimestamp", "time", "pointer"),
        10: _f("deletionGracePeriodSeconds", "int", "pointer"),
        11: _f("labels", "string", "map"),
        12: _f("annotations", "string", "map"),
        13: _f("ownerReferences", "OwnerReference", "repeated"),
        14: _f("finalizers", "string", "repeated"),
        17: _f("managedFields", "ManagedFieldsEntry", "repeated"),
    },
    "OwnerReference": {
        5: _f("apiVersion"),
        1: _f("kind"),
        3: _f("name"),
        4: _f("uid"),
        6: _f("controller", "bool", "pointer"),
        7: _f("blockOwnerDeletion", "bool", "pointer"),
    },
    "ManagedFieldsEntry": {
        1: _f("manager"),
        2: _f("operation"),
        3: _f("apiVersion"),
        4: _f("time", "time", "pointer"),
        6: _f("fieldsType"),
        7: _f("fieldsV1", "FieldsV1", "pointer"),
        8: _f("subresource"),
    },
    "FieldsV1": {1: _f("Raw", "raw")},
    "LabelSelector": {
        1: _f("matchLabels", "string", "map"),
        2: _f("matchExpressions", "LabelSelectorRequirement", "repeated"),
    },
    "LabelSelectorRequirement": {
        1: _f("key"),
        2: _f("operator"),
        3: _f("values", "string", "repeated"),
    },
    "DeleteOptions": {
        1: _f("gracePeriodSeconds", "int", "pointer"),
        2: _f("preconditions", "Preconditions", "pointer"),
        3: _f("orphanDependents", "bool", "pointer"),
        4: _f("propagationPolicy", "string", "pointer"),
        5: _f("dryRun", "string", "repeated"),
        6: _f("ignoreStoreReadErrorWithClusterBreakingPotential", "bool", "pointer"),
    },
    "Preconditions": {
        1: _f("uid", "string", "pointer"),
        2: _f("resourceVersion", "string", "pointer"),
    },
    # core/v1
    "Namespace": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("spec", "NamespaceSpec"),
        3: _f("status", "skip"),
    },
    "NamespaceSpec": {1: _f("finalizers", "string", "repeated")},
    "ConfigMap": {
        1: _f("metadata", "ObjectMeta"),
        4: _f("immutable", "bool", "pointer"),
        2: _f("data", "string", "map"),
        3: _f("binaryData", "bytes", "map"),
    },
    "Secret": {
        1: _f("metadata", "ObjectMeta"),
        5: _f("immutable", "bool", "pointer"),
        2: _f("data", "bytes", "map"),
        4: _f("stringData", "string", "map"),
        3: _f("type"),
    },
    "ServiceAccount": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("secrets", "ObjectReference", "repeated"),
        3: _f("imagePullSecrets", "LocalObjectReference", "repeated"),
        4: _f("automountServiceAccountToken", "bool", "pointer"),
    },
    "ObjectReference": {
        1: _f("kind"),
        2: _f("namespace"),
        3: _f("name"),
        4: _f("uid"),
        5: _f("apiVersion"),
        6: _f("resourceVersion"),
        7: _f("fieldPath"),
    },
    "LocalObjectReference": {1: _f("name")},
    # policy/v1
    "Eviction": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("deleteOptions", "DeleteOptions", "pointer"),
    },
    "PodDisruptionBudget": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("spec", "PodDisruptionBudgetSpec"),
        3: _f("status", "skip"),
    },
    "PodDisruptionBudgetSpec": {
        1: _f("minAvailable", "intorstr", "pointer"),
        2: _f("selector", "LabelSelector", "pointer"),
        3: _f("maxUnavailable", "intorstr", "pointer"),
        4: _f("unhealthyPodEvictionPolicy", "string", "pointer"),
    },
    # rbac.authorization.k8s.io/v1
    "Role": {1: _f("metadata", "ObjectMeta"), 2: _f("rules", "PolicyRule", "repeated")},
    "ClusterRole": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("rules", "PolicyRule", "repeated"),
        3: _f("aggregationRule", "AggregationRule", "pointer"),
    },
    "AggregationRule": {1: _f("clusterRoleSelectors", "LabelSelector", "repeated")},
    "PolicyRule": {
        1: _f("verbs", "string", "repeated"),
        2: _f("apiGroups", "string", "repeated"),
        3: _f("resources", "string", "repeated"),
        4: _f("resourceNames", "string", "repeated"),
        5: _f("nonResourceURLs", "string", "repeated"),
    },
    "RoleBinding": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("subjects", "Subject", "repeated"),
        3: _f("roleRef", "RoleRef"),
    },
    "ClusterRoleBinding": {
        1: _f("metadata", "ObjectMeta"),
        2: _f("subjects", "Subject", "repeated"),
        3: _f("roleRef", "RoleRef"),
    },
    "Subject": {1: _f("kind"), 2: _f("apiGroup"), 3: _f("name"), 4: _f("namespace")},
    "RoleRef": {1: _f("apiGroup"), 2: _f("kind"), 3: _f("name")},
    # coordination.k8s.io/v1
    "Lease": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "LeaseSpec")},
    "LeaseSpec": {
        1: _f("holderIdentity", "string", "pointer"),
        2: _f("leaseDurationSeconds", "int", "pointer"),
        3: _f("acquireTime", "microtime", "pointer"),
        4: _f("renewTime", "microtime", "pointer"),
        5: _f("leaseTransitions", "int", "pointer"),
        6: _f("strategy", "string", "pointer"),
        7: _f("preferredHolder", "string", "pointer"),
    },
}

KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("policy/v1", "Eviction"): "Eviction",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "ClusterRoleBinding",
    ("coordination.k8s.io/v1", "Lease"): "Lease",
}
"""(apiVersion, kind) -> message, for the types this module can read; DeleteOptions, which
every group version registers, is read whatever its apiVersion."""


class _MalformedError(ValueError):
    pass


def unsupported() -> errors.ApiError:
    """The real server's answer to a body it cannot decode (as for custom resources)."""
    return errors.ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{ACCEPTED}",
    )


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";")[0].strip() == MEDIA_TYPE


def decode(raw: bytes, *, custom: bool) -> dict[str, Any]:
    """The JSON object of a protobuf request body; 415 for a type it cannot read (and for any
    custom resource, which has no protobuf form), 400 for a body that is not protobuf."""
    if custom:
        raise unsupported()
    if not raw.startswith(MAGIC):
        raise errors.bad_request(
            "the request body is not valid protobuf: it does not start with the k8s prefix"
        )
    try:
        envelope = _fields(raw[len(MAGIC) :])
        type_meta = _fields(_one(envelope, 1, b""))
        api_version = _one(type_meta, 1, b"").decode()
        kind = _one(type_meta, 2, b"").decode()
        message = KINDS.get((api_version, kind)) or (
            "DeleteOptions" if kind == "DeleteOptions" else None
        )
        if message is None:
            raise unsupported()
        obj = _message(message, _one(envelope, 2, b""))
    except (_MalformedError, UnicodeDecodeError, IndexError, AttributeError, TypeError) as exc:
        raise errors.bad_request(f"the request body is not valid protobuf: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}


# The wire format -----------------------------------------------------------------------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise _MalformedError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise _MalformedError("varint too long")


def _fields(data: bytes) -> dict[int, list[Any]]:
    """Field number -> values in order (ints for varints, bytes for length-delimited)."""
    out: dict[int, list[Any]] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise _MalformedError("truncated field")
            value, at = data[at : at + size], at + size
        elif wire == 1:
            value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
        elif wire == 5:
            value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
        else:
            raise _MalformedError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _one(fields: Mapping[int, list[Any]], number: int, default: Any) -> Any:
    values = fields.get(number)
    return values[-1] if values else default


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _time(data: bytes, *, micro: bool) -> str | None:
    fields = _fields(data)
    seconds = _signed(_one(fields, 1, 0))
    nanos = _one(fields, 2, 0)
    if seconds == 0 and nanos == 0:
        return None
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _scalar(kind: str, value: Any) -> Any:
    if kind == "string":
        return bytes(value).decode()
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return _signed(int(value))
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind in ("time", "microtime"):
        return _time(bytes(value), micro=kind == "microtime")
    if kind == "intorstr":
        fields = _fields(bytes(value))
        if _one(fields, 1, 0) == 1:
            return bytes(_one(fields, 3, b"")).decode()
        return _signed(_one(fields, 2, 0))
    if kind == "raw":
        return json.loads(bytes(value)) if value else None
    if kind == "skip":
        return None
    if kind in MESSAGES:
        return _message(kind, bytes(value))
    raise _MalformedError(f"unknown field kind {kind}")


def _zero(value: Any) -> bool:
    """Go's zero value (False == 0), which the real server cannot tell from an absent field."""
    return value is None or value in ("", 0, {}, [])


def _message(name: str, data: bytes) -> dict[str, Any]:
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, values in _fields(data).items():
        field = schema.get(number)
        if field is None:
            raise _MalformedError(f"field {number} of {name} is not known to the emulator")
        if field.map:
            entries: dict[str, Any] = {}
            for entry in values:
                parts = _fields(bytes(entry))
                key = bytes(_one(parts, 1, b"")).decode()
                entries[key] = _scalar(field.kind, _one(parts, 2, b""))
            value: Any = entries
        elif field.repeated:
            value = [_scalar(field.kind, v) for v in values]
        else:
            value = _scalar(field.kind, values[-1])
        if field.kind == "skip":
            continue
        if (field.pointer and value is not None) or not _zero(value):
            out[field.name] = value
    return out
