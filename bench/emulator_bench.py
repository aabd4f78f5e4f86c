"""Benchmark of the API emulator: 10,000 nodes created, listed, watched, then 100,000 patches.

Run: .venv/bin/python bench/emulator_bench.py [--nodes N] [--patches N] [--concurrency N]

The server runs in its own process (as the sandbox does) and the client drives it over HTTP
with aiohttp, so both get a core. One watch on nodes stays open during the patch stream, so
every patch also costs a watch event. The patch phase is reported in 10 equal buckets: if the
emulator slowed down with the number of requests served, later buckets would show it.
Writes bench-results/emulator.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from remediation_emulator import apiserver

RESULTS = Path("bench-results/emulator.json")


def _serve(pipe: Any, stop: Any) -> None:
    """The server process: serve, then report the server-side time of every status patch."""

    async def main() -> None:
        async with apiserver.serve(port=0, log_size=200_000) as api:
            pipe.send(api.url)
            await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            pipe.send(
                [e.seconds for e in api.request_log.matching(verb="patch", subresource="status")]
            )

    asyncio.run(main())


def _buckets(latencies: list[float]) -> list[dict[str, Any]]:
    size = max(1, len(latencies) // 10)
    out = []
    for b in range(10):
        chunk = sorted(latencies[b * size : (b + 1) * size])
        if not chunk:
            continue
        out.append(
            {
                "requests": f"{b * size + 1}-{(b + 1) * size}",
                "mean_ms": statistics.mean(chunk) * 1000,
                "p50_ms": chunk[len(chunk) // 2] * 1000,
                "p99_ms": chunk[int(len(chunk) * 0.99)] * 1000,
            }
        )
    return out


def _node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"gpu-{i:05d}",
            "labels": {
                "nvidia.com/gpu.present": "true",
                "karpenter.sh/nodepool": f"pool-{i % 4}",
                "topology.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
            },
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2Ti", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "191", "memory": "2Ti", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "True",
                    "reason": "Healthy",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
            ],
            "nodeInfo": {"bootID": f"boot-{i}", "kubeletVersion": "v1.32.0"},
        },
    }


async def _run_many(
    session: aiohttp.ClientSession, count: int, concurrency: int, make: Any
) -> list[float]:
    """Run `count` requests with `concurrency` in flight; return per-request seconds."""
    latencies = [0.0] * count
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            method, path, body, headers = make(i)
            started = time.perf_counter()
            async with session.request(method, path, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status >= 300:
                    raise RuntimeError(f"{method} {path}: {resp.status} {await resp.text()}")
            latencies[i] = time.perf_counter() - started

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def _watch_count(
    session: aiohttp.ClientSession,
    params: dict[str, str],
    until: int,
    counter: list[int],
    ready: asyncio.Event | None = None,
) -> float:
    started = time.perf_counter()
    async with session.get("/api/v1/nodes", params={"watch": "1", **params}) as resp:
        if ready is not None:
            ready.set()
        async for line in resp.content:
            if line.strip():
                counter[0] += 1
                if counter[0] >= until:
                    break
    return time.perf_counter() - started


async def bench(url: str, nodes: int, patches: int, concurrency: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(limit=concurrency * 2)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(base_url=url, connector=connector, timeout=timeout) as s:
        json_headers = {"Content-Type": "application/json"}

        def create(i: int) -> tuple[str, str, bytes, dict[str, str]]:
            return "POST", "/api/v1/nodes", json.dumps(_node(i)).encode(), json_headers

        started = time.perf_counter()
        created = await _run_many(s, nodes, concurrency, create)
        elapsed = time.perf_counter() - started
        results["create"] = {
            "requests": nodes,
            "seconds": elapsed,
            "per_second": nodes / elapsed,
            "mean_ms": statistics.mean(created) * 1000,
        }

        started = time.perf_counter()
        async with s.get("/api/v1/nodes") as resp:
            body = await resp.read()
        full = json.loads(body)
        results["list_all"] = {
            "items": len(full["items"]),
            "seconds": time.perf_counter() - started,
            "bytes": len(body),
        }
        started = time.perf_counter()
        count, pages, params = 0, 0, {"limit": "500"}
        while True:
            async with s.get("/api/v1/nodes", params=params) as resp:
                page = json.loads(await resp.read())
            count += len(page["items"])
            pages += 1
            if not page["metadata"].get("continue"):
                break
            params = {"limit": "500", "continue": page["metadata"]["continue"]}
        results["list_paginated"] = {
            "items": count,
            "pages": pages,
            "seconds": time.perf_counter() - started,
        }
        started = time.perf_counter()
        async with s.get(
            "/api/v1/nodes", params={"labelSelector": "karpenter.sh/nodepool=pool-1"}
        ) as resp:
            selected = json.loads(await resp.read())
        results["list_selector"] = {
            "items": len(selected["items"]),
            "seconds": time.perf_counter() - started,
        }

        counter = [0]
        seconds = await _watch_count(s, {"resourceVersion": "0"}, nodes, counter)
        results["watch_initial"] = {"events": counter[0], "seconds": seconds}

        # One watch stays open through the patch stream.
        rv = full["metadata"]["resourceVersion"]
        live = [0]
        ready = asyncio.Event()
        watcher = asyncio.create_task(
            _watch_count(s, {"resourceVersion": rv}, patches, live, ready)
        )
        await ready.wait()
        patch_headers = {"Content-Type": "application/strategic-merge-patch+json"}

        def patch(i: int) -> tuple[str, str, bytes, dict[str, str]]:
            name = f"gpu-{i % nodes:05d}"
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = {
                "status": {
                    "conditions": [
                        {
                            "type": "AcceleratedHardwareReady",
                            "status": "True",
                            "reason": "Healthy",
                            "message": f"beat {i}",
                            "lastHeartbeatTime": stamp,
                        }
                    ]
                }
            }
            return "PATCH", f"/api/v1/nodes/{name}/status", json.dumps(body).encode(), patch_headers

        started = time.perf_counter()
        latencies = await _run_many(s, patches, concurrency, patch)
        elapsed = time.perf_counter() - started
        await asyncio.wait_for(watcher, timeout=60)
        results["patch_status"] = {
            "requests": patches,
            "seconds": elapsed,
            "per_second": patches / elapsed,
            "watch_events": live[0],
            "client_buckets": _buckets(latencies),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--patches", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    stop = context.Event()
    server = context.Process(target=_serve, args=(sender, stop), daemon=True)
    server.start()
    url = receiver.recv()
    try:
        results = asyncio.run(bench(url, args.nodes, args.patches, args.concurrency))
    finally:
        stop.set()
    server_side = receiver.recv()
    server.join(timeout=10)
    results["patch_status"]["server_buckets"] = _buckets(server_side)
    results["machine"] = {
        "python": platform.python_version(),
        "cpus": multiprocessing.cpu_count(),
        "concurrency": args.concurrency,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    c, la, lp, ls, wi, p = (
        results[k]
        for k in (
            "create",
            "list_all",
            "list_paginated",
            "list_selector",
            "watch_initial",
            "patch_status",
        )
    )
    rows = [
        (
            "create nodes",
            f"{c['requests']} in {c['seconds']:.1f} s = {c['per_second']:.0f}/s, "
            f"mean {c['mean_ms']:.1f} ms",
        ),
        (
            "list all (one request)",
            f"{la['items']} items in {la['seconds'] * 1000:.0f} ms ({la['bytes'] / 1e6:.1f} MB)",
        ),
        (
            "list paginated (limit 500)",
            f"{lp['items']} items, {lp['pages']} pages in {lp['seconds'] * 1000:.0f} ms",
        ),
        ("list by label (1 pool of 4)", f"{ls['items']} items in {ls['seconds'] * 1000:.0f} ms"),
        (
            "watch from rv 0 (initial ADDED)",
            f"{wi['events']} events in {wi['seconds'] * 1000:.0f} ms",
        ),
        (
            "status patches (1 watch open)",
            f"{p['requests']} in {p['seconds']:.1f} s = "
            f"{p['per_second']:.0f}/s, {p['watch_events']} "
            "watch events",
        ),
    ]
    for phase, result in rows:
        print(f"{phase:<34}{result}")
    print(f"\n{'patch requests':<16}{'client-observed ms':^30}{'server handler ms':^30}")
    print(f"{'':<16}" + f"{'mean':>10}{'p50':>10}{'p99':>10}" * 2)
    for cb, sb in zip(p["client_buckets"], p["server_buckets"], strict=True):
        print(
            f"{cb['requests']:<16}{cb['mean_ms']:>10.2f}{cb['p50_ms']:>10.2f}{cb['p99_ms']:>10.2f}"
            f"{sb['mean_ms']:>10.3f}{sb['p50_ms']:>10.3f}{sb['p99_ms']:>10.3f}"
        )
    print(f"\nwritten to {RESULTS}")


if __name__ == "__main__":
    main()
