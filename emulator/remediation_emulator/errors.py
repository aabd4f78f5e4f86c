"""API errors rendered as `Status` objects, shaped exactly like the real kube-apiserver's.

Clients branch on `reason` and `code` (the official client raises `ApiException(status=409)`,
kopf retries 429/5xx but not 4xx, kubectl prints `message`), so every error the emulator
returns is built here, in one place, from the same constructors the real server uses
(k8s.io/apimachinery/pkg/api/errors: NewNotFound, NewAlreadyExists, NewConflict, NewInvalid...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One `details.causes[]` entry: which field is wrong and why."""

    reason: str
    message: str
    field: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"reason": self.reason, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass(frozen=True)
class ResourceRef:
    """Who the error is about: `details.{name, group, kind}`."""

    group: str = ""
    kind: str = ""
    name: str = ""


@dataclass(eq=False)
class ApiError(Exception):
    """An HTTP error carrying the Status body the real server would send.

    Not frozen: Python sets `__traceback__` on exceptions it re-raises (e.g. through
    context managers), which a frozen dataclass refuses.
    """

    code: int
    reason: str
    message: str
    ref: ResourceRef = field(default_factory=ResourceRef)
    causes: tuple[Cause, ...] = ()
    retry_after_seconds: int | None = None

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def to_status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details: dict[str, Any] = {}
        if self.ref.name:
            details["name"] = self.ref.name
        if self.ref.group:
            details["group"] = self.ref.group
        if self.ref.kind:
            details["kind"] = self.ref.kind
        if self.causes:
            details["causes"] = [c.to_json() for c in self.causes]
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        if details:
            body["details"] = details
        if not self.reason:
            del body["reason"]
        return body


def qualified(resource: str, group: str) -> str:
    """`nodes` or `remediations.remediation.gpuops.io`, as the real messages print it."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        ResourceRef(group, resource, name),
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        ResourceRef(group, resource, name),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        ResourceRef(group, resource, name),
    )


STALE_OBJECT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid; `message` joins the causes like field.ErrorList.ToAggregate()."""
    qualified_kind = f"{kind}.{group}" if group else kind
    if len(causes) == 1:
        summary = (
            f"{causes[0].field}: {causes[0].message}" if causes[0].field else causes[0].message
        )
    else:
        summary = "[" + ", ".join(f"{c.field}: {c.message}" for c in causes) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {summary}',
        ResourceRef(group, kind, name),
        tuple(causes),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - "
        f"accepted media types include: application/json-patch+json, "
        f"application/merge-patch+json, application/apply-patch+yaml ({content_type})",
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def forbidden(message: str, resource: str = "", group: str = "", name: str = "") -> ApiError:
    return ApiError(403, "Forbidden", message, ResourceRef(group, resource, name))
