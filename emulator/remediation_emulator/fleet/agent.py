"""The emulated node agent: GPU health conditions, heartbeats, faults, resets and reboots.

It plays node-problem-detector and the EKS node monitoring agent (publishing
`AcceleratedHardwareReady` and `GPUHealthy` through nodes/status strategic-merge patches), the
kubelet's Ready condition across a reboot, and the operator's `NodeAgent` executor: a Node
annotation `remediation.gpuops.io/agent-request: <Action>:<remediation>:<attempt>` is carried out
and answered with `remediation.gpuops.io/agent-ack: <Action>:<remediation>:<attempt>:Succeeded`
(or `:Failed`). Faults are injected from Python (`inject`) or with the Node annotation
`sandbox.gpuops.io/inject-fault: <class>` (`none` clears), which the agent removes once applied.

Per-node work is level-triggered from one Node watch; heartbeats for all nodes come from one
scheduler task that patches the nodes falling due in each tick, so 10,000 nodes cost one task.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from remediation_emulator.fleet import catalog, health, manifests, resources
from remediation_emulator.fleet.catalog import CatalogError, FaultClass
from remediation_emulator.fleet.client import KubeClient, Obj, PatchType
from remediation_emulator.fleet.config import FleetConfig
from remediation_emulator.fleet.controller import Controller
from remediation_emulator.fleet.health import NodeHealth
from remediation_emulator.fleet.informer import Informer, version_number

log = logging.getLogger(__name__)

INJECT = "sandbox.gpuops.io/inject-fault"
RESTART_DEVICE_PLUGIN = "sandbox.gpuops.io/restart-device-plugin"
"""Any value: the node's device plugin restarts (with `FleetConfig.marks_gpus`, the
GPUs it marked unhealthy are advertised again); the agent removes the annotation."""
INJECT_ERROR = "sandbox.gpuops.io/inject-fault-error"
"""Set by the agent when an injection annotation named no known fault class."""
CLEAR_VALUES = frozenset({"none", "clear", ""})
REQUEST = "remediation.gpuops.io/agent-request"
ACK = "remediation.gpuops.io/agent-ack"
ACTIONS = ("GPUReset", "Reboot", "Validate", "Diagnose")

_EPSILON = 0.01
"""Wake slightly after a deadline so that `now >= deadline` holds when the key is processed."""


class UnknownNodeError(LookupError):
    """The fleet has not seen a Node of that name (yet)."""


def parse_request(text: str) -> str | None:
    """The action of a well-formed request `<Action>:<remediation>:<attempt>`, else None."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in ACTIONS or not parts[1] or not parts[2].isdigit():
        return None
    return parts[0]


