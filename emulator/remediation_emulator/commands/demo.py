"""`remediation-operator demo`: watch the operator remediate an emulated GPU fleet.

This is what `make demo` runs, so that a newcomer sees `kubectl get remediations` move without
owning a cluster. It starts the same two programs a user would start by hand, as child
processes: `remediation-operator sandbox` (the API emulator with emulated GPU nodes, kubelet,
node agent and Karpenter) and `remediation-operator run` (the operator, unchanged, talking to
the sandbox through a kubeconfig). It applies `examples/demo-policy.yaml`, injects a few GPU
faults, and redraws the remediations table, with the columns of `kubectl get remediations`,
until Ctrl-C (or `--duration`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

SUMMARY = "Run the operator against an emulated GPU fleet and show its remediations live."
DEMO_POLICY = Path(__file__).with_name("demo-policy.yaml")
"""Package data (examples/demo-policy.yaml links to it), so `demo` works from a wheel."""

OPENING_FAULTS: tuple[tuple[int, str], ...] = (
    (1, "xid-79"),
    (4, "xid-62"),
    (6, "transient"),
)
"""(node index, fault class) injected once the operator is up, so the first minute shows a
reboot-class fault, a reset-class fault and a transient one side by side."""

POLICY_GROUP = "/apis/remediation.gpuops.io/v1alpha1"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=12, help="GPU nodes (default 12)")
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.5,
        metavar="PER_NODE_PER_HOUR",
        help="random faults per node per hour on top of the opening ones (default 0.5)",
    )
    parser.add_argument(
        "--policy",
        default=str(DEMO_POLICY),
        help="policy to apply (default: the demo policy shipped in the package, the same file"
        " as examples/demo-policy.yaml)",
    )
    parser.add_argument(
        "--workdir", default=".sandbox/demo", help="kubeconfig and logs go here (.sandbox/demo)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop by itself after this long (default 0: run until Ctrl-C)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed for the fleet's random choices")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="also show each remediation's message, as `kubectl get remediations -o wide`",
    )


class DemoError(Exception):
    """Something the demo could not set up; the message says what and where to look."""


def run(args: argparse.Namespace) -> int:
    import sys

    try:
        _check(args)
        return _Demo(args).run()
    except DemoError as error:
        print(f"remediation-operator demo: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def _check(args: argparse.Namespace) -> None:
    if args.nodes < max(index for index, _ in OPENING_FAULTS) + 1:
        raise DemoError(f"--nodes: at least {len(OPENING_FAULTS) * 2 + 1} nodes make a demo")
    if not Path(args.policy).is_file():
        raise DemoError(f"--policy: {args.policy} does not exist")
    if args.duration < 0:
        raise DemoError("--duration: must not be negative")


class _Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        import subprocess

        self.args = args
        self.workdir = Path(args.workdir).absolute()
        self.kubeconfig = self.workdir / "kubeconfig"
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.server = ""
        self.token = ""

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        import signal
        import time

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)
        # SIGTERM (e.g. from a CI timeout) stops the demo as cleanly as Ctrl-C does.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            self._start_sandbox()
            self._apply_policy()
            self._start_operator()
            self._inject_opening_faults()
            print(
                f"Watching remediations; Ctrl-C stops. Logs: {self.workdir}/*.log. "
                f"Try: KUBECONFIG={self.kubeconfig} kubectl get rem,nodes",
                flush=True,
            )
            deadline = time.monotonic() + self.args.duration if self.args.duration else None
            self._watch(deadline)
        except KeyboardInterrupt:
            print("\nStopping the operator and the sandbox...", flush=True)
        finally:
            self._stop_children()
        return 0

    def _spawn(self, name: str, argv: list[str]) -> None:
        import os
        import subprocess
        import sys

        log = (self.workdir / f"{name}.log").open("wb")
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1")
        child = subprocess.Popen(
            [sys.executable, "-m", "remediation_operator", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            # Own process group: a terminal's Ctrl-C reaches the demo, which stops the children
            # in order (operator first, so it releases its Lease while the API is still up).
            start_new_session=True,
        )
        self.children.append((name, child))

    def _start_sandbox(self) -> None:
        import time

        print(f"Starting the API emulator with {self.args.nodes} GPU nodes...", flush=True)
        self._spawn(
            "sandbox",
            [
                "sandbox",
                "--nodes",
                str(self.args.nodes),
                "--fault-rate",
                str(self.args.fault_rate),
                "--speed",
                "demo",
                "--seed",
                str(self.args.seed),
                "--node-program",
                "--log-level",
                "info",
                "--kubeconfig",
                str(self.kubeconfig),
            ],
        )
        deadline = time.monotonic() + 180
        while not self.kubeconfig.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise DemoError(
                    f"the sandbox did not start in 180s; see {self.workdir}/sandbox.log"
                )
            time.sleep(0.2)
        self._read_kubeconfig()

    def _start_operator(self) -> None:
        import socket

        with socket.socket() as probe:  # a free port for the operator's metrics endpoint
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        print(f"Starting the operator (metrics on http://127.0.0.1:{port}/metrics)...", flush=True)
        self._spawn(
            "operator",
            [
                "run",
                "--metrics-address",
                f"127.0.0.1:{port}",
                "--namespace",
                "remediation-system",
                "--identity",
                "demo-operator",
                "--log-format",
                "console",
            ],
        )

    def _check_alive(self) -> None:
        for name, child in self.children:
            if child.poll() is not None:
                raise DemoError(
                    f"the {name} exited with code {child.returncode}; see {self.workdir}/{name}.log"
                )

    def _stop_children(self) -> None:
        import signal
        import subprocess

        for _name, child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self.kubeconfig.unlink(missing_ok=True)

    # -- talking to the sandbox --------------------------------------------------------------

    def _read_kubeconfig(self) -> None:
        import yaml

        config = yaml.safe_load(self.kubeconfig.read_text())
        self.server = config["clusters"][0]["cluster"]["server"]
        self.token = config["users"][0]["user"].get("token", "")

    def _request(
        self, method: str, path: str, body: object = None, *, accept: str = "application/json"
    ) -> object:
        import json
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        request = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": accept,
                "Content-Type": content_type,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            if error.code == 409 and method == "POST":
                return None  # already there: the demo is idempotent
            detail = error.read().decode(errors="replace")[:300]
            raise DemoError(f"{method} {path}: HTTP {error.code}: {detail}") from error

    def _apply_policy(self) -> None:
        import yaml

        for document in yaml.safe_load_all(Path(self.args.policy).read_text()):
            if isinstance(document, dict) and document.get("kind") == "RemediationPolicy":
                self._request("POST", f"{POLICY_GROUP}/remediationpolicies", document)
                print(f"Applied RemediationPolicy {document['metadata']['name']}.", flush=True)

    def _inject_opening_faults(self) -> None:
        nodes = self._node_names()
        for index, fault in OPENING_FAULTS:
            node = nodes[index]
            self._request(
                "PATCH",
                f"/api/v1/nodes/{node}",
                {"metadata": {"annotations": {"sandbox.gpuops.io/inject-fault": fault}}},
            )
            print(f"Injected fault {fault} on {node}.", flush=True)

    def _node_names(self) -> list[str]:
        listing = self._request("GET", "/api/v1/nodes")
        assert isinstance(listing, dict)
        return sorted(item["metadata"]["name"] for item in listing.get("items", []))

    # -- the live view -----------------------------------------------------------------------

    def _watch(self, deadline: float | None) -> None:
        import sys
        import time

        redraw = sys.stdout.isatty()
        shown: object = None
        while deadline is None or time.monotonic() < deadline:
            self._check_alive()
            screen, state = self._screen()
            if redraw:
                sys.stdout.write("\x1b[H\x1b[2J" + screen)
                sys.stdout.flush()
            elif state != shown:  # into a log: print only what changed, not every new AGE
                print(f"--- {time.strftime('%H:%M:%S')}\n{screen}", flush=True)
            shown = state
            time.sleep(2)

    def _screen(self) -> tuple[str, object]:
        """The text to show, and what it says apart from ages (to tell real changes)."""
        from datetime import UTC, datetime

        table = self._request(
            "GET", f"{POLICY_GROUP}/remediations", accept=f"{TABLE},application/json"
        )
        assert isinstance(table, dict)
        now = datetime.now(UTC)
        # The columns `kubectl get remediations` shows: priority 0, or all of them with --wide.
        definitions = table.get("columnDefinitions", [])
        shown = [i for i, c in enumerate(definitions) if self.args.wide or not c.get("priority", 0)]
        columns = [definitions[i]["name"].upper() for i in shown]
        formats = [definitions[i].get("type", "string") for i in shown]
        rows = [
            [_cell(row["cells"][i], kind, now) for i, kind in zip(shown, formats, strict=True)]
            for row in table.get("rows", [])
        ]
        fleet = self._fleet_line()
        ages = {i for i, kind in enumerate(formats) if kind == "date"}
        state = (fleet, [[c for i, c in enumerate(row) if i not in ages] for row in rows])
        return _render(columns, rows) + "\n" + fleet + "\n", state

    def _fleet_line(self) -> str:
        listing = self._request("GET", "/api/v1/nodes")
        assert isinstance(listing, dict)
        items = listing.get("items", [])
        cordoned = sum(1 for n in items if n.get("spec", {}).get("unschedulable"))
        quarantined = sum(
            1
            for n in items
            if any(
                t.get("key") == "remediation.gpuops.io/quarantine"
                for t in n.get("spec", {}).get("taints") or []
            )
        )
        not_ready = sum(
            1
            for n in items
            if not any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions") or []
            )
        )
        # The GPU reset stops the GPU clients with the GPU Operator's node labels and restores
        # them afterwards: a node shows here while its device plugin is stopped.
        stopped = sum(
            1
            for n in items
            if (n.get("metadata", {}).get("labels") or {}).get(
                "nvidia.com/gpu.deploy.device-plugin"
            )
            == "false"
        )
        return (
            f"Fleet: {len(items)} nodes, {cordoned} cordoned, {quarantined} quarantined by us, "
            f"{not_ready} not Ready, {stopped} with GPU clients stopped for a reset."
        )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _cell(value: object, kind: str, now: object) -> str:
    from datetime import datetime

    if value is None:
        return "<none>"
    if kind == "date" and isinstance(value, str) and isinstance(now, datetime):
        try:
            then = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return _age((now - then).total_seconds())
    return str(value)


def _age(seconds: float) -> str:
    """kubectl's short age: 45s, 3m12s under 10 minutes, 76m, 5h, 3d."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 600:
        return f"{seconds // 60}m{seconds % 60}s"
    if seconds < 3 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _render(columns: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "No remediations yet."
    widths = [max(len(col), *(len(row[i]) for row in rows)) for i, col in enumerate(columns)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
    ]
    return "\n".join(lines)
