"""The HTTP endpoints kubelet and Prometheus poll: `/metrics`, `/healthz`, `/readyz`.

Liveness answers from the event loop itself, so a wedged loop fails the probe, and fails with
the reasons `problems` gives (a background task that stays down, a watch gone quiet:
handlers.supervision), so the kubelet restarts a process that cannot recover; readiness is a
callable the runtime owns (caches synced), and a non-leader replica is ready too, so a
rolling update never waits for leadership. A replica that cannot even read or write its
leader Lease (namespace missing, forbidden, API unreachable) is not ready, and `/readyz` says
why (`why_not`), so `kubectl describe pod` shows the reason next to the failing probe.

A port that cannot be bound is a `BindError` naming the address and the flag, which the
process reports as one log line before it exits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from remediation_operator.observability.metrics import Metrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """`HOST:PORT` (`:8080` means every interface); the error names the flag."""
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(
                f"--metrics-address: {text!r} is not HOST:PORT (for example 0.0.0.0:8080)"
            )
        return cls(host=host.strip("[]") or "0.0.0.0", port=int(port))


class BindError(OSError):
    """The metrics address cannot be served (port in use, address not on this host)."""


@dataclass(frozen=True)
class Served:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def application(
    metrics: Metrics,
    ready: Callable[[], bool],
    why_not: Callable[[], str | None] = lambda: None,
    problems: Callable[[], list[str]] = list,
) -> web.Application:
    async def metrics_view(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_: web.Request) -> web.Response:
        found = problems()
        if found:
            return web.Response(status=503, text="unhealthy: " + "; ".join(found) + "\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        problem = why_not()
        if problem is not None:
            return web.Response(status=503, text=f"not ready: {problem}\n")
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="caches not synced yet\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@asynccontextmanager
async def serve(
    address: Address,
    metrics: Metrics,
    ready: Callable[[], bool],
    why_not: Callable[[], str | None] = lambda: None,
    problems: Callable[[], list[str]] = list,
) -> AsyncIterator[Served]:
    """Serve the endpoints until the context exits; port 0 picks a free port."""
    runner = web.AppRunner(application(metrics, ready, why_not, problems), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, address.host, address.port)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise BindError(
            error.errno,
            f"cannot serve metrics on {address.host}:{address.port}: {error.strerror or error};"
            " pass --metrics-address with a free port",
        ) from error
    try:
        addresses = runner.addresses
        port = addresses[0][1] if addresses else address.port
        yield Served(host=address.host, port=int(port))
    finally:
        await runner.cleanup()
