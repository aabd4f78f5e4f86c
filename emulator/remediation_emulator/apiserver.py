"""Start the Kubernetes API emulator: `async with apiserver.serve() as api` or `run_in_thread()`.

This is the one entry point tests, the fleet and the `sandbox` command use:

    async with apiserver.serve(host="127.0.0.1", port=0) as api:
        api.url                        # "http://127.0.0.1:PORT"
        api.write_kubeconfig(path)     # for kubectl, kopf and the official client
        api.request_log                # what was asked, as RBAC sees it, with response codes
        api.faults                     # injected errors / delays / dropped watches
        api.store                      # in-process fixtures with the same semantics

`run_in_thread()` runs the same server on its own event loop in a daemon thread for
synchronous tests (official client, subprocesses such as kubectl).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from remediation_emulator import kubeconfig
from remediation_emulator.app import ApiApp
from remediation_emulator.eviction import Disruption
from remediation_emulator.faults import Faults
from remediation_emulator.fixtures import StoreAccess
from remediation_emulator.rbac import Authorizer
from remediation_emulator.requestlog import RequestLog
from remediation_emulator.store import Store, system_clock


@dataclass
class ApiServer:
    """A running emulator."""

    url: str
    store: StoreAccess
    request_log: RequestLog
    faults: Faults
    authorizer: Authorizer | None

    def write_kubeconfig(self, path: str | os.PathLike[str], *, user: str = "admin") -> Path:
        """Write a kubeconfig for this server; `user` is what the request log records.

        With RBAC enforced, name a ServiceAccount as "system:serviceaccount:NS:NAME".
        """
        return kubeconfig.write(path, self.url, user)

    def token(self, user: str = "admin") -> str:
        """The bearer token that authenticates as `user` (for hand-made HTTP clients)."""
        return kubeconfig.token_for(user)


@asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    bookmark_interval: float = 60.0,
    history_size: int = 20_000,
    log_size: int = 100_000,
    rbac: bool = False,
    fault_seed: int = 0,
    clock: Callable[[], datetime] = system_clock,
) -> AsyncIterator[ApiServer]:
    """Serve the emulator until the block exits (port 0 picks a free port).

    bookmark_interval: seconds between BOOKMARK events on watches that allow them (the real
    server sends about one a minute). history_size: watch events kept per resource for
    resuming. rbac: enforce (Cluster)Roles for every user except "admin".
    """
    store = Store(clock=clock, history_size=history_size)
    disruption = Disruption(store)
    request_log = RequestLog(log_size)
    fault_rules = Faults(fault_seed)
    authorizer = Authorizer(store) if rbac else None
    api_app = ApiApp(
        store,
        disruption,
        request_log,
        fault_rules,
        bookmark_interval=bookmark_interval,
        authorizer=authorizer,
        clock=clock,
    )
    runner = web.AppRunner(
        api_app.build(), access_log=None, handle_signals=False, shutdown_timeout=1.0
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    assert server is not None
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    url_host = f"[{host}]" if ":" in host else host
    api_app.server_address = f"{host}:{bound}"
    try:
        yield ApiServer(
            url=f"http://{url_host}:{bound}",
            store=StoreAccess(store, disruption),
            request_log=request_log,
            faults=fault_rules,
            authorizer=authorizer,
        )
    finally:
        for resource in [t for t in store.types()]:
            with suppress(Exception):
                store.drop_watches(resource)
        await runner.cleanup()


class _OnLoop:
    """Calls an object's methods on the server's loop thread and waits for the result."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def run() -> None:
                try:
                    future.set_result(attribute(*args, **kwargs))
                except BaseException as exc:
                    future.set_exception(exc)

            self._loop.call_soon_threadsafe(run)
            return future.result(timeout=30)

        return call


class ThreadedApiServer:
    """The emulator on its own loop in a daemon thread; `stop()` shuts it down."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._api: ApiServer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="api-emulator", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._error is not None:
            raise self._error
        if self._api is None:
            raise RuntimeError("the API emulator did not start within 30 s")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(**self._options) as api:
            self._api = api
            self._ready.set()
            await self._stop.wait()

    @property
    def api(self) -> ApiServer:
        assert self._api is not None
        return self._api

    @property
    def url(self) -> str:
        return self.api.url

    @property
    def store(self) -> Any:
        """`api.store`, each call run on the server's loop (thread-safe)."""
        assert self._loop is not None
        return _OnLoop(self.api.store, self._loop)

    @property
    def request_log(self) -> RequestLog:
        return self.api.request_log

    @property
    def faults(self) -> Any:
        assert self._loop is not None
        return _OnLoop(self.api.faults, self._loop)

    def write_kubeconfig(self, path: str | os.PathLike[str], *, user: str = "admin") -> Path:
        return self.api.write_kubeconfig(path, user=user)

    def token(self, user: str = "admin") -> str:
        return self.api.token(user)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)


def run_in_thread(**options: Any) -> ThreadedApiServer:
    """Start the emulator in a daemon thread (same options as `serve`)."""
    return ThreadedApiServer(**options)
