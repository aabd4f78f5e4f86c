"""`make bench`: the operator's reaction latency, CPU and memory next to a bare watcher's.

Method (docs/performance.md explains the choices): one process serves the API emulator with
N real-size nodes (about 6.6 KB each) and writes 50 irrelevant node status updates per second
(heartbeats, flips of a condition no policy watches) for the whole run. The floor watcher
(bench/floor_watcher.py) and the real operator (`python -m remediation_operator run`) then
watch the same churn side by side while their CPU is read from /proc over several windows at
the same instants (CPU seconds per 1,000 node events, per window; the median, min and max are
reported, and the ratio is taken per window, so load from elsewhere moves both sides alike).
Then each, alone, gets faults on fresh random nodes: the time from the condition write to the
cordon is taken in the cluster process, and the operator's API writes per incident are
counted. At the largest size a node with 110 pods and no PodDisruptionBudget is drained by
the operator. The simulator's speed comes from bench/sim_bench.py when it is there.

Run: .venv/bin/python -m bench.operator_bench [--sizes 1000,5000,10000] [--faults 200]
BENCH_QUICK=1 runs one 1,000-node size with fewer faults (a smoke run of a few minutes).
BENCH_REAL=1 (or --real-server) also runs the latency and CPU parts against a real
kube-apiserver (bench/real_cluster.py: E2E_KUBECONFIG, or E2E_ASSETS / KUBEBUILDER_ASSETS).
Writes bench-results/operator.json and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
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

from bench import bench_cluster, real_cluster

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
    """Seconds per CPU window."""
    cpu_windows: int = 5
    """CPU windows per size (both processes measured over the same instants)."""
    drain_pods: int = 110
    settle: float = 3.0
    fault_timeout: float = 30.0


def cpu_seconds(pid: int) -> float:
    """CPU time of the process: the sum of its threads' /proc schedstat (nanoseconds), not
    /proc/PID/stat's 10 ms ticks, which at 0.3 s per window were a 3-8% error by themselves.
    Falls back to the ticks when schedstat is not there."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int((task / "schedstat").read_text().split()[0])
    except FileNotFoundError:
        total = 0
    if total:
        return total / 1e9
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


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """min / median / max, and (max - min) / median in percent."""
    if not values:
        return {"min": None, "median": None, "max": None, "spread_pct": None}
    median = statistics.median(values)
    return {
        "min": round(min(values), 3),
        "median": round(median, 3),
        "max": round(max(values), 3),
        "spread_pct": round((max(values) - min(values)) / median * 100, 1) if median else None,
    }


def measure_cpu(
    cluster: bench_cluster.Cluster, subjects: dict[str, Subject], plan: Plan
) -> dict[str, Any]:
    """CPU seconds per 1,000 churn events of each subject over `plan.cpu_windows` windows,
    all subjects read at the same instants; per window and summarised (min/median/max)."""
    per: dict[str, list[float]] = {name: [] for name in subjects}
    ratios: list[float] = []
    events_total = 0
    for _ in range(plan.cpu_windows):
        events_before = cluster.call("churned")
        before = {name: cpu_seconds(s.process.pid) for name, s in subjects.items()}
        time.sleep(plan.cpu_window)
        after = {name: cpu_seconds(s.process.pid) for name, s in subjects.items()}
        events = cluster.call("churned") - events_before
        for subject in subjects.values():
            subject.alive()
        if not events:
            continue
        events_total += events
        for name in subjects:
            per[name].append((after[name] - before[name]) / events * 1000)
        if "floor" in subjects and "operator" in subjects and per["floor"][-1] > 0:
            ratios.append(per["operator"][-1] / per["floor"][-1])
    out: dict[str, Any] = {"events": events_total, "window_s": plan.cpu_window}
    for name, subject in subjects.items():
        windows = [round(v, 3) for v in per[name]]
        summary = spread(windows)
        out[name] = {
            "cpu_s_per_1000_events": summary["median"],
            "cpu_spread": summary,
            "windows": windows,
            "rss_mb": round(rss_mb(subject.process.pid), 1),
        }
    out["ratio"] = spread(ratios)
    return out


