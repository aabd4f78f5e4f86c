"""A hostile cluster, fuzzed (issue 24, item 7): deterministic in CI like the other property
tests (tests/conftest.py's "ci" profile), `HYPOTHESIS_PROFILE=random` draws fresh examples.

Watch path: the real Node watch (`NodeWatch` under the process's `Supervisor`, feeding the
real `Runtime.node_event` and node cache) reads a stream of hostile watch lines (events up
to 3 MiB, cut and garbled lines, events that are not objects, Nodes of every odd shape, 410s)
and then a fault on a well-formed selected node. Asserted: every end of the watch task is
logged and counted (none unnoticed), the watch is up at the end, the fault is in the cache
and the planner cordons it.

Reconcile path: the real engine over the in-memory cluster (manual clock) with executors
failing with hostile messages and drains blocked by many pods with long names. Asserted:
every Remediation written stays under `bounds.REMEDIATION_BYTES`, every Event message and
step record under its bound.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remediation_operator.api import policy_parsing
from remediation_operator.api.remediation_status import to_status
from remediation_operator.domain import bounds, planner
from remediation_operator.domain.effects import Cordon
from remediation_operator.domain.fleet import Progress, Snapshot
from remediation_operator.domain.policy import Action, ConditionMatch, Fault, Policy, Step
from remediation_operator.handlers.runtime import Runtime, Settings
from remediation_operator.k8s import client as k8s_client
from remediation_operator.k8s import leader
from remediation_operator.observability.metrics import Metrics
from remediation_operator.sim.memory_cluster import MemoryCluster
from tests.engine.conftest import Clock, Harness
from tests.integration.conftest import cordon_only, policy
from tests.reliability.test_hostile_nodes import nodes as odd_nodes

TYPE = "AcceleratedHardwareReady"
POLICY = policy_parsing.parse_policy(policy(faults=cordon_only()))
NOW = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
STAMP = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
BIG = 3 * 1024 * 1024


def good_node(name: str, faulty: bool) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1000000",
            "labels": {"nvidia.com/gpu.present": "true"},
            "creationTimestamp": "2026-11-01T00:00:00Z",
        },
        "status": {
            "conditions": [
                {
                    "type": TYPE,
                    "status": "False" if faulty else "True",
                    "reason": "NvidiaXID62Error" if faulty else "AcceleratedHardwareIsReady",
                    "lastHeartbeatTime": STAMP,
                    "lastTransitionTime": STAMP,
                },
                {"type": "Ready", "status": "True", "lastHeartbeatTime": STAMP},
            ]
        },
    }


def event(kind: str, body: Any) -> bytes:
    return json.dumps({"type": kind, "object": body}).encode()


def huge_node(name: str, size: int, selected: bool) -> dict[str, Any]:
    body = good_node(name, faulty=False)
    body["metadata"]["labels"] = {"nvidia.com/gpu.present": "true"} if selected else {}
    body["status"]["conditions"][0]["message"] = "<&>" * (size // 3)  # escaped 6x in JSON
    return body


hostile_lines = st.one_of(
    st.builds(event, st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), odd_nodes),
    st.builds(
        lambda n, s, sel: event("MODIFIED", huge_node(f"big-{n}", s, sel)),
        st.integers(0, 3),
        st.sampled_from([200_000, 1_000_000, BIG // 6]),
        st.booleans(),
    ),
    st.sampled_from(
        [
            b'{"type": "MODIFIED", "object": {"metadata": {"name": "cut"',  # cut mid-line
            b"[1, 2, 3]",
            b'{"type": "MODIFIED", "object": "a string"}',
            b'{"type": "MODIFIED", "object": {"metadata": "not a mapping"}}',
            b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}',
            b'{"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}',
            b'{"type": "ERROR", "object": {"code": 500}}',
            b"\xff\xfe not utf-8",
            b"",
            b" ",
            b"null",
        ]
    ),
)


class ScriptedApi:
    """The API server as the Node watch sees it: a list with the good nodes, then one watch
    stream per script (hostile lines, then the fault), then quiet streams."""

    def __init__(self, scripts: list[list[bytes]], nodes: list[dict[str, Any]]) -> None:
        self.scripts = scripts
        self.nodes = nodes
        self.observe: Callable[..., None] = lambda *_: None
        self.quiet = asyncio.Event()

    async def get(self, path: str, **query: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "1"}, "items": self.nodes}

    async def watch_each(
        self, path: str, handle: Callable[[dict[str, Any]], None], **query: Any
    ) -> None:
        if not self.scripts:
            await self.quiet.wait()  # an idle stream
            return
        stream = b"\n".join(self.scripts.pop(0)) + b"\n"
        reader = k8s_client._LineReader(Chunks(stream))  # type: ignore[arg-type]
        while (line := await reader.next_line()) is not None:
            found = k8s_client._watch_event(line)
            if found is not None:
                handle(found)


class Chunks:
    def __init__(self, data: bytes, size: int = 65_536) -> None:
        self.parts = [data[i : i + size] for i in range(0, len(data), size)]

    async def readany(self) -> bytes:
        return self.parts.pop(0) if self.parts else b""


class Log:
    def __init__(self) -> None:
        self.failed: list[Mapping[str, Any]] = []

    def error(self, event: str, **fields: Any) -> None:
        if event == "task_failed":
            self.failed.append(fields)

    def __getattr__(self, _: str) -> Callable[..., None]:
        return lambda *_, **__: None


def runtime_for(api: ScriptedApi) -> Runtime:
    settings_ = Settings(
        namespace="remediation-system",
        lease_name="lease",
        identity="fuzz",
        timings=leader.Timings(),
        retention=timedelta(days=30),
        job_templates={},
    )
    runtime = Runtime(api, settings_, Metrics())  # type: ignore[arg-type]
    runtime.nodes.watched = frozenset({TYPE})
    return runtime


async def instant(_: float) -> None:
    await asyncio.sleep(0)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.lists(hostile_lines, max_size=6), min_size=1, max_size=4))
def test_the_node_watch_survives_hostile_streams_and_still_sees_the_fault(
    streams: list[list[bytes]],
) -> None:
    asyncio.run(_watch(streams))


async def _watch(streams: list[list[bytes]]) -> None:
    faulty = event("MODIFIED", good_node("gpu-good", faulty=True))
    api = ScriptedApi([*streams, [faulty]], [good_node("gpu-good", faulty=False)])
    runtime = runtime_for(api)
    log = Log()
    supervisor = runtime.supervisor
    supervisor._log, supervisor._sleep = log, instant  # instant backoff; failures recorded

    def fault_seen() -> bool:
        view = runtime.nodes.views.get("gpu-good")
        condition = view.condition(TYPE) if view is not None else None
        return condition is not None and condition.status == "False"

    seen = asyncio.Event()
    deliver = runtime.node_watch._on_event

    def on_event(kind: str | None, body: Mapping[str, Any]) -> None:
        deliver(kind, body)
        if fault_seen() and not api.scripts:
            seen.set()

    runtime.node_watch._on_event = on_event
    supervisor.spawn("node-watch", runtime.node_watch.run)
    try:
        await asyncio.wait_for(seen.wait(), timeout=20)
        assert supervisor.running("node-watch")
        restarts = runtime.metrics.render().decode()
        counted = next(
            float(line.rsplit(" ", 1)[1])
            for line in restarts.splitlines()
            if line.startswith('gpuops_remediation_task_restarts_total{task="node-watch"}')
        )
        assert counted == len(log.failed)  # every end logged and counted
        assert all(f["error"] for f in log.failed)
        views = runtime.nodes.views
        selected = {n: v for n, v in views.items() if POLICY.node_selector.matches(v.labels)}
        plan = planner.plan(Snapshot(nodes=selected), POLICY, datetime.now(UTC))
        assert Cordon("gpu-good") in plan.effects
    finally:
        await supervisor.stop()


LONG = st.one_of(
    st.just(""),
    st.text(max_size=50),
    st.integers(1, 4).map(lambda n: "Xid 79 " * (10 ** (n + 1))),
    st.just("\x00\n\r\t💥" * 50_000),
)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    messages=st.lists(LONG, min_size=1, max_size=6),
    pods=st.integers(0, 300),
    pod_name=st.integers(5, 253),
)
def test_the_engine_writes_nothing_past_its_bounds(
    messages: list[str], pods: int, pod_name: int
) -> None:
    asyncio.run(_engine(messages, pods, pod_name))


async def _engine(messages: list[str], pods: int, pod_name: int) -> None:
    cluster = MemoryCluster(NOW - timedelta(days=1), heartbeat=timedelta(minutes=5))
    clock = Clock(cluster, NOW - timedelta(days=1))
    cluster.add_node("gpu-0", labels={"pool": "a"})
    for i in range(pods):
        cluster.add_pod(
            "gpu-0",
            f"training/{i}-" + "p" * pod_name,
            protected_until=NOW + timedelta(minutes=20),
            pdb="training/" + "b" * pod_name,
        )
    clock.to(NOW)
    harness = Harness(cluster, clock)
    fault = Fault(
        name="gpu-xid",
        match=(ConditionMatch(TYPE, "False", r"NvidiaXID79Error"),),
        ladder=(
            Step(Action.Cordon),
            Step(Action.Drain, timeout=timedelta(minutes=30)),
            Step(Action.GPUReset, timeout=timedelta(days=1), retries=100),
        ),
    )
    policy_ = Policy(name="gpu", faults=(fault,))
    cluster.set_condition("gpu-0", TYPE, "False", "NvidiaXID79Error", messages[0])
    for round_ in range(40):
        await harness.reconcile(policy_)
        for execution in cluster.executions("gpu-0"):
            if execution.progress is Progress.InProgress:
                done = cluster.finish_execution("gpu-0", execution.action, succeed=False)
                done.message = messages[round_ % len(messages)]
        for record in cluster.remediations():
            size = len(json.dumps(to_status(record.state)))
            assert size < bounds.REMEDIATION_BYTES, size
            assert len(record.state.steps) <= 4 * len(fault.ladder)
            assert len(record.state.message) <= 4 * bounds.TEXT
            for step in record.state.steps:
                assert len(step.message) <= 4 * bounds.TEXT
        clock.advance(timedelta(minutes=10))
        cluster.beat("gpu-0")
    for event_ in cluster.events_for("Node", "gpu-0"):
        assert len(event_.message) <= 4 * bounds.TEXT
