"""An asyncio Kubernetes API client that speaks plain JSON dicts.

A thin layer over aiohttp: `credentials` loads KUBECONFIG or the in-cluster service account
(tokens, client certificates, exec plugins), one pooled session sends the requests. Objects
stay the dicts the API returns, because the engine reads nodes, pods and custom resources as
dicts. Errors become one `ApiError` carrying the HTTP status, the Status reason and any
Retry-After the server sent. A 401 with a refreshable credential (token file, exec plugin)
gets the credential refreshed and the request sent once more, as client-go does.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

import aiohttp

from remediation_operator.k8s import credentials

PatchKind = Literal["merge", "strategic", "json"]
_PATCH_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
POOL_SIZE = 100
"""Concurrent connections to the API server (the official asyncio client's default)."""
MAX_WATCH_LINE = 32 * 1024 * 1024
"""The longest watch event (one JSON line) read; a longer one ends the watch as 410 Gone, so
the caller lists again. The API server stores objects up to etcd's request limit (1.5 MiB by
default) and its JSON escapes `<`, `>`, `&` and control characters as six bytes each, so an
event can be six times its object: 32 MiB covers that for objects up to 5 MiB. aiohttp's own
line reader stops at 128 KiB-2 MiB (`LineTooLong`, found by issue 24): not used here."""


class ApiError(Exception):
    """A non-2xx answer from the API server, with what the server said about it."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        retry_after: float | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body: Mapping[str, Any] = body or {}


class ConfigError(Exception):
    """No usable KUBECONFIG and not running in a cluster (or a broken kubeconfig)."""


@dataclass(frozen=True)
class Connection:
    """What a second HTTP stack (kopf's) needs to reach the same server as the same user."""

    server: str
    token: str | None = None
    ca_path: str | None = None
    insecure: bool = False
    certificate_path: str | None = None
    private_key_path: str | None = None
    expiration: datetime | None = None
    username: str | None = None
    password: str | None = None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):  # as the official client serialized them
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _params(query: Mapping[str, str | int | bool]) -> Sequence[tuple[str, str]]:
    return [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query.items()]


class Client:
    """One connection pool to one API server; every call returns or raises plain values."""

    def __init__(self, creds: credentials.Credentials) -> None:
        self._credentials = creds
        self._session: aiohttp.ClientSession | None = None
        self.observe: Callable[[str, str, int, float], None] = lambda *_: None
        """observe(verb, target, code, seconds) after each request (code 0: no answer)."""

    @classmethod
    async def from_environment(
        cls, kubeconfig: str | None = None, context: str | None = None
    ) -> Client:
        """KUBECONFIG (or `kubeconfig`, or ~/.kube/config) if present, else in-cluster;
        `context` picks a kubeconfig context other than its current-context."""
        try:
            creds, _ = credentials.load(kubeconfig, context)
            await creds.headers()  # a token file that cannot be read or a failing exec plugin
            await creds.ssl_context()  # a client certificate that does not load
        except credentials.CredentialsError as error:
            raise ConfigError(f"cannot load Kubernetes credentials: {error}") from error
        return cls(creds)

    async def connection(self) -> Connection:
        c = self._credentials
        secret = await c.source.current()
        return Connection(
            server=c.server,
            token=secret.token,
            ca_path=c.ca_path,
            insecure=c.insecure,
            certificate_path=secret.certificate_path,
            private_key_path=secret.private_key_path,
            expiration=secret.expires,
            username=c.basic[0] if c.basic and not secret.token else None,
            password=c.basic[1] if c.basic and not secret.token else None,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=POOL_SIZE),
                headers={"User-Agent": "remediation-operator"},
            )
        return self._session

    async def _send(
        self,
        method: str,
        path: str,
        params: Sequence[tuple[str, str]],
        headers: Mapping[str, str],
        data: bytes | None,
        seconds: float,
    ) -> aiohttp.ClientResponse:
        """Send once; on a 401 with a refreshable credential, refresh it and send again."""
        creds = self._credentials
        for attempt in range(2):
            try:
                auth = await creds.headers()
                context = await creds.ssl_context()
            except credentials.CredentialsError as error:
                raise ApiError(401, "CredentialsUnavailable", str(error)) from error
            response = await self._pool().request(
                method,
                creds.server + path,
                params=list(params) or None,
                headers={**headers, **auth},
                data=data,
                ssl=context if context is not None else True,
                server_hostname=creds.tls_server_name,
                timeout=aiohttp.ClientTimeout(total=seconds),
            )
            if response.status != 401 or attempt or not creds.source.refreshable:
                return response
            response.release()
            creds.source.invalidate()
        raise AssertionError("unreachable")  # the loop returns on its second pass

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float = 30.0,
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, default=_jsonable).encode()
        began = time.monotonic()
        try:
            response = await self._send(
                method, path, _params(query or {}), headers, data, request_timeout
            )
            async with response:
                raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            # Unreachable or too slow: status 0, like client-go's transport errors.
            self.observe(method, path, 0, time.monotonic() - began)
            raise ApiError(0, "Unreachable", f"{method} {path}: {error!r}") from error
        self.observe(method, path, int(response.status), time.monotonic() - began)
        try:
            data_: Any = json.loads(raw) if raw else {}
        except ValueError:
            data_ = {"message": raw.decode("utf-8", "replace")[:500]}
        if not 200 <= response.status < 300:
            status = data_ if isinstance(data_, dict) else {}
            raise ApiError(
                status=response.status,
                reason=str(status.get("reason") or response.reason or ""),
                message=str(status.get("message") or ""),
                retry_after=_retry_after(response.headers.get("Retry-After")),
                body=status,
            )
        return data_ if isinstance(data_, dict) else {"items": data_}

    async def watch(
        self, path: str, *, timeout_seconds: int = 300, **query: str | int | bool
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events (`{"type", "object"}`) until the server ends the watch.

        An ERROR event (e.g. 410 Gone: the resourceVersion is too old) is raised as ApiError;
        the caller lists again and resumes from the new resourceVersion.
        """
        async with self._watch_lines(path, timeout_seconds, query) as content:
            reader = _LineReader(content)
            while True:
                line = await reader.next_line()
                if line is None:
                    return
                event = _watch_event(line)
                if event is not None:
                    yield event

    async def watch_each(
        self,
        path: str,
        handle: Callable[[dict[str, Any]], None],
        *,
        timeout_seconds: int = 300,
        **query: str | int | bool,
    ) -> None:
        """`watch`, each event handed to `handle` as it is read, until the server ends the
        watch. No async generator stands between the socket and the handler: the Node watch
        runs this for every heartbeat of the fleet, and the generator's hand-over was a
        measurable part of its cost (docs/performance.md)."""
        async with self._watch_lines(path, timeout_seconds, query) as content:
            reader = _LineReader(content)
            while True:
                line = await reader.next_line()
                if line is None:
                    return
                event = _watch_event(line)
                if event is not None:
                    handle(event)

    @contextlib.asynccontextmanager
    async def _watch_lines(
        self, path: str, timeout_seconds: int, query: Mapping[str, str | int | bool]
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """The open watch stream's lines; transport errors, also while reading, as ApiError."""
        params = [*_params(query), ("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        began = time.monotonic()
        selectors = "&".join(
            f"{k}={v}" for k, v in sorted(query.items()) if "selector" in k.lower()
        )
        target = f"{path}?{selectors}" if selectors else path
        try:
            try:
                stream = await self._send(
                    "GET", path, params, {"Accept": "application/json"}, None, timeout_seconds + 30
                )
            except (aiohttp.ClientError, TimeoutError):
                self.observe("WATCH", target, 0, time.monotonic() - began)
                raise
            self.observe("WATCH", target, int(stream.status), time.monotonic() - began)
            if not 200 <= stream.status < 300:
                raw = await stream.read()
                stream.release()
                raise ApiError(stream.status, str(stream.reason or ""), raw.decode()[:500])
            try:
                yield stream.content
            finally:
                stream.release()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ApiError(0, "Unreachable", f"watch {path}: {error!r}") from error

    async def get(self, path: str, **query: str | int | bool) -> dict[str, Any]:
        return await self.request("GET", path, query=query)

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=dict(body))

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, body=dict(body))

    async def patch(self, path: str, body: Any, kind: PatchKind = "merge") -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=_PATCH_TYPES[kind])

    async def delete(
        self, path: str, body: Mapping[str, Any] | None = None, **query: str | int | bool
    ) -> dict[str, Any]:
        return await self.request("DELETE", path, query=query, body=dict(body or {}) or None)


