"""Benchmark of the fleet simulator: simulated node-days per second of CPU, at two fleet sizes.

Issue 5's targets: 2,048 nodes for 54 days (the Llama 3 fleet and run) in under 30 s, and
10,000 nodes for 90 days in under 2 minutes, on the project's 2-core machine. Both run the
shipped graduated policy (`examples/gpu-xid-ladders-policy.yaml`) over the shipped fault mix with
gang-scheduled jobs, through the real engine and planner. Prints one line per size and writes
`bench-results/sim.json`. Run: `.venv/bin/python bench/sim_bench.py [--quick]`.

CPU time is reported next to wall time because other processes on a shared machine stretch
wall time without the simulator doing more work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from pathlib import Path

from remediation_operator.sim import faultmix, fleetspec, study
from remediation_operator.sim.simulator import Simulation

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "examples" / "gpu-xid-ladders-policy.yaml"
OUT = ROOT / "bench-results" / "sim.json"
SIZES = ((2048, 54.0, 30.0), (10_000, 90.0, 120.0))
"""(nodes, days, target seconds)."""


def measure(nodes: int, days: float, seed: int) -> dict[str, float | int | str]:
    policy = study.load_policy(POLICY)
    simulation = Simulation(
        policy,
        mix=faultmix.load(),
        fleet=fleetspec.FleetSpec(nodes=nodes),
        days=days,
        seed=seed,
    )
    cpu, wall = time.process_time(), time.perf_counter()
    result = asyncio.run(simulation.run())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "nodes": nodes,
        "days": days,
        "policy": policy.name,
        "seed": seed,
        "cpu_seconds": round(cpu, 2),
        "wall_seconds": round(wall, 2),
        "node_days_per_cpu_second": round(nodes * days / cpu, 1),
        "reconciles": simulation.reconciles,
        "remediations": result.report.remediations,
        "faults": result.report.faults,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one tenth of the days (smoke run)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for nodes, days, target in SIZES:
        run_days = days / 10 if args.quick else days
        row = measure(nodes, run_days, args.seed)
        row["target_seconds"] = target
        row["within_target"] = "yes" if float(row["cpu_seconds"]) < target else "no"
        rows.append(row)
        print(
            f"{nodes:>6} nodes x {run_days:g} days: {row['cpu_seconds']:>7} s CPU"
            f" ({row['wall_seconds']} s wall), {row['node_days_per_cpu_second']:,} node-days/s,"
            f" {row['reconciles']} reconciles, target {target:g} s: {row['within_target']}",
            flush=True,
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {"python": platform.python_version(), "machine": platform.machine(), "runs": rows},
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