class NodeAgent:
    def __init__(
        self,
        client: KubeClient,
        nodes: Informer,
        config: FleetConfig,
        faults: Mapping[str, FaultClass],
        rng: random.Random,
        now: Callable[[], datetime],
    ) -> None:
        self.controller = Controller("node-agent", self._reconcile, workers=config.workers)
        self.heartbeats = 0
        """Heartbeat patches sent so far."""
        self._client = client
        self._nodes = nodes
        self._config = config
        self._faults = faults
        self._rng = rng
        self._now = now
        self._health: dict[str, NodeHealth] = {}
        self._due: list[tuple[float, str, int]] = []
        """Heartbeat schedule: (due time, node, entry id); stale entries are skipped."""
        self._scheduled: dict[str, int] = {}
        """By node: the id of its live schedule entry (a re-created node gets a new one)."""
        self._entries = 0
        self._written: dict[str, int] = {}
        """By node: the resourceVersion of our latest write (read-your-writes guard)."""
        self._ticks: dict[str, datetime] = {}
        """By node: one of its agent's report ticks (`FleetConfig.report_interval` apart; each
        node's agent started at its own moment)."""
        nodes.subscribe(self._on_node)

    # -- Python API ------------------------------------------------------------------------

    def health(self, node: str) -> NodeHealth | None:
        return self._health.get(node)

    def _current(self, node: str) -> NodeHealth:
        found = self._health.get(node)
        if found is not None:
            return found
        obj = self._nodes.get(node)
        if obj is None or not self._config.owns(obj):
            raise UnknownNodeError(f"node {node!r} is not part of the fleet")
        profile = self._config.agent
        return health.adopt(
            obj,
            self._faults,
            self._now(),
            sticky=profile == "eks",
            npd=profile == "npd",
            device_plugin=self._config.marks_gpus,
        )

    def inject(self, node: str, fault: str) -> None:
        """Give `node` a fault of the named class (published at once)."""
        fault_class = catalog.lookup(self._faults, fault)
        self._health[node] = health.inject(self._current(node), fault_class, self._now())
        self.controller.enqueue(node)

    def clear(self, node: str) -> None:
        self._health[node] = health.clear(self._current(node), self._now())
        self.controller.enqueue(node)

    def restart_agent(self, node: str) -> None:
        """The agent on `node` restarts (pod deleted, OOM-killed): see health.restart_agent."""
        lookback = timedelta(seconds=self._config.npd_lookback)
        self._health[node] = health.restart_agent(self._current(node), self._now(), lookback)
        self.controller.enqueue(node)

    def restart_device_plugin(self, node: str) -> None:
        """The device plugin's pod on `node` restarts: see health.restart_device_plugin."""
        self._health[node] = health.restart_device_plugin(self._current(node))
        self.controller.enqueue(node)

    def device_plugin_running(self, node: str, running: bool) -> None:
        """The device plugin's pod on `node` is there (`running`) or gone (the GPU Operator's
        stop label took it off): see health.device_plugin_running."""
        try:
            current = self._current(node)
        except UnknownNodeError:
            return  # not a node the fleet plays the agent for
        after = health.device_plugin_running(current, running)
        if after != current:
            self._health[node] = after
            self.controller.enqueue(node)

    def gpu_reset(self, node: str) -> bool:
        """Reset the node's GPUs now; False when the reset cannot run (GPU unreachable, node
        rebooting). A reset that runs clears the fault with the class's probability."""
        current = self._current(node)
        if current.rebooting:
            return False
        after, ran = health.gpu_reset(current, self._rng, self._now(), self._config.reset_clears)
        self._health[node] = after
        self.controller.enqueue(node)
        return ran

    def validate(self, node: str) -> bool:
        """Run the validation (DCGM diagnostics) now: it fails while the fault is shown, and
        after a repair that left a `validation_fails` class latent."""
        return health.validates(self._current(node))

    def reboot(self, node: str) -> bool:
        """Start a reboot: NotReady for `reboot_duration`, then a new bootID and Ready."""
        current = self._current(node)
        if current.rebooting:
            return True
        now = self._now()
        self._health[node] = health.begin_reboot(current, now, self._config.reboot_duration)
        self.controller.enqueue(node)
        return True

    # -- controller ------------------------------------------------------------------------

    def _on_node(self, key: str, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            self._health.pop(key, None)
            self._scheduled.pop(key, None)
            self._written.pop(key, None)
            self._ticks.pop(key, None)
            return
        if not self._config.owns(new):
            return
        self.controller.enqueue(key)
        if key not in self._scheduled:
            self._entries += 1
            self._scheduled[key] = self._entries
            loop = asyncio.get_running_loop()
            first = loop.time() + self._rng.uniform(0, self._config.heartbeat_period)
            heapq.heappush(self._due, (first, key, self._entries))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.controller.run())
            group.create_task(self._heartbeat_loop())

    def _advance(self, h: NodeHealth, now: datetime) -> NodeHealth:
        """Apply what time alone brings: a reboot or reset finishing, a transient fault ending."""
        cfg = self._config
        if h.rebooting_until is not None and now >= h.rebooting_until:
            h = health.finish_reboot(
                h, self._rng, now, manifests.new_uuid(self._rng), cfg.reboot_clears
            )
            if h.request is not None:
                h = replace(h, pending_ack=f"{h.request}:Succeeded", request=None)
        if h.resetting_until is not None and now >= h.resetting_until:
            request = h.request
            after, ran = health.gpu_reset(h, self._rng, now, cfg.reset_clears)
            ack = f"{request}:{'Succeeded' if ran else 'Failed'}" if request else None
            h = replace(after, resetting_until=None, request=None, pending_ack=ack)
        if health.transient_over(h, now, cfg.transient_duration):
            h = health.clear(h, now)
        return h

    def _take_request(self, h: NodeHealth, request: str, ack: str, now: datetime) -> NodeHealth:
        if request == h.last_request or ack.startswith(request + ":"):
            return h
        if h.request is not None or h.rebooting:
            return h  # busy; looked at again when the current work ends
        if h.fault is not None and h.fault.silent:
            return h  # a silent agent answers nothing
        h = replace(h, last_request=request)
        action = parse_request(request)
        if action is None:
            log.warning("malformed agent request %r; answering Failed", request)
            return replace(h, pending_ack=f"{request}:Failed")
        if action == "Validate":
            verdict = "Succeeded" if health.validates(h) else "Failed"
            return replace(h, pending_ack=f"{request}:{verdict}")
        if action == "Diagnose":
            return replace(h, pending_ack=f"{request}:Succeeded")  # the reports are written
        if action == "GPUReset":
            if self._config.agent != "kind":
                # Nothing asked the GPU's other users to stop: nvidia-smi refuses the reset
                # while the device plugin, DCGM or GPU feature discovery hold the device
                # (nvidia-smi(1) --gpu-reset: exit 255, "In use by another client"), as on a
                # real node. The node program's reset stops them first (node_program.py).
                log.warning("%s: GPU reset refused, In use by another client", request)
                return replace(h, pending_ack=f"{request}:Failed")
            until = now + timedelta(seconds=self._config.reset_duration)
            return replace(h, request=request, resetting_until=until)
        return health.begin_reboot(replace(h, request=request), now, self._config.reboot_duration)

    async def _reconcile(self, name: str) -> float | None:
        node = self._nodes.get(name)
        if node is None:
            self._health.pop(name, None)
            return None
        if version_number(node) < self._written.get(name, 0):
            return None  # our last write is not in the cache yet; its watch event wakes us
        now = self._now()
        h = self._advance(self._current(name), now)
        annotations: dict[str, str] = node["metadata"].get("annotations") or {}
        patch: dict[str, str | None] = {}
        wanted = annotations.get(INJECT)
        if wanted is not None:
            patch[INJECT] = None
            try:
                if wanted.strip().lower() in CLEAR_VALUES:
                    h = health.clear(h, now)
                else:
                    h = health.inject(h, catalog.lookup(self._faults, wanted.strip()), now)
                if INJECT_ERROR in annotations:
                    patch[INJECT_ERROR] = None
            except CatalogError as exc:
                patch[INJECT_ERROR] = f"{INJECT}: {exc}"
        if RESTART_DEVICE_PLUGIN in annotations:
            patch[RESTART_DEVICE_PLUGIN] = None
            h = health.restart_device_plugin(h)
        request = annotations.get(REQUEST)
        if request:
            h = self._take_request(h, request, annotations.get(ACK, ""), now)
        ack = h.pending_ack if not h.rebooting else None
        self._health[name] = h
        # Conditions first: whoever sees the ack then finds the node's health already showing
        # the outcome (so does whoever sees the injection annotation gone, with the kind
        # agent). A real agent shows a change at its next report tick only (several findings
        # in between land in one write), and the ack waits for that write.
        report_in: float | None = None
        if health.differs(h, node):
            report_in = self._until_tick(name, now)
            if report_in == 0.0:
                await self._publish(name, h, now)
                report_in = None
            else:
                ack = None
        if ack is not None and annotations.get(ACK) != ack:
            patch[ACK] = ack
        if patch:
            body = {"metadata": {"annotations": patch}}
            self._wrote(name, await self._client.patch(resources.NODES, name, body))
        if ack is not None:
            latest = self._health.get(name)
            if latest is not None and latest.pending_ack == ack:
                self._health[name] = replace(latest, pending_ack=None)
        deadline = health.next_deadline(h, self._config.transient_duration)
        waits = [] if report_in is None else [report_in]
        if deadline is not None:
            waits.append(max(0.0, (deadline - now).total_seconds()))
        return min(waits) + _EPSILON if waits else None

    def _until_tick(self, name: str, now: datetime) -> float:
        """Seconds until the agent on `name` next writes its conditions (0: now). The kind
        agent writes at once; the real ones on their report ticker (`report_interval`)."""
        interval = self._config.report_interval()
        if interval <= 0:
            return 0.0
        start = self._ticks.get(name)
        if start is None:
            start = now + timedelta(seconds=self._rng.uniform(0, interval))
            self._ticks[name] = start
        behind = (now - start).total_seconds()
        if behind < 0:
            return -behind
        since_tick = behind % interval
        if since_tick <= 2 * _EPSILON:
            return 0.0  # on a tick (a requeue wakes `_EPSILON` after it)
        return interval - since_tick

    async def _publish(self, name: str, h: NodeHealth, now: datetime) -> None:
        status: dict[str, object] = {
            "conditions": health.conditions(h, now),
            "nodeInfo": {"bootID": h.boot_id},
        }
        advertised = health.allocatable(h)
        if advertised is not None:
            # The kubelet's count of the device plugin's healthy GPUs (the agent plays both).
            status["allocatable"] = {health.GPU_RESOURCE: advertised}
        body = {"status": status}
        written = await self._client.patch(
            resources.NODES, name, body, subresource="status", patch_type=PatchType.STRATEGIC
        )
        self._wrote(name, written)

    def _wrote(self, name: str, obj: Obj) -> None:
        self._written[name] = max(self._written.get(name, 0), version_number(obj))

    # -- heartbeats ------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self._config.heartbeat_period
        while True:
            await asyncio.sleep(self._config.heartbeat_tick)
            moment = loop.time()
            batch: list[str] = []
            while self._due and self._due[0][0] <= moment:
                when, name, entry = heapq.heappop(self._due)
                if self._scheduled.get(name) != entry:
                    continue
                batch.append(name)
                heapq.heappush(self._due, (max(when + period, moment), name, entry))
            if batch:
                results = await asyncio.gather(
                    *(self._heartbeat(n) for n in batch), return_exceptions=True
                )
                for name, result in zip(batch, results, strict=True):
                    if isinstance(result, Exception):
                        log.warning("heartbeat of %s failed: %r", name, result)

    async def _heartbeat(self, name: str) -> None:
        if self._nodes.get(name) is None:
            return
        h = self._current(name)
        if h.rebooting:
            return  # neither the kubelet nor the agent runs while the node reboots
        await self._publish(name, h, self._now())
        self.heartbeats += 1
