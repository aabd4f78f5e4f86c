"""The engine's ClusterPort over the Kubernetes API (`k8s/`), errors translated.

`k8s/` may not import the engine (it is a lower layer), so this thin adapter in the runtime
layer joins the two: each method calls one `k8s` operation and converts its result into the
engine's values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from remediation_operator.domain.effects import EVERY_POD, DrainPlan
from remediation_operator.domain.fleet import NodePod, Progress
from remediation_operator.domain.policy import (
    Action,
    ActionExecutor,
    ReplaceProvider,
    RestartTarget,
)
from remediation_operator.engine.ports import (
    DrainStatus,
    ExecutorStatus,
    Refused,
    Transient,
)
from remediation_operator.handlers.port_errors import mapped
from remediation_operator.k8s import node_pods, nodes, replace
from remediation_operator.k8s.client import Client
from remediation_operator.k8s.drain import Drained, Drainer
from remediation_operator.k8s.executors import Executors


def _drain_status(drained: Drained) -> DrainStatus:
    return DrainStatus(
        remaining=drained.remaining,
        blocked_by_pdb=drained.blocked_by_pdb,
        attempted=drained.attempted,
        message=drained.message,
        pdbs=drained.pdbs,
        blocked_pods=drained.blocked_pods,
    )


class KubernetesCluster:
    def __init__(
        self,
        client: Client,
        namespace: str,
        templates: Mapping[Action, Mapping[str, Any]] | None = None,
        node_body: Callable[[str], Mapping[str, Any] | None] = lambda _: None,
        on_cordoned: Callable[[str, str], None] = lambda node, policy: None,
    ) -> None:
        """node_body: the watched copy of a Node, if any (a cordon then skips its read).
        on_cordoned(node, policy): called the moment a cordon is written (reaction time)."""
        self._client = client
        self._node_body = node_body
        self._on_cordoned = on_cordoned
        self._drainer = Drainer(client)
        self._executors = Executors(client, namespace, templates)

    async def drain_status(self, node: str, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        async with mapped():
            await nodes.read(self._client, node)  # NotFound when the node is gone
            return _drain_status(await self._drainer.status(node, plan))

    async def executor_status(
        self, node: str, remediation: str, action: Action, attempt: int, executor: ActionExecutor
    ) -> ExecutorStatus:
        async with mapped():
            status = await self._executors.status(node, remediation, action, attempt, executor)
        return ExecutorStatus(
            status.progress, status.message, status.permanent, status.not_run, status.started
        )

    async def replacement_status(self, node: str, provider: ReplaceProvider) -> Progress:
        try:
            async with mapped():
                return await replace.status(self._client, node, provider)
        except replace.NoNodeClaim as error:
            raise Refused(str(error)) from error

    async def node_pods(self, node: str, targets: Sequence[RestartTarget]) -> Sequence[NodePod]:
        async with mapped():
            await nodes.read(self._client, node)  # NotFound when the node is gone
            return await node_pods.list_pods(self._client, node, targets)

    async def restart_node_pods(
        self, node: str, targets: Sequence[RestartTarget], created_before: datetime
    ) -> None:
        async with mapped():
            await nodes.read(self._client, node)
            await node_pods.restart(self._client, node, targets, created_before)

    async def cordon(self, node: str, fault: str, policy: str) -> None:
        async with mapped():
            await nodes.cordon(self._client, node, fault, policy, self._node_body(node))
        self._on_cordoned(node, policy)

    async def release(self, node: str, uncordon: bool) -> None:
        async with mapped():
            await nodes.release(self._client, node, uncordon)

    async def protect_from_consolidation(self, node: str, on: bool) -> None:
        async with mapped():
            await nodes.protect_from_consolidation(self._client, node, on)

    async def evict(self, node: str, force: bool, plan: DrainPlan = EVERY_POD) -> DrainStatus:
        async with mapped():
            return _drain_status(await self._drainer.evict(node, force, plan))

    async def run_executor(
        self, node: str, remediation: str, action: Action, attempt: int, executor: ActionExecutor
    ) -> None:
        async with mapped():
            status = await self._executors.start(node, remediation, action, attempt, executor)
        if status.progress is Progress.Failed:
            # A template problem: the next observation of this attempt reports it (Absent
            # until fixed), and the Transient makes the engine log it and wake up again.
            raise Transient(status.message)

    async def replace(self, node: str, provider: ReplaceProvider) -> None:
        try:
            async with mapped():
                await replace.replace(self._client, node, provider)
        except replace.NoNodeClaim as error:
            raise Refused(str(error)) from error
