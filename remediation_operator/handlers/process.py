"""The operator process: logs, metrics endpoints, API client, runtime and kopf, in one loop.

kopf runs in the main thread (`kopf.operator`, standalone: no kopf peering, since leadership
is our Lease) and installs the SIGINT/SIGTERM handlers; when it returns, the runtime stops
its workers and releases the Lease so a peer takes over at once instead of waiting for it to
expire.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import kopf

from remediation_operator.handlers import kopf_handlers
from remediation_operator.handlers.runtime import Runtime, Settings
from remediation_operator.k8s.client import Client, ConfigError
from remediation_operator.observability import endpoints, logs
from remediation_operator.observability.metrics import Metrics


@dataclass(frozen=True)
class Options:
    settings: Settings
    metrics_address: endpoints.Address
    log_format: str = "json"
    log_level: str = "info"
    kubeconfig: str | None = None


async def operate(options: Options, stop: asyncio.Event | None = None) -> None:
    log = logs.get("remediation_operator.process", identity=options.settings.identity)
    client = await Client.from_environment(options.kubeconfig)
    metrics = Metrics()
    runtime = Runtime(client, options.settings, metrics)
    registry = kopf_handlers.registry_for(runtime)
    try:
        async with endpoints.serve(options.metrics_address, metrics, runtime.ready) as served:
            log.info(
                "operator_started",
                metrics=served.url,
                namespace=options.settings.namespace,
                lease=options.settings.lease_name,
            )
            await kopf.operator(
                registry=registry,
                standalone=True,
                clusterwide=True,
                stop_flag=stop,
            )
    finally:
        await runtime.stop()
        await client.close()


def main(options: Options) -> int:
    logs.configure(options.log_format, options.log_level)
    try:
        asyncio.run(operate(options))
    except ConfigError as error:
        logs.get("remediation_operator.process").error("no_cluster_credentials", error=str(error))
        return 1
    return 0