def writes_per_incident(writes: dict[str, int], incidents: int) -> dict[str, Any]:
    total = sum(writes.values())
    return {
        "incidents": incidents,
        "total": total,
        "per_incident": round(total / incidents, 2) if incidents else None,
        "by_resource": dict(sorted(writes.items())),
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


def run_size(
    nodes: int,
    plan: Plan,
    tmp: Path,
    *,
    drain: bool,
    port: int,
    real: Path | None = None,
    cleanup: bool = False,
) -> dict[str, Any]:
    """One fleet size: floor and operator side by side for CPU, then each alone for latency.

    `real`: the admin kubeconfig of a real API server (bench/real_cluster.py); the drain is
    then skipped (no kubelet runs the pods it would evict)."""
    started = time.perf_counter()
    spec = bench_cluster.Spec(nodes=nodes, drain_pods=plan.drain_pods if real is None else 0)
    cluster: bench_cluster.Cluster = (
        bench_cluster.Cluster(spec)
        if real is None
        else real_cluster.RealCluster(spec, real, cleanup=cleanup)
    )
    out: dict[str, Any] = {
        "nodes": nodes,
        "server": "emulator" if real is None else "kube-apiserver",
        "seed_seconds": round(cluster.seed_seconds, 1),
    }
    floor: Subject | None = None
    operator: Subject | None = None
    try:
        cluster.call("churn", plan.churn_rate)
        floor, ready = start_floor(cluster, tmp)
        out["floor"] = {"startup_s": round(ready, 2)}
        operator, ready = start_operator(cluster, tmp, port)
        out["operator"] = {"startup_s": round(ready, 2)}
        time.sleep(plan.settle)
        for who, subject in (("floor", floor), ("operator", operator)):
            quiet = wait_quiet(subject) if plan.settle >= 1 else 0.0
            out[who]["quiet_after_s"] = round(quiet, 1)
        cpu = measure_cpu(cluster, {"floor": floor, "operator": operator}, plan)
        for who in ("floor", "operator"):
            out[who] |= cpu.pop(who)
        out["cpu"] = cpu
        floor_peak = peak_rss_mb(floor.process.pid)
        floor.stop()
        if plan.faults:
            mark = cluster.call("write_mark")
            faults = cluster.call("faults", plan.faults, plan.fault_rate, plan.fault_timeout)
            out["operator"]["latency"] = latency(faults)
            time.sleep(plan.settle)  # the Events and summary writes posted in the background
            writes = cluster.call("writes_since", mark)
            out["operator"]["api_writes"] = writes_per_incident(writes, len(faults["latencies"]))
        if drain:
            out["drain"] = cluster.call("drain", 60.0)
        operator.alive()
        out["operator"]["peak_rss_mb"] = round(peak_rss_mb(operator.process.pid), 1)
        operator.stop()
        if plan.faults:
            cluster.call("heal")
            floor, _ = start_floor(cluster, tmp)
            time.sleep(plan.settle)
            faults = cluster.call("faults", plan.faults, plan.fault_rate, plan.fault_timeout)
            out["floor"]["latency"] = latency(faults)
            floor_peak = max(floor_peak, peak_rss_mb(floor.process.pid))
        out["floor"]["peak_rss_mb"] = round(floor_peak, 1)
    finally:
        for running in (floor, operator):
            if running is not None:
                running.stop()
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
        # The median of the per-window ratios: both processes were read at the same instants.
        "cpu_per_event": (size.get("cpu") or {}).get("ratio", {}).get("median")
        or ratio(operator.get("cpu_s_per_1000_events"), floor.get("cpu_s_per_1000_events")),
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


def _size_lines(size: dict[str, Any]) -> list[str]:
    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    lines = []
    for who in ("floor", "operator"):
        data = size.get(who) or {}
        lat = data.get("latency") or {}
        cpu = data.get("cpu_spread") or {}
        lines.append(
            f"{size['nodes']:>6} {who:>8} {cell(data.get('startup_s')):>8} "
            f"{cell(lat.get('p50_ms')):>8} {cell(lat.get('p95_ms')):>8} "
            f"{cell(lat.get('p99_ms')):>8} {cell(lat.get('missed')):>6} "
            f"{cell(cpu.get('median')):>7} {cell(cpu.get('min')):>6}-{cell(cpu.get('max')):<6} "
            f"{cell(data.get('peak_rss_mb')):>8}"
        )
    r = size["ratios"]
    spread_ = (size.get("cpu") or {}).get("ratio") or {}
    lines.append(
        f"{'':>6} {'ratio':>8} {'':>8} {cell(r['p50']):>8} {'':>8} {'':>8} {'':>6} "
        f"{cell(r['cpu_per_event']):>7} {cell(spread_.get('min')):>6}-"
        f"{cell(spread_.get('max')):<6} {'':>8} (load {size['load_average']})"
    )
    writes = (size.get("operator") or {}).get("api_writes")
    if writes:
        parts = ", ".join(f"{k} {v}" for k, v in writes["by_resource"].items())
        lines.append(
            f"{'':>6} API writes per incident: {cell(writes['per_incident'])} "
            f"({writes['total']} for {writes['incidents']} faults: {parts})"
        )
    return lines


def table(report: dict[str, Any]) -> str:
    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    head = (
        f"{'nodes':>6} {'who':>8} {'start s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'missed':>6} {'cpu s/1k ev (median, min-max)':>21} {'peak MB':>8}"
    )
    lines = [head, "-" * len(head)]
    for size in report["sizes"]:
        lines += _size_lines(size)
    real = report.get("real_server")
    if real:
        lines.append("on a real kube-apiserver:")
        for size in real:
            lines += _size_lines(size)
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


def run(
    plan: Plan, *, sim: bool, quick: bool, out: Path | None = RESULTS, real: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    sizes: list[dict[str, Any]] = []
    real_sizes: list[dict[str, Any]] = []
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
        for nodes in plan.sizes if real else ():
            workdir = Path(directory) / f"real-{nodes}"
            with real_cluster.real_server(workdir) as (kubeconfig, existing):
                if kubeconfig is None:
                    raise RuntimeError(
                        "--real-server: set E2E_KUBECONFIG, or E2E_ASSETS (KUBEBUILDER_ASSETS) "
                        "to a directory with etcd and kube-apiserver (see docs/performance.md)"
                    )
                size = run_size(
                    nodes,
                    plan,
                    Path(directory),
                    drain=False,
                    port=_free_port(),
                    real=kubeconfig,
                    cleanup=existing,
                )
            size["ratios"] = ratios(size)
            real_sizes.append(size)
            print(f"  {nodes} nodes on kube-apiserver in {size['wall_seconds']} s", file=sys.stderr)
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "plan": plan.__dict__ | {"sizes": list(plan.sizes)},
        "sizes": sizes,
        "real_server": real_sizes or None,
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
    parser.add_argument(
        "--real-server",
        action="store_true",
        help="also run on a real kube-apiserver (E2E_KUBECONFIG, or E2E_ASSETS); BENCH_REAL=1",
    )
    args = parser.parse_args(argv)
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    real = args.real_server or os.environ.get("BENCH_REAL", "") not in ("", "0")
    sizes: tuple[int, ...] = (1000,) if quick else (1000, 5000, 10_000)
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    faults = args.faults if args.faults is not None else (50 if quick else 200)
    plan = Plan(
        sizes=sizes,
        faults=faults,
        cpu_window=10.0 if quick else 20.0,
        cpu_windows=3 if quick else 5,
    )
    report = run(plan, sim=not args.no_sim, quick=quick, out=args.out, real=real)
    print(table(report))
    print(f"written to {args.out} in {report['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
