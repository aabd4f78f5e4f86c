"""Translate API failures into the engine's three port errors, in one place.

The engine only knows NotFound, Conflict and Transient (see `engine.ports`); the Kubernetes
adapter (`k8s/`) raises `ApiError` with the HTTP status. The mapping follows client-go's
retry rules: 404 and 410 are gone, 409 is a lost race, 429, 5xx and unreachable are worth
retrying (honouring Retry-After); any other 4xx is our bug (bad request, forbidden) and is
raised unchanged so it is logged loudly rather than retried forever.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from remediation_operator.engine.ports import Conflict, NotFound, Transient
from remediation_operator.k8s.client import ApiError

DEFAULT_RETRY = timedelta(seconds=2)


def translate(error: ApiError) -> Exception:
    if error.status in (404, 410):
        return NotFound(str(error))
    if error.status == 409:
        return Conflict(str(error))
    if error.status == 0 or error.status == 429 or error.status >= 500:
        hint = timedelta(seconds=error.retry_after) if error.retry_after else DEFAULT_RETRY
        return Transient(str(error), retry_after=hint)
    return error


@asynccontextmanager
async def mapped() -> AsyncIterator[None]:
    try:
        yield
    except ApiError as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
