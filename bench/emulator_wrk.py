"""The emulator's request rate measured by an independent client, `wrk` (Debian `wrk`).

The Python benchmark (bench/emulator_bench.py) shares the 2 cores between its client and the
server; wrk is a C client using a fraction of a core, so its figure is closer to the server's
own capacity. The server runs in its own process with N nodes; wrk runs GETs of one Node,
then strategic-merge PATCHes of Node status (a heartbeat, as kubelet sends) with keep-alive
connections, each for a fixed time. Writes bench-results/emulator-wrk.json.

Run: .venv/bin/python -m bench.emulator_wrk [--nodes 10000] [--seconds 10] [--connections 8]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import bench_cluster

RESULTS = Path(__file__).resolve().parents[1] / "bench-results" / "emulator-wrk.json"
PATCH_SCRIPT = """
wrk.method = "PATCH"
wrk.headers["Content-Type"] = "application/strategic-merge-patch+json"
wrk.body = '{"status":{"conditions":[{"type":"Ready","status":"True",' ..
  '"lastHeartbeatTime":"2026-11-30T12:00:00Z"}]}}'
"""


def wrk(url: str, seconds: int, connections: int, script: str | None) -> dict[str, Any]:
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--latency"]
    if script is not None:
        argv += ["-s", script]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.MULTILINE))
    return {
        "requests_per_second": float(rate.group(1)) if rate else None,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "p50": percentiles.get("50"),
        "p99": percentiles.get("99"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    cluster = bench_cluster.Cluster(bench_cluster.Spec(nodes=args.nodes, drain_pods=0))
    try:
        node = f"{cluster.url}/api/v1/nodes/gpu-00001"
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(PATCH_SCRIPT)
        report = {
            "nodes": args.nodes,
            "connections": args.connections,
            "seconds": args.seconds,
            "get_node": wrk(node, args.seconds, args.connections, None),
            "patch_node_status": wrk(f"{node}/status", args.seconds, args.connections, script.name),
            "load_average": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        }
        os.unlink(script.name)
    finally:
        cluster.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
