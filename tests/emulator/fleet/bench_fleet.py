"""Benchmark (not a test): build a large emulated fleet and measure it reaching steady state.

Run: `.venv/bin/python -m tests.emulator.fleet.bench_fleet --nodes 10000 --profile realistic`.
It reports the build time (nodes/s and requests/s over HTTP), how long until every pod is
Running, the steady request rate (heartbeats), the latency from an injected fault to the
watch showing it, and peak memory. The emulator and the fleet share one process and one event
loop, as in `remediation-operator sandbox`.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time

from remediation_emulator import apiserver
from remediation_emulator.fleet import config, fleet
from remediation_emulator.fleet.client import Connection
from remediation_emulator.fleet.manifests import Shape


async def measure(nodes: int, pdb_every: int, profile: str, settle: float) -> None:
    async with apiserver.serve() as api:
        started = time.perf_counter()
        shape = Shape(nodes=nodes, pdb_every=pdb_every)
        settings = config.PROFILES[profile]
        async with fleet.running(Connection(api.url), shape=shape, config=settings) as gpus:
            built = gpus.built
            assert built is not None
            print(
                f"built {nodes} nodes, {built.pods} pods in {built.seconds:.1f}s "
                f"({built.nodes_per_second:.0f} nodes/s, "
                f"{len(api.request_log) / built.seconds:.0f} requests/s); "
                f"caches synced after {time.perf_counter() - started:.1f}s",
                flush=True,
            )
            started = time.perf_counter()
            while True:
                pods = list(gpus.pods.cache.values())
                if all(p.get("status", {}).get("phase") == "Running" for p in pods):
                    break
                await asyncio.sleep(1.0)
            print(f"all {len(pods)} pods Running after {time.perf_counter() - started:.1f}s")
            beats, requests, started = (
                gpus.agent.heartbeats,
                len(api.request_log),
                time.perf_counter(),
            )
            await asyncio.sleep(settle)
            took = time.perf_counter() - started
            print(
                f"steady state: {(gpus.agent.heartbeats - beats) / took:.0f} heartbeats/s "
                f"(expected {nodes / settings.heartbeat_period:.0f}), "
                f"{(len(api.request_log) - requests) / took:.0f} requests/s"
            )
            victim = built.nodes[len(built.nodes) // 2]
            started = time.perf_counter()
            gpus.inject(victim, "xid-79")
            while True:
                node = gpus.nodes.cache[victim]
                shown = next(
                    c
                    for c in node["status"]["conditions"]
                    if c["type"] == "AcceleratedHardwareReady"
                )
                if shown["status"] == "False":
                    break
                await asyncio.sleep(0.005)
            print(f"injected fault seen in the watch after {time.perf_counter() - started:.3f}s")
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"peak memory (emulator + fleet): {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pdb-every", type=int, default=2)
    parser.add_argument("--profile", default="realistic", choices=sorted(config.PROFILES))
    parser.add_argument("--settle", type=float, default=20.0)
    args = parser.parse_args()
    asyncio.run(measure(args.nodes, args.pdb_every, args.profile, args.settle))


if __name__ == "__main__":
    main()
