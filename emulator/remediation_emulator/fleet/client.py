"""The fleet's HTTP client for any Kubernetes API server, built on one aiohttp session.

The fleet must generate the same traffic a real kubelet, agent or Karpenter would: JSON bodies,
patch content types chosen per call (merge, strategic merge, JSON patch), DeleteOptions with
preconditions, the Eviction subresource and chunked watch streams. It must not depend on the
official client (import-linter forbids it in the emulator), so this small client does exactly
that and nothing else. Transient answers (429 with Retry-After, 5xx, dropped connections) are
retried a few times with backoff, as client-go's rest client does for idempotent calls.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import aiohttp

from remediation_emulator.fleet.resources import Resource

Obj = dict[str, Any]

_TRANSIENT = frozenset({429, 500, 502, 503, 504})


class PatchType(StrEnum):
    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"


class ApiError(Exception):
    """A non-2xx answer; `reason` is the Status reason (NotFound, Conflict, TooManyRequests...)."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


@dataclass(frozen=True)
class Connection:
    """Where the API server is and how to authenticate to it."""

    server: str
    headers: Mapping[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None


class KubeClient:
    def __init__(
        self,
        connection: Connection,
        *,
        concurrency: int = 32,
        retries: int = 5,
        retry_base: float = 0.05,
    ) -> None:
        self._connection = connection
        self._server = connection.server.rstrip("/")
        self._limit = asyncio.Semaphore(concurrency)
        self._retries = retries
        self._retry_base = retry_base
        self._session: aiohttp.ClientSession | None = None

    @property
    def connection(self) -> Connection:
        """Where this client talks to, and as whom (what a process started for the fleet
        needs to talk there too)."""
        return self._connection

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # limit=0: watches hold connections for minutes; the semaphore bounds the rest.
            connector = aiohttp.TCPConnector(limit=0, ssl=self._connection.ssl_context or False)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"Accept": "application/json", **self._connection.headers},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One call, retried on transient failures; raises ApiError on any other non-2xx."""
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = {"Content-Type": content_type} if data is not None else {}
        attempt = 0
        while True:
            attempt += 1
            try:
                async with (
                    self._limit,
                    self.session.request(
                        method, self._server + path, params=params, data=data, headers=headers
                    ) as response,
                ):
                    text = await response.text()
                    if response.status < 300:
                        result: Obj = json.loads(text) if text else {}
                        return result
                    error = _error(response.status, text)
                    retry_after = response.headers.get("Retry-After")
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                if attempt > self._retries:
                    raise ApiError(0, "ConnectionError", str(exc) or type(exc).__name__) from exc
                await asyncio.sleep(self._retry_base * 2 ** (attempt - 1))
                continue
            if error.status not in _TRANSIENT or attempt > self._retries:
                raise error
            delay = self._retry_base * 2 ** (attempt - 1)
            if retry_after and retry_after.isdigit():
                delay = max(delay, min(float(retry_after), 5.0))
            await asyncio.sleep(delay)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self.request("GET", resource.path(name, namespace=namespace))

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
    ) -> Obj:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if continue_:
            params["continue"] = continue_
        return await self.request("GET", resource.path(namespace=namespace), params=params)

    async def create(
        self,
        resource: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str = "",
    ) -> Obj:
        """POST an object, or (with name and subresource) a subresource such as `eviction`."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        return await self.request("POST", path, body=body)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        subresource: str = "",
        patch_type: PatchType = PatchType.MERGE,
    ) -> Obj:
        path = resource.path(name, namespace=namespace, subresource=subresource)
        return await self.request("PATCH", path, body=body, content_type=patch_type)

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> Obj:
        """DELETE with DeleteOptions; `uid` is a precondition (deletes only that incarnation)."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", resource.path(name, namespace=namespace), body=options)

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
        bookmarks: bool = True,
    ) -> AsyncIterator[Obj]:
        """Watch events ({type, object}) from `resource_version` until the server ends the
        stream. A non-2xx answer (410 Gone included) raises ApiError; an ERROR event is yielded
        for the caller to interpret, as client-go does."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)
        async with self.session.get(
            self._server + resource.path(namespace=namespace), params=params, timeout=timeout
        ) as response:
            if response.status >= 300:
                raise _error(response.status, await response.text())
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event: Obj = json.loads(line)
                        yield event
            if buffer.strip():
                yield json.loads(buffer)


def _error(status: int, text: str) -> ApiError:
    try:
        body = json.loads(text)
    except ValueError:
        return ApiError(status, "Unknown", text[:200])
    if not isinstance(body, dict):
        return ApiError(status, "Unknown", text[:200])
    return ApiError(status, str(body.get("reason", "")), str(body.get("message", "")), body)