class _LineReader:
    """The lines of a watch stream, without aiohttp's line limit (`MAX_WATCH_LINE` instead).

    Reads whatever the socket has (`readany`) and splits it; a line spread over many reads is
    kept as a list of pieces and joined once, so a megabyte-long event costs one copy."""

    def __init__(self, content: aiohttp.StreamReader, limit: int = MAX_WATCH_LINE) -> None:
        self._content = content
        self._limit = limit
        self._chunk = b""
        self._start = 0
        self._pending: list[bytes] = []
        self._pending_size = 0

    async def next_line(self) -> bytes | None:
        """The next line (without its newline); None at the end of the stream."""
        while True:
            index = self._chunk.find(b"\n", self._start)
            if index >= 0:
                piece = self._chunk[self._start : index]
                self._start = index + 1
                if not self._pending:
                    return piece
                self._pending.append(piece)
                line = b"".join(self._pending)
                self._pending, self._pending_size = [], 0
                return line
            rest = self._chunk[self._start :]
            if rest:
                self._pending.append(rest)
                self._pending_size += len(rest)
                if self._pending_size > self._limit:
                    raise ApiError(
                        410,
                        "WatchLineTooLong",
                        f"a watch event longer than {self._limit} bytes: listing again",
                    )
            self._chunk, self._start = await self._content.readany(), 0
            if not self._chunk:
                if not self._pending:
                    return None
                line = b"".join(self._pending)
                self._pending, self._pending_size = [], 0
                return line


def _watch_event(line: bytes) -> dict[str, Any] | None:
    """One line of a watch stream as its event; None for a blank line; an ERROR event (the
    server's Status, e.g. 410 Gone) raised as ApiError."""
    if not line or line.isspace():
        return None
    try:
        event = json.loads(line)
    except ValueError as error:  # a stream cut mid-line: resume from the last version seen
        raise ApiError(0, "MalformedWatchEvent", f"{len(line)} bytes: {error}") from error
    if not isinstance(event, dict):
        raise ApiError(0, "MalformedWatchEvent", f"not a watch event: {line[:100]!r}")
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise ApiError(
            int(status.get("code") or 500),
            str(status.get("reason") or "Error"),
            str(status.get("message") or ""),
        )
    return event


def path(
    group_version: str,
    plural: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection or object: `v1` is the core group under /api."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    parts = [base]
    if namespace is not None:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name is not None:
        parts.append(name)
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)
