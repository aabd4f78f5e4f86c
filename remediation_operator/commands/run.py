"""`remediation-operator run`: the operator itself (what the Deployment's container runs)."""

from __future__ import annotations

import argparse
import os
import socket

SUMMARY = "Run the operator: watch nodes and policies, remediate faulty GPU nodes."


def _default_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0:8080",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz here (default 0.0.0.0:8080)",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or "remediation-system",
        help="namespace of the leader Lease and the executor Jobs"
        " (default: $POD_NAMESPACE, else remediation-system)",
    )
    parser.add_argument(
        "--executor-namespace",
        default=os.environ.get("EXECUTOR_NAMESPACE") or None,
        metavar="NAMESPACE",
        help="namespace of the GPU-reset and reboot Jobs, which run privileged pods; keep it"
        " apart from --namespace so that one can stay Pod Security `restricted`"
        " (default: $EXECUTOR_NAMESPACE, else --namespace)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig to use (default: the first file in $KUBECONFIG, else ~/.kube/config,"
        " else the in-cluster service account)",
    )
    parser.add_argument(
        "--context",
        default=None,
        help="kubeconfig context to use (default: the kubeconfig's current-context)",
    )
    parser.add_argument(
        "--lease-name",
        default="remediation-operator",
        help="name of the coordination.k8s.io Lease the replicas compete for, in --namespace"
        " (default remediation-operator)",
    )
    parser.add_argument(
        "--lease-duration",
        default="15s",
        help="how long a Lease is valid without renewal; a standby takes over after it"
        " (Go duration, default 15s)",
    )
    parser.add_argument(
        "--renew-deadline",
        default="10s",
        help="how long the leader keeps retrying a renewal before it stops acting"
        " (Go duration, default 10s)",
    )
    parser.add_argument(
        "--retry-period",
        default="2s",
        help="how often candidates try to acquire, and the leader renews, the Lease"
        " (Go duration, default 2s)",
    )
    parser.add_argument(
        "--identity",
        default=_default_identity(),
        help="this replica's name in the Lease (default: $POD_NAME, else the hostname)",
    )
    parser.add_argument(
        "--job-templates",
        default=None,
        metavar="DIR",
        help="directory with gpu-reset.yaml, reboot.yaml, validate.yaml and diagnose.yaml"
        " (batch/v1 Job manifests) used"
        " when a policy gives no jobTemplate",
    )
    parser.add_argument(
        "--retention", default="720h", help="keep finished Remediations this long (720h)"
    )
    parser.add_argument(
        "--job-retention",
        default="1h",
        help="keep an executor Job (GPU reset, reboot, validation, diagnostics) this long after"
        " its step ended, whatever the outcome, for `kubectl logs`; then delete it and its"
        " pods (Go duration, default 1h)",
    )
    parser.add_argument(
        "--watch-quiet-limit",
        default="10m",
        help="/healthz fails when the Node watch delivered nothing (no event, bookmark or"
        " list) for this long; each watch stream lasts 5m (Go duration, default 10m)",
    )
    parser.add_argument(
        "--log-format",
        default="json",
        choices=["json", "console"],
        help="json: one JSON object per line (default); console: for people at a terminal",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="default info; debug adds one `reconciled` line per plan and kopf's watch logs",
    )


def run(args: argparse.Namespace) -> int:
    import sys
    from datetime import timedelta

    from remediation_operator.domain import durations
    from remediation_operator.handlers import process
    from remediation_operator.handlers.runtime import Settings
    from remediation_operator.k8s import executors, leader
    from remediation_operator.observability import endpoints

    def duration(flag: str, text: str) -> timedelta:
        try:
            return durations.parse(text)
        except durations.DurationError as error:
            raise ValueError(f"{flag}: {error}") from error

    try:
        timings = leader.Timings(
            lease_duration=duration("--lease-duration", args.lease_duration),
            renew_deadline=duration("--renew-deadline", args.renew_deadline),
            retry_period=duration("--retry-period", args.retry_period),
        )
        templates = executors.load_templates(args.job_templates)
        address = endpoints.Address.parse(args.metrics_address)
        retention = duration("--retention", args.retention)
        job_retention = duration("--job-retention", args.job_retention)
        watch_quiet = duration("--watch-quiet-limit", args.watch_quiet_limit)
        if watch_quiet <= timedelta(0):
            raise ValueError("--watch-quiet-limit: must be longer than 0s")
    except ValueError as error:
        print(f"remediation-operator run: {error}", file=sys.stderr)
        return 2
    settings = Settings(
        namespace=args.namespace,
        lease_name=args.lease_name,
        identity=args.identity,
        timings=timings,
        retention=retention,
        job_templates=templates,
        executor_namespace=args.executor_namespace or args.namespace,
        job_retention=job_retention,
        watch_quiet=watch_quiet,
    )
    return process.main(
        process.Options(
            settings=settings,
            metrics_address=address,
            log_format=args.log_format,
            log_level=args.log_level,
            kubeconfig=args.kubeconfig,
            context=args.context,
        )
    )
