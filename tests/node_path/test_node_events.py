"""Which policy workers a Node event wakes: only the policies that select the node (or did).

Real: `handlers.runtime.Runtime.node_event` with its real NodeCache; the client is built but
never called (nothing here reaches an API server). Faked: the policy workers, by a
hand-written recorder of what they were asked to plan.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from remediation_operator.domain.policy import Policy
from remediation_operator.domain.selectors import LabelSelector
from remediation_operator.handlers.runtime import Runtime, Settings
from remediation_operator.handlers.workers import PolicyWorker
from remediation_operator.k8s import credentials, leader
from remediation_operator.k8s.client import Client
from remediation_operator.observability.metrics import Metrics


@dataclass
class Worker:
    policy: Policy | None
    touched: list[str] = field(default_factory=list)

    def touch(self, nodes: Collection[str]) -> None:
        self.touched.extend(nodes)


def node(name: str, pool: str, *, faulty: bool = False) -> dict[str, Any]:
    status = "False" if faulty else "True"
    return {
        "metadata": {"name": name, "labels": {"pool": pool}, "resourceVersion": "1"},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {
                    "type": "AcceleratedHardwareReady",
                    "status": status,
                    "reason": "NvidiaXID79Error",
                },
            ]
        },
    }


def unused_credentials() -> credentials.Credentials:
    """A client that is never used: these tests feed events straight to the runtime."""
    return credentials.Credentials(
        "http://unused.invalid", credentials.StaticSource(credentials.Secret())
    )


def runtime_with(workers: dict[str, Worker]) -> Runtime:
    settings = Settings("ops", "lock", "me", leader.Timings(), timedelta(days=1), {})
    runtime = Runtime(Client(unused_credentials()), settings, Metrics())
    runtime.workers = cast(dict[str, PolicyWorker], workers)
    runtime.nodes.watched = frozenset({"AcceleratedHardwareReady"})
    runtime.synced = True
    return runtime


def pool_policy(name: str, pool: str) -> Policy:
    return Policy(name=name, faults=(), node_selector=LabelSelector({"pool": pool}))


async def test_a_fault_wakes_only_the_policies_that_select_the_node() -> None:
    a, b = Worker(pool_policy("a", "a")), Worker(pool_policy("b", "b"))
    everything, invalid = Worker(Policy(name="all", faults=())), Worker(None)
    runtime = runtime_with({"a": a, "b": b, "all": everything, "invalid": invalid})
    runtime.node_event("ADDED", node("n1", "a"))
    runtime.node_event("ADDED", node("n2", "b"))
    for worker in (a, b, everything, invalid):
        worker.touched.clear()

    runtime.node_event("MODIFIED", node("n1", "a", faulty=True))

    assert a.touched == ["n1"]
    assert b.touched == [], "a policy for another pool is not woken"
    assert everything.touched == ["n1"]
    assert invalid.touched == ["n1"], "a policy not yet known is woken, to be safe"


async def test_a_node_leaving_a_policys_selection_still_wakes_it() -> None:
    a, b = Worker(pool_policy("a", "a")), Worker(pool_policy("b", "b"))
    runtime = runtime_with({"a": a, "b": b})
    runtime.node_event("ADDED", node("n1", "a", faulty=True))
    a.touched.clear()

    runtime.node_event("MODIFIED", node("n1", "b", faulty=True))

    assert a.touched == ["n1"], "its Remediation on the node must close"
    assert b.touched == ["n1"]

    runtime.node_event("DELETED", node("n1", "b"))
    assert a.touched == ["n1", "n1"], "a deleted node wakes every policy"
