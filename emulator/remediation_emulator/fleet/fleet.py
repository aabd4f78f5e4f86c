"""The emulated fleet as one object: build it, run its controllers, inject faults into it.

`running(server, ...)` is what tests and the sandbox use: it connects to an API server (the
emulator, or any cluster), optionally builds the fleet, starts one informer per resource type
(nodes, pods, jobs, NodeClaims) shared by the kubelet, the node agent, the Job runner and
Karpenter, waits until their caches are synced, and stops everything on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime

from remediation_emulator.fleet import builder, catalog, resources
from remediation_emulator.fleet.agent import NodeAgent
from remediation_emulator.fleet.builder import Built
from remediation_emulator.fleet.catalog import FaultClass
from remediation_emulator.fleet.client import Connection, KubeClient
from remediation_emulator.fleet.config import FAST, FleetConfig
from remediation_emulator.fleet.daemons import NodeDaemons
from remediation_emulator.fleet.informer import Informer
from remediation_emulator.fleet.injector import Injector
from remediation_emulator.fleet.jobs import JobRunner
from remediation_emulator.fleet.karpenter import Karpenter
from remediation_emulator.fleet.kubelet import Kubelet
from remediation_emulator.fleet.manifests import Shape

log = logging.getLogger(__name__)


class Fleet:
    def __init__(
        self,
        client: KubeClient,
        *,
        shape: Shape | None = None,
        config: FleetConfig = FAST,
        faults: Mapping[str, FaultClass] | None = None,
        seed: int = 0,
        now: Callable[[], datetime] = builder.wall_clock,
        watch_timeout: int = 300,
    ) -> None:
        self.client = client
        self.shape = shape or Shape()
        self.config = config
        self.faults = faults if faults is not None else catalog.load()
        self.rng = random.Random(seed)
        self.now = now
        self.built: Built | None = None

        def informer(resource: resources.Resource) -> Informer:
            return Informer(client, resource, watch_timeout=watch_timeout)

        self.nodes = informer(resources.NODES)
        self.pods = informer(resources.PODS)
        self.jobs_informer = informer(resources.JOBS)
        self.nodeclaims = informer(resources.NODECLAIMS)
        self.agent = NodeAgent(client, self.nodes, config, self.faults, self.rng, now)
        self.kubelet = Kubelet(client, self.nodes, self.pods, config, now)
        self.jobs = JobRunner(
            client, self.nodes, self.jobs_informer, self.agent, config, self.rng, now
        )
        if config.job_controller:
            self.jobs.run_pods_of(self.pods)
        self.karpenter = Karpenter(
            client,
            self.nodes,
            self.nodeclaims,
            self.pods,
            self.kubelet.pods_on,
            self.shape,
            config,
            self.rng,
            now,
        )
        self.daemons = NodeDaemons(client, self.nodes, self.pods, self.agent, config, self.shape)
        self.injector = Injector(
            self.agent, self.nodes, self.faults, config.fault_rate_per_node_hour, self.rng
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def build(self) -> Built:
        self.built = await builder.build(self.client, self.shape, self.rng, now=self.now)
        log.info(
            "fleet: built %d nodes and %d pods in %.2fs (%.0f nodes/s)",
            len(self.built.nodes),
            self.built.pods,
            self.built.seconds,
            self.built.nodes_per_second,
        )
        return self.built

    async def start(self, *, sync_timeout: float = 60.0) -> None:
        """Start informers and controllers; return once every cache has listed."""
        informers = (self.nodes, self.pods, self.jobs_informer, self.nodeclaims)
        runners = [i.run for i in informers] + [
            self.agent.run,
            self.kubelet.run,
            self.jobs.run,
            self.karpenter.run,
            self.daemons.run,
            self.injector.run,
        ]
        self._tasks = [asyncio.create_task(r()) for r in runners]
        async with asyncio.timeout(sync_timeout):
            await asyncio.gather(*(i.synced.wait() for i in informers))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def inject(self, node: str, fault: str) -> None:
        """Give a node a fault of the named catalog class (see faults.yaml)."""
        self.agent.inject(node, fault)

    def clear(self, node: str) -> None:
        self.agent.clear(node)

    def restart_agent(self, node: str) -> None:
        """The node agent on `node` restarts (a sticky agent then forgets what it reported)."""
        self.agent.restart_agent(node)

    def restart_device_plugin(self, node: str) -> None:
        """The device plugin on `node` restarts (its unhealthy marks are forgotten)."""
        self.agent.restart_device_plugin(node)


@contextlib.asynccontextmanager
async def running(
    server: str | Connection,
    *,
    shape: Shape | None = None,
    config: FleetConfig = FAST,
    seed: int = 0,
    build: bool = True,
    faults: Mapping[str, FaultClass] | None = None,
    watch_timeout: int = 300,
) -> AsyncIterator[Fleet]:
    """A fleet connected to `server` (a URL or a Connection), built and running."""
    connection = server if isinstance(server, Connection) else Connection(server)
    async with KubeClient(connection, concurrency=config.http_concurrency) as client:
        fleet = Fleet(
            client,
            shape=shape,
            config=config,
            faults=faults,
            seed=seed,
            watch_timeout=watch_timeout,
        )
        if build:
            await fleet.build()
        await fleet.start()
        try:
            yield fleet
        finally:
            await fleet.stop()
