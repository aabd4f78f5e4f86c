"""`make bench`: the operator's reaction latency, CPU and memory next to a bare watcher's.

Method (docs/performance.md explains the choices): one process serves the API emulator with
N nodes and writes 50 irrelevant node status updates per second (heartbeats, flips of a
condition no policy watches) for the whole run. The floor watcher (bench/floor_watcher.py)
runs first, alone, then the real operator (`python -m remediation_operator run`), alone;
each is measured from /proc while only churn runs (CPU seconds per 1,000 node events, peak
RSS), then faults are injected on fresh random nodes and the time from the condition write to
the cordon is taken in the emulator process. At the largest size a node with 110 pods and no
PodDisruptionBudget is drained by the operator. The simulator's speed comes from
bench/sim_bench.py when it is there.

Run: .venv/bin/python -m bench.operator_bench [--sizes 1000,5000,10000] [--faults 200]
BENCH_QUICK=1 runs one 1,000-node size with fewer faults (a smoke run of a few minutes).
Writes bench-results/operator.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import bench_cluster

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench-results" / "operator.json"
TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {
    "p99_ms": 250.0,
    "p50_ratio": 2.0,
    "cpu_ratio": 1.5,
    "rss_mb": 300.0,
    "drain_s": 5.0,
}


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    faults: int
    fault_rate: float = 5.0
    churn_rate: float = 50.0
    cpu_window: float = 20.0
    drain_pods: int = 110
    settle: float = 3.0
    fault_timeout: float = 30.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


class Subject:
    """A process under test: the floor watcher or the operator."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                argv, env=env, cwd=str(ROOT), stdout=sink, stderr=subprocess.STDOUT
            )

    def alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_until(check: Any, subject: Subject, within: float, what: str) -> float:
    started = time.perf_counter()
    while not check():
        subject.alive()
        if time.perf_counter() - started > within:
            raise RuntimeError(f"{what} did not happen within {within:.0f} s")
        time.sleep(0.1)
    return time.perf_counter() - started


def start_floor(cluster: bench_cluster.Cluster, tmp: Path) -> tuple[Subject, float]:
    kubeconfig = cluster.call("kubeconfig", str(tmp / "kubeconfig-floor"), "floor")
    log = tmp / "floor.log"
    floor = Subject(
        "floor watcher",
        [sys.executable, str(ROOT / "bench" / "floor_watcher.py"), kubeconfig],
        dict(os.environ),
        log,
    )
    ready = wait_until(lambda: b"floor ready" in log.read_bytes(), floor, 300, "floor ready")
    return floor, ready


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def start_operator(cluster: bench_cluster.Cluster, tmp: Path, port: int) -> tuple[Subject, float]:
    kubeconfig = cluster.call("kubeconfig", str(tmp / "kubeconfig-operator"), "operator")
    env = dict(os.environ, KUBECONFIG=kubeconfig, PYTHONUNBUFFERED="1")
    env.pop("POD_NAME", None)
    argv = [sys.executable, "-m", "remediation_operator", "run"]
    argv += ["--namespace", bench_cluster.NAMESPACE, "--identity", "operator"]
    argv += ["--metrics-address", f"127.0.0.1:{port}", "--log-level", "info"]
    operator = Subject("operator", argv, env, tmp / "operator.log")
    base = f"http://127.0.0.1:{port}"

    def leading() -> bool:
        text = _get(f"{base}/metrics") or ""
        return _get(f"{base}/readyz") is not None and "\ngpuops_remediation_leader 1.0" in text

    ready = wait_until(leading, operator, 600, "operator ready and leading")
    return operator, ready


def wait_quiet(subject: Subject, window: float = 2.0, within: float = 120.0) -> float:
    """Wait until the subject's start-up work is over: two consecutive windows of CPU use
    within 25% of each other (a fresh watcher still works through its initial list after it
    reports ready). Returns the seconds waited."""
    pid, started = subject.process.pid, time.perf_counter()
    previous: float | None = None
    while time.perf_counter() - started < within:
        before = cpu_seconds(pid)
        time.sleep(window)
        subject.alive()
        used = cpu_seconds(pid) - before
        if previous is not None and used <= max(previous * 1.25, 0.02 * window):
            break
        previous = used
    return time.perf_counter() - started


