"""The Kubernetes API as the node program needs it: its Node's labels and the pods on it.

Synchronous on the outside (the node program is a plain sequence of steps), the project's
own async client inside, on one event loop kept for the program's life. Credentials are the
pod's service account (in-cluster) or KUBECONFIG, as for the operator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from remediation_operator.k8s.client import Client, path
from remediation_operator.node.clients import PodSet

T = TypeVar("T")
_GONE = ("Succeeded", "Failed")


class KubeNodeApi:
    def __init__(self, kubeconfig: str | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._client: Client = self._run(Client.from_environment(kubeconfig))

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(call)

    def close(self) -> None:
        self._run(self._client.close())
        self._loop.close()

    def labels(self, node: str) -> dict[str, str]:
        body = self._run(self._client.get(path("v1", "nodes", node)))
        return dict((body.get("metadata") or {}).get("labels") or {})

    def set_labels(self, node: str, labels: Mapping[str, str | None]) -> None:
        patch = {"metadata": {"labels": dict(labels)}}
        self._run(self._client.patch(path("v1", "nodes", node), patch))

    def pods(self, node: str, pods: PodSet) -> list[str]:
        listed = self._run(
            self._client.get(
                path("v1", "pods", namespace=pods.namespace or None),
                fieldSelector=f"spec.nodeName={node}",
                labelSelector=pods.selector,
            )
        )
        return [
            f"{p['metadata'].get('namespace', '')}/{p['metadata']['name']}"
            for p in listed.get("items") or []
            if (p.get("status") or {}).get("phase") not in _GONE
        ]
