"""`remediation-operator node reset|reboot|validate|collect`: the node-side steps (Jobs).

Each prints one JSON result and writes it to the pod's termination message
(`--termination-log`, /dev/termination-log by default), which the operator reads into the
step's record and Event; the exit code is 0 (succeeded), 1 (failed, may be retried) or 2
(permanent: the ladder climbs at once). Environment variables the operator sets on the Job
stand in for flags: NODE_NAME (downward API), REMEDIATION_EXPECTED_BOOT_ID.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remediation_operator.node.platform import Platform
    from remediation_operator.node.result import Result

SUMMARY = (
    "Run a remediation step on this GPU node (executor Jobs): reset, reboot, validate, collect."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host-root", default="/host", help="where the host's / is mounted")
    parser.add_argument(
        "--termination-log",
        default="/dev/termination-log",
        help="where the JSON result is written for the operator (the pod's terminationMessagePath)",
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    reset = steps.add_parser("reset", help="reset the node's GPUs (one command, checked)")
    reset.add_argument("--gpus", default="", help="comma-separated UUIDs (default: all)")
    reset.add_argument(
        "--expected-gpus",
        type=int,
        default=None,
        help="GPUs the node should have (default: as found)",
    )
    reset.add_argument(
        "--clients",
        default=os.environ.get("REMEDIATION_GPU_CLIENTS", "none"),
        help="how to stop the GPU clients: gpu-operator, eks, none or custom",
    )
    reset.add_argument(
        "--client-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --clients=custom: a node label that stops the GPU clients (repeatable)",
    )
    reset.add_argument(
        "--client-pods",
        action="append",
        default=[],
        metavar="NS/SELECTOR",
        help="with --clients=custom: the clients' pods to wait for (repeatable)",
    )
    reset.add_argument(
        "--clients-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for the clients' pods to go",
    )
    reset.add_argument(
        "--fabric-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for an NVSwitch fabric to be Completed after the reset",
    )
    reset.add_argument(
        "--node", default=os.environ.get("NODE_NAME", ""), help="this node (default NODE_NAME)"
    )
    validate = steps.add_parser("validate", help="check the GPUs after a repair")
    validate.add_argument(
        "--level",
        type=int,
        default=int(os.environ.get("REMEDIATION_DIAG_LEVEL", "2") or 2),
        help="dcgmi diag level (default REMEDIATION_DIAG_LEVEL, else 2)",
    )
    validate.add_argument(
        "--expected-gpus", type=int, default=None, help="GPUs the node should have"
    )
    validate.add_argument(
        "--ready-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for the GPU stack before giving no verdict",
    )
    validate.add_argument(
        "--hostengine", default="localhost:5555", help="the node's DCGM host engine ('' skips)"
    )
    collect = steps.add_parser("collect", help="collect diagnostics before a destructive step")
    collect.add_argument(
        "--location",
        default=os.environ.get("REMEDIATION_DIAGNOSTICS_LOCATION", ""),
        help="this run's location (default REMEDIATION_DIAGNOSTICS_LOCATION)",
    )
    collect.add_argument(
        "--claim-dir",
        default=os.environ.get("REMEDIATION_DIAGNOSTICS_DIR", ""),
        help="a pvc:// destination's mounted directory (default REMEDIATION_DIAGNOSTICS_DIR)",
    )
    collect.add_argument(
        "--host-dir",
        default="/var/log/remediation-operator",
        help="on the host: where the files are kept per node otherwise",
    )
    collect.add_argument(
        "--upload",
        default=os.environ.get("REMEDIATION_DIAGNOSTICS_UPLOAD", ""),
        help="a command run afterwards, {dir} and {location} replaced (e.g. an s3 copy)",
    )
    collect.add_argument(
        "--hostengine", default="localhost:5555", help="the node's DCGM host engine ('' skips)"
    )
    reboot = steps.add_parser("reboot", help="reboot the node once (bootID-guarded)")
    reboot.add_argument(
        "--expected-boot-id",
        default=os.environ.get("REMEDIATION_EXPECTED_BOOT_ID", ""),
        help="reboot only while the node has this boot ID (default REMEDIATION_EXPECTED_BOOT_ID)",
    )
    reboot.add_argument(
        "--boot-id-file",
        default="/proc/sys/kernel/random/boot_id",
        help="where the kernel's boot ID is read",
    )
    reboot.add_argument(
        "--state-dir",
        default="/var/lib/remediation-operator",
        help="on the host: where a requested reboot is marked",
    )


def run(args: argparse.Namespace) -> int:
    from remediation_operator.node import host, platform, result

    found = platform.detect(args.host_root)
    if args.step == "reboot":
        from remediation_operator.node import reboot

        settings = reboot.Settings(args.expected_boot_id, args.boot_id_file, args.state_dir)
        outcome = reboot.reboot(found, host.run, settings, lambda: datetime.now(UTC))
    elif args.step == "collect":
        from remediation_operator.node import collect

        where = collect.Settings(
            args.location, args.claim_dir, args.host_dir, args.upload, args.hostengine
        )
        outcome = collect.collect(found, host.run, where)
    elif args.step == "validate":
        from remediation_operator.node import validate

        checks = validate.Settings(
            args.level, args.expected_gpus, args.ready_timeout, args.hostengine
        )
        outcome = validate.Validate(found, host.run, checks, time.sleep, time.monotonic)()
    else:
        outcome = _reset(args, found)
    result.write(outcome, args.termination_log)
    return outcome.exit_code


def _reset(args: argparse.Namespace, found: Platform) -> Result:
    from remediation_operator.node import clients, host, reset
    from remediation_operator.node.result import Outcome, Result

    settings = reset.Settings(
        gpus=tuple(u for u in args.gpus.split(",") if u),
        expected=args.expected_gpus,
        clients_timeout=args.clients_timeout,
        fabric_timeout=args.fabric_timeout,
    )
    try:
        chosen = clients.preset(args.clients, args.client_label, args.client_pods)
    except ValueError as error:
        return Result("reset", Outcome.PermanentFailure, "BadArguments", str(error))
    if not chosen.labels:
        return reset.Reset(found, host.run, None, settings, time.sleep, time.monotonic)()
    if not args.node:
        message = "--clients needs the node's name: --node or NODE_NAME (downward API)"
        return Result("reset", Outcome.PermanentFailure, "BadArguments", message)
    from remediation_operator.node.kube import KubeNodeApi

    api = KubeNodeApi()
    try:
        gpu_clients = clients.GpuClients(api, args.node, chosen, time.sleep, time.monotonic)
        return reset.Reset(found, host.run, gpu_clients, settings, time.sleep, time.monotonic)()
    finally:
        api.close()
