"""`remediation-operator sandbox`: a local Kubernetes API with an emulated GPU fleet.

There is no cluster on the machines this project is built on; the sandbox is the cluster a
newcomer (and `make demo`) points the operator and kubectl at. It serves the API emulator,
builds N GPU nodes with NodeClaims and workloads, runs the emulated kubelet, node agent and
Karpenter, applies the project's CRDs, writes a kubeconfig once everything is ready, and
serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SUMMARY = "Serve a local Kubernetes API emulator with an emulated GPU fleet (for demos and tests)."

DEFAULT_KUBECONFIG = ".sandbox/kubeconfig"
FLEET_USER = "gpu-fleet"
"""The user the fleet's own requests are logged as, so they stand apart from the operator's."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=8, help="GPU nodes to create (default 8)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument(
        "--kubeconfig",
        default=DEFAULT_KUBECONFIG,
        help=f"where to write the kubeconfig once ready (default {DEFAULT_KUBECONFIG})",
    )
    parser.add_argument(
        "--crds",
        default=None,
        help="directory of CRD manifests to apply (default: the operator's CRDs, built from the"
        " installed package's models: the same as the repository's crds/)",
    )
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        metavar="PER_NODE_PER_HOUR",
        help="inject random GPU faults at this rate per node per hour (default 0: none)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for every random choice")
    parser.add_argument(
        "--node-program",
        action="store_true",
        help="run executor Jobs that call `remediation-operator node` against a fake GPU node"
        " per node instead of pretending (docs/emulator.md)",
    )
    parser.add_argument(
        "--speed",
        default="demo",
        choices=("fast", "demo", "realistic"),
        help="timing profile: fast (tests), demo (default), realistic (published durations)",
    )
    parser.add_argument(
        "--agent",
        default="eks",
        choices=("eks", "npd", "kind"),
        help="how the node agent reports: eks (default: the EKS node monitoring agent, sticky"
        " until the agent restarts, the newest reason wins, messages appended, 15 s report"
        " tick) or npd (node-problem-detector's GPUProblem, sticky, lookback on restart) or"
        " kind (kinder, for demos: a repair that worked clears the condition;"
        " docs/emulator.md)",
    )
    parser.add_argument(
        "--device-plugin-marks",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="play the NVIDIA device plugin's health check: a critical XID takes a GPU off"
        " allocatable nvidia.com/gpu until the plugin restarts (its pod deleted, a reboot, or"
        " the annotation sandbox.gpuops.io/restart-device-plugin; docs/emulator.md); default:"
        " on with the eks and npd agents, off with kind",
    )
    parser.add_argument("--log-level", default="warning", help="python log level (default warning)")


class SandboxError(Exception):
    """Bad input to the sandbox; the message names the option."""


def _crd_documents(directory: Path) -> list[dict[str, object]]:
    """Every CustomResourceDefinition in *.yaml / *.yml / *.json files of `directory`."""
    import yaml

    if not directory.is_dir():
        raise SandboxError(f"--crds {directory}: not a directory")
    found: list[dict[str, object]] = []
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
    for path in files:
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as exc:
            raise SandboxError(f"--crds {path}: not valid YAML ({exc})") from exc
        for document in documents:
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                found.append(document)
    return found


def _validate(args: argparse.Namespace) -> None:
    if args.nodes < 0:
        raise SandboxError(f"--nodes: must not be negative, got {args.nodes}")
    if not 0 <= args.port <= 65535:
        raise SandboxError(f"--port: must be between 0 and 65535, got {args.port}")
    if args.fault_rate < 0:
        raise SandboxError(f"--fault-rate: must not be negative, got {args.fault_rate}")


async def _serve(
    args: argparse.Namespace, crds: list[dict[str, object]], target: Path, written: list[Path]
) -> None:
    import asyncio
    import os
    import signal

    from remediation_emulator import apiserver, kubeconfig
    from remediation_emulator.fleet import builder, config, fleet
    from remediation_emulator.fleet.client import Connection
    from remediation_emulator.fleet.manifests import Shape

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    settings = config.PROFILES[args.speed].with_(
        fault_rate_per_node_hour=args.fault_rate,
        node_program=args.node_program,
        agent=args.agent,
        device_plugin_marks=args.device_plugin_marks,
    )
    async with apiserver.serve(host=args.host, port=args.port) as api:
        token = kubeconfig.token_for(FLEET_USER)
        connection = Connection(api.url, headers={"Authorization": f"Bearer {token}"})
        async with fleet.running(
            connection, shape=Shape(nodes=args.nodes), config=settings, seed=args.seed
        ) as gpus:
            if crds:
                await builder.install_crds(gpus.client, crds)
            temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            api.write_kubeconfig(temporary)
            os.replace(temporary, target)
            written.append(target)
            built = gpus.built
            took = f" (built in {built.seconds:.1f}s)" if built else ""
            print(
                f"Kubernetes API emulator with {args.nodes} GPU nodes{took} at {api.url}; "
                f"use it with: export KUBECONFIG={target}; kubectl get nodes",
                flush=True,
            )
            await stop.wait()


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import sys

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        _validate(args)
        if args.crds:
            crds = _crd_documents(Path(args.crds))
        else:
            from remediation_operator.api import crds as generated

            crds = list(generated.definitions())
        target = Path(args.kubeconfig).absolute()
        target.parent.mkdir(parents=True, exist_ok=True)
    except SandboxError as exc:
        print(f"remediation-operator sandbox: {exc}", file=sys.stderr)
        return 2
    from remediation_emulator.fleet.client import ApiError

    written: list[Path] = []
    try:
        asyncio.run(_serve(args, crds, target, written))
    except KeyboardInterrupt:
        pass  # interrupted while starting, before the signal handlers were in place
    except (ApiError, TimeoutError) as exc:
        print(f"remediation-operator sandbox: could not set up the fleet: {exc}", file=sys.stderr)
        return 1
    finally:
        # A kubeconfig pointing at a stopped server would only mislead; remove ours.
        for path in written:
            path.unlink(missing_ok=True)
    return 0
