"""The operator process: logs, metrics endpoints, API client, runtime and kopf, in one loop.

kopf runs in the main thread (`kopf.operator`, standalone: no kopf peering, since leadership
is our Lease) and installs the SIGINT/SIGTERM handlers; when it returns, the runtime stops
its workers and releases the Lease so a peer takes over at once instead of waiting for it to
expire.

Start-up says what is wrong. What makes running pointless (no usable kubeconfig, an API server
that does not answer for `API_WAIT`, credentials it rejects, a metrics port that cannot be
bound) ends the process with ONE JSON log line naming the problem and exit code 1, never a
traceback; anything unexpected also ends as one line (the trace inside it, as a field). What
may heal while running (the Lease's namespace missing, RBAC forbidding the Lease, the API
going away) is reported by the elector as it happens: an error log line, `/readyz` failing
with the reason, and `gpuops_remediation_leader_election_errors_total{reason}`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta

import kopf

from remediation_operator.api import input_limits
from remediation_operator.handlers import heap, kopf_handlers
from remediation_operator.handlers.runtime import Runtime, Settings
from remediation_operator.k8s import leader
from remediation_operator.k8s.client import ApiError, Client, ConfigError
from remediation_operator.observability import endpoints, logs
from remediation_operator.observability.metrics import Metrics

API_WAIT = timedelta(seconds=10)
"""How long start-up waits for an unreachable API server before giving up (the kubelet then
restarts the container with back-off, as it does for controller-runtime managers)."""


@dataclass(frozen=True)
class Options:
    settings: Settings
    metrics_address: endpoints.Address
    log_format: str = "json"
    log_level: str = "info"
    kubeconfig: str | None = None
    context: str | None = None
    api_wait: timedelta = API_WAIT


class StartupError(Exception):
    """A problem that makes running pointless: `event` is the log line's name."""

    def __init__(self, event: str, message: str) -> None:
        super().__init__(message)
        self.event = event
        self.message = message


async def reach_api(client: Client, within: timedelta, log: object = None) -> None:
    """Return once the API server answers `GET /version`; StartupError if it never does
    within `within`, or if it rejects our credentials."""
    server = (await client.connection()).server
    deadline = time.monotonic() + within.total_seconds()
    while True:
        try:
            await client.request("GET", "/version", request_timeout=5.0)
            return
        except ApiError as error:
            if error.status == 401:
                raise StartupError(
                    "api_credentials_rejected",
                    f"the API server at {server} rejected the credentials (401): check the"
                    " kubeconfig's user or the ServiceAccount token",
                ) from error
            if error.status != 0:
                return  # it answered: reachable, whatever it thinks of /version
            if time.monotonic() >= deadline:
                raise StartupError(
                    "api_unreachable",
                    f"cannot reach the API server at {server} for"
                    f" {within.total_seconds():g}s ({error.message}): check the kubeconfig's"
                    " server address and that the API server is up",
                ) from error
        await asyncio.sleep(1.0)


async def operate(options: Options, stop: asyncio.Event | None = None) -> None:
    log = logs.get("remediation_operator.process", identity=options.settings.identity)
    try:
        client = await Client.from_environment(options.kubeconfig, options.context)
    except ConfigError as error:
        raise StartupError("no_cluster_credentials", str(error)) from error
    try:
        await reach_api(client, options.api_wait)
        metrics = Metrics()
        runtime = Runtime(client, options.settings, metrics)
        runtime.on_synced = lambda: heap.settle(log)
        elector = runtime.elector
        metrics.leader_election_errors(
            lambda: elector.errors, reasons=[str(r) for r in leader.LeaseProblem]
        )

        def why_not() -> str | None:
            return elector.problem.message if elector.problem is not None else None

        registry = kopf_handlers.registry_for(runtime)
        started = False  # nothing to stop (nor to log as stopped) if the port was taken
        try:
            async with endpoints.serve(
                options.metrics_address, metrics, runtime.ready, why_not, runtime.problems
            ) as served:
                started = True
                log.info(
                    "operator_started",
                    metrics=served.url,
                    namespace=options.settings.namespace,
                    lease=options.settings.lease_name,
                )
                # Namespaced to the executor namespace: the only namespaced resource kopf
                # watches is our executor Jobs, so Jobs are read there and nowhere else (D45).
                # The policies and Remediations are cluster-scoped and watched cluster-wide
                # all the same; kopf lists and watches Namespaces to know when it appears.
                await kopf.operator(
                    registry=registry,
                    standalone=True,
                    namespaces=[options.settings.executor_namespace or options.settings.namespace],
                    stop_flag=stop,
                )
        except endpoints.BindError as error:
            raise StartupError("metrics_address_unavailable", str(error)) from error
        finally:
            if started:
                await runtime.stop()
    finally:
        await client.close()


def main(options: Options) -> int:
    logs.configure(options.log_format, options.log_level)
    input_limits.allow_deep_documents()  # kopf reads and copies every policy, however deep
    log = logs.get("remediation_operator.process", identity=options.settings.identity)
    try:
        asyncio.run(operate(options))
    except StartupError as error:
        log.error(error.event, error=error.message)
        return 1
    except Exception as error:  # never a raw traceback: one line, the trace as its field
        log.exception("operator_failed", error=f"{type(error).__name__}: {error}")
        return 1
    return 0
