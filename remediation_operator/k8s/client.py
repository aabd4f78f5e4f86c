"""An asyncio Kubernetes API client that speaks plain JSON dicts.

Built on the official client's asyncio flavour (`kubernetes.aio`, shipped in kubernetes 37):
it loads KUBECONFIG or the in-cluster service account, handles TLS, tokens and exec plugins,
and pools connections over aiohttp. We use its request layer only and keep objects as the
dicts the API returns, because the engine reads nodes, pods and custom resources as dicts
and the generated model classes would only be converted back. Errors become one `ApiError`
carrying the HTTP status, the Status reason and any Retry-After the server sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
from kubernetes.aio import client as _aio_client
from kubernetes.aio import config as _aio_config

PatchKind = Literal["merge", "strategic", "json"]
_PATCH_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}

# The generated asyncio client is untyped; we use a handful of its calls through `Any`.
aio_client: Any = _aio_client
aio_config: Any = _aio_config


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


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


class Client:
    """One connection pool to one API server; every call returns or raises plain values."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration
        self._api: Any = aio_client.ApiClient(configuration)
        self._api.user_agent = "remediation-operator"

    @classmethod
    async def from_environment(cls, kubeconfig: str | None = None) -> Client:
        """KUBECONFIG (or `kubeconfig`, or ~/.kube/config) if present, else in-cluster."""
        configuration = aio_client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        default = Path.home() / ".kube" / "config"
        try:
            if path or default.exists():
                await aio_config.load_kube_config(
                    config_file=path or str(default),
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                aio_config.load_incluster_config(client_configuration=configuration)
        except (aio_config.ConfigException, OSError) as error:
            where = path or (str(default) if default.exists() else "the in-cluster service account")
            raise ConfigError(
                f"cannot load Kubernetes credentials from {where}: {error}"
            ) from error
        return cls(configuration)

    async def connection(self) -> Connection:
        c = self._configuration
        auth = await c.get_api_key_with_prefix("BearerToken", alias="authorization")
        token = auth.split(" ", 1)[1] if auth and " " in auth else auth
        return Connection(
            server=c.host,
            token=token,
            ca_path=c.ssl_ca_cert,
            insecure=not c.verify_ssl,
            certificate_path=c.cert_file,
            private_key_path=c.key_file,
        )

    async def close(self) -> None:
        await self._api.close()

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
        params: Sequence[tuple[str, str]] = [
            (k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()
        ]
        serialized = await self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(params) or None,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response: Any = await self._api.call_api(*serialized, _request_timeout=request_timeout)
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            # Unreachable or too slow: status 0, like client-go's transport errors.
            raise ApiError(0, "Unreachable", f"{method} {path}: {error!r}") from error
        try:
            data: Any = json.loads(raw) if raw else {}
        except ValueError:
            data = {"message": raw.decode("utf-8", "replace")[:500]}
        if not 200 <= response.status < 300:
            status = data if isinstance(data, dict) else {}
            raise ApiError(
                status=response.status,
                reason=str(status.get("reason") or response.reason or ""),
                message=str(status.get("message") or ""),
                retry_after=_retry_after(response.getheader("Retry-After")),
                body=status,
            )
        return data if isinstance(data, dict) else {"items": data}

    async def watch(
        self, path: str, *, timeout_seconds: int = 300, **query: str | int | bool
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events (`{"type", "object"}`) until the server ends the watch.

        An ERROR event (e.g. 410 Gone: the resourceVersion is too old) is raised as ApiError;
        the caller lists again and resumes from the new resourceVersion.
        """
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query.items()]
        params += [("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        serialized = await self._api.param_serialize(
            method="GET",
            resource_path=path,
            query_params=params,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response: Any = await self._api.call_api(
                *serialized, _request_timeout=timeout_seconds + 30
            )
            stream = response.response
            if not 200 <= stream.status < 300:
                raw = await stream.read()
                stream.release()
                raise ApiError(stream.status, str(stream.reason or ""), raw.decode()[:500])
            try:
                async for line in stream.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            int(status.get("code") or 500),
                            str(status.get("reason") or "Error"),
                            str(status.get("message") or ""),
                        )
                    yield event
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
