"""The floor of the operator benchmark: the least a watcher can do to cordon a faulty node.

It uses the same client library as the operator (the official client's `kubernetes.aio`)
but no framework and no decision logic: list Nodes once, watch them from that
resourceVersion reading raw lines (no model deserialisation, the cheapest way the library
offers), and patch `spec.unschedulable` when the GPU condition turns False with an XID
reason. Any real operator does at least this much per event, so its latency and CPU per
event are reported as ratios to this process's.

Run: python bench/floor_watcher.py KUBECONFIG (until killed).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

from kubernetes.aio import client, config

CONDITION = "AcceleratedHardwareReady"
REASONS = re.compile(r"NvidiaXID(48|62|64|79)Error|NvidiaDoubleBitError|DCGMError")


def faulty(node: dict[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return any(
        c.get("type") == CONDITION
        and c.get("status") == "False"
        and REASONS.fullmatch(str(c.get("reason") or ""))
        for c in (node.get("status") or {}).get("conditions") or []
    )


async def watch(kubeconfig: str) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)
        listed = await core.list_node_without_preload_content()
        body = json.loads(await listed.read())
        version = body["metadata"]["resourceVersion"]
        for node in body["items"]:
            if faulty(node):
                await cordon(core, node["metadata"]["name"])
        print("floor ready", flush=True)
        while True:
            response = await core.list_node_without_preload_content(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=300,
                _request_timeout=330,
            )
            async for line in response.content:
                event = json.loads(line)
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] == "MODIFIED" and faulty(obj):
                    await cordon(core, obj["metadata"]["name"])
            response.release()


async def cordon(core: Any, name: str) -> None:
    response = await core.patch_node_without_preload_content(
        name, {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json"
    )
    await response.read()
    response.release()


if __name__ == "__main__":
    asyncio.run(watch(sys.argv[1]))