def measure_cpu(cluster: bench_cluster.Cluster, subject: Subject, window: float) -> dict[str, Any]:
    pid = subject.process.pid
    events_before, cpu_before = cluster.call("churned"), cpu_seconds(pid)
    time.sleep(window)
    subject.alive()
    events, cpu = cluster.call("churned") - events_before, cpu_seconds(pid) - cpu_before
    return {
        "events": events,
        "cpu_seconds": round(cpu, 3),
        "cpu_s_per_1000_events": round(cpu / events * 1000, 3) if events else None,
        "rss_mb": round(rss_mb(pid), 1),
    }


def latency(result: dict[str, Any]) -> dict[str, Any]:
    values = [v * 1000 for v in result["latencies"]]
    return {
        "faults": len(values) + len(result["missed"]),
        "cordoned": len(values),
        "missed": len(result["missed"]),
        "p50_ms": _round(percentile(values, 0.50)),
        "p95_ms": _round(percentile(values, 0.95)),
        "p99_ms": _round(percentile(values, 0.99)),
        "max_ms": _round(max(values) if values else None),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def run_size(nodes: int, plan: Plan, tmp: Path, *, drain: bool, port: int) -> dict[str, Any]:
    started = time.perf_counter()
    cluster = bench_cluster.Cluster(bench_cluster.Spec(nodes=nodes, drain_pods=plan.drain_pods))
    out: dict[str, Any] = {"nodes": nodes, "seed_seconds": round(cluster.seed_seconds, 1)}
    try:
        cluster.call("churn", plan.churn_rate)
        floor, ready = start_floor(cluster, tmp)
        try:
            time.sleep(plan.settle)
            quiet = wait_quiet(floor) if plan.settle >= 1 else 0.0
            out["floor"] = {"startup_s": round(ready, 2), "quiet_after_s": round(quiet, 1)}
            out["floor"] |= measure_cpu(cluster, floor, plan.cpu_window)
            if plan.faults:
                faults = cluster.call("faults", plan.faults, plan.fault_rate, plan.fault_timeout)
                out["floor"]["latency"] = latency(faults)
            out["floor"]["peak_rss_mb"] = round(peak_rss_mb(floor.process.pid), 1)
        finally:
            floor.stop()
        cluster.call("heal")
        operator, ready = start_operator(cluster, tmp, port)
        try:
            time.sleep(plan.settle)
            quiet = wait_quiet(operator) if plan.settle >= 1 else 0.0
            out["operator"] = {"startup_s": round(ready, 2), "quiet_after_s": round(quiet, 1)}
            out["operator"] |= measure_cpu(cluster, operator, plan.cpu_window)
            if plan.faults:
                faults = cluster.call("faults", plan.faults, plan.fault_rate, plan.fault_timeout)
                out["operator"]["latency"] = latency(faults)
            if drain:
                out["drain"] = cluster.call("drain", 60.0)
            operator.alive()
            out["operator"]["peak_rss_mb"] = round(peak_rss_mb(operator.process.pid), 1)
        finally:
            operator.stop()
    finally:
        cluster.stop()
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    out["load_average"] = load()
    return out


def ratios(size: dict[str, Any]) -> dict[str, float | None]:
    floor, operator = size.get("floor", {}), size.get("operator", {})

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a is not None and b else None

    return {
        "p50": ratio(
            (operator.get("latency") or {}).get("p50_ms"),
            (floor.get("latency") or {}).get("p50_ms"),
        ),
        "cpu_per_event": ratio(
            operator.get("cpu_s_per_1000_events"), floor.get("cpu_s_per_1000_events")
        ),
    }


def simulator(quick: bool) -> dict[str, Any] | None:
    """bench/sim_bench.py's `measure` at 2,048 nodes (the 10,000-node run takes minutes)."""
    try:
        from bench import sim_bench
    except ImportError:
        return None
    measure = getattr(sim_bench, "measure", None)
    if measure is None:
        return None
    days = 5.4 if quick else 54.0
    result: dict[str, Any] = dict(measure(2048, days, 1))
    return result


def verdicts(sizes: list[dict[str, Any]], drain: dict[str, Any] | None) -> dict[str, Any]:
    largest = sizes[-1]
    op_latency = (largest.get("operator") or {}).get("latency") or {}
    rss = [s["operator"]["peak_rss_mb"] for s in sizes if "operator" in s]
    out: dict[str, Any] = {
        "at_nodes": largest["nodes"],
        "p99_ms": op_latency.get("p99_ms"),
        "p99_ok": _at_most(op_latency.get("p99_ms"), TARGETS["p99_ms"]),
        "p50_ratio": largest["ratios"]["p50"],
        "p50_ratio_ok": _at_most(largest["ratios"]["p50"], TARGETS["p50_ratio"]),
        "cpu_ratio": largest["ratios"]["cpu_per_event"],
        "cpu_ratio_ok": _at_most(largest["ratios"]["cpu_per_event"], TARGETS["cpu_ratio"]),
        "peak_rss_mb": rss[-1] if rss else None,
        "rss_ok": _at_most(rss[-1] if rss else None, TARGETS["rss_mb"]),
    }
    if drain is not None:
        seconds = drain.get("fault_to_empty_s")
        out["drain_s"] = _round(seconds)
        out["drain_ok"] = _at_most(seconds, TARGETS["drain_s"])
    return out


def _at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def table(report: dict[str, Any]) -> str:
    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    head = (
        f"{'nodes':>6} {'who':>8} {'start s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'missed':>6} {'cpu s/1k ev':>11} {'peak MB':>8}"
    )
    lines = [head, "-" * len(head)]
    for size in report["sizes"]:
        for who in ("floor", "operator"):
            data = size.get(who) or {}
            lat = data.get("latency") or {}
            lines.append(
                f"{size['nodes']:>6} {who:>8} {cell(data.get('startup_s')):>8} "
                f"{cell(lat.get('p50_ms')):>8} {cell(lat.get('p95_ms')):>8} "
                f"{cell(lat.get('p99_ms')):>8} {cell(lat.get('missed')):>6} "
                f"{cell(data.get('cpu_s_per_1000_events')):>11} {cell(data.get('peak_rss_mb')):>8}"
            )
        r = size["ratios"]
        lines.append(
            f"{'':>6} {'ratio':>8} {'':>8} {cell(r['p50']):>8} {'':>8} {'':>8} {'':>6} "
            f"{cell(r['cpu_per_event']):>11}   (load {size['load_average']})"
        )
    drain = report.get("drain")
    if drain:
        emptied = cell(_round(drain["fault_to_empty_s"]))
        evicting = cell(_round(drain.get("first_eviction_to_empty_s")))
        lines.append(
            f"drain of {drain['pods']} pods: fault -> empty {emptied} s, "
            f"first eviction -> empty {evicting} s"
        )
    sim = report.get("simulator")
    if sim:
        lines.append(
            f"simulator: {sim.get('nodes')} nodes x {sim.get('days')} days in "
            f"{sim.get('cpu_seconds')} CPU s = "
            f"{sim.get('node_days_per_cpu_second')} node-days/CPU s"
        )
    v = report["targets"]
    lines.append(
        f"targets at {v['at_nodes']} nodes: p99 {cell(v['p99_ms'])} ms (<250: {v['p99_ok']}), "
        f"p50 ratio {cell(v['p50_ratio'])} (<=2: {v['p50_ratio_ok']}), cpu ratio "
        f"{cell(v['cpu_ratio'])} (<=1.5: {v['cpu_ratio_ok']}), peak RSS {cell(v['peak_rss_mb'])}"
        f" MB (<300: {v['rss_ok']})"
        + (f", drain {cell(v.get('drain_s'))} s (<5: {v.get('drain_ok')})" if drain else "")
    )
    return "\n".join(lines)


def run(plan: Plan, *, sim: bool, quick: bool, out: Path | None = RESULTS) -> dict[str, Any]:
    started = time.perf_counter()
    sizes: list[dict[str, Any]] = []
    drain: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="bench-") as directory:
        for index, nodes in enumerate(plan.sizes):
            last = index == len(plan.sizes) - 1
            size = run_size(
                nodes, plan, Path(directory), drain=last and plan.drain_pods > 0, port=_free_port()
            )
            size["ratios"] = ratios(size)
            drain = size.pop("drain", drain)
            sizes.append(size)
            print(f"  {nodes} nodes done in {size['wall_seconds']} s", file=sys.stderr)
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "plan": plan.__dict__ | {"sizes": list(plan.sizes)},
        "sizes": sizes,
        "drain": drain,
        "simulator": simulator(quick) if sim else None,
        "load_average_end": load(),
    }
    report["targets"] = verdicts(sizes, drain)
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="", help="comma-separated node counts")
    parser.add_argument("--faults", type=int, default=None, help="faults per size")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulator speed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    sizes: tuple[int, ...] = (1000,) if quick else (1000, 5000, 10_000)
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    faults = args.faults if args.faults is not None else (50 if quick else 200)
    plan = Plan(sizes=sizes, faults=faults, cpu_window=10.0 if quick else 20.0)
    report = run(plan, sim=not args.no_sim, quick=quick, out=args.out)
    print(table(report))
    print(f"written to {args.out} in {report['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
