"""The kopf side: watch RemediationPolicies, Remediations and Jobs; hand events over.

Nodes are not watched through kopf but by `node_watch` (kopf's per-event work dominated the
operator's CPU at 10,000 nodes; docs/performance.md).

Handlers are `on.event` only: kopf then writes nothing to the watched objects (no finalizers,
no progress annotations; see shared/reference/tooling.md "kopf behaviours that bite": timers
or daemons on Nodes would put a finalizer on every Node). Each registry is created here and
passed explicitly, so two operators in one process (tests) never share handlers.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from remediation_operator.handlers.runtime import Runtime
from remediation_operator.k8s import names


def registry_for(runtime: Runtime) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        # The same server and user as our own client (KUBECONFIG or in-cluster), read now:
        # `import kopf` may have happened before KUBECONFIG was set (tooling.md item 3).
        connection = await runtime.client.connection()
        return kopf.ConnectionInfo(
            server=connection.server,
            token=connection.token,
            scheme="Bearer" if connection.token else None,
            ca_path=connection.ca_path,
            insecure=connection.insecure,
            certificate_path=connection.certificate_path,
            private_key_path=connection.private_key_path,
            username=connection.username,
            password=connection.password,
            expiration=connection.expiration,  # an exec plugin's token: kopf logs in again
            default_namespace=runtime.settings.namespace,
        )

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # we post our own, deduplicated Events
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 30
        await runtime.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        # Before kopf's final sweep cancels every task still running: stop ours in order and
        # release the Lease so a peer takes over at once.
        await runtime.stop()

    @kopf.on.event(names.GROUP, names.VERSION, names.POLICIES, registry=registry)
    async def policy(event: kopf.RawEvent, **_: Any) -> None:
        runtime.policy_event(event["type"], event["object"])

    @kopf.on.event(names.GROUP, names.VERSION, names.REMEDIATIONS, registry=registry)
    async def remediation(event: kopf.RawEvent, **_: Any) -> None:
        runtime.remediation_event(event["type"], event["object"])

    @kopf.on.event(  # only our executor Jobs; their completion ends a step
        "batch", "v1", "jobs", labels={names.MANAGED_BY: names.MANAGER}, registry=registry
    )
    async def job(event: kopf.RawEvent, **_: Any) -> None:
        runtime.job_event(event["type"], event["object"])

    return registry
