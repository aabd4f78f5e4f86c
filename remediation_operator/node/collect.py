"""Diagnostics before a destructive step (`remediation-operator node collect`).

What support and RMA cases ask for, taken before a reboot or replacement loses it:
`nvidia-smi -q -x`, NVIDIA's `nvidia-bug-report.sh --safe-mode` (run from the driver's root:
the host's, or the GPU Operator's `/run/nvidia/driver`, as NVSentinel's gpu_reset.sh does),
the kernel log of this boot (`journalctl -k -b` in the host's namespaces, else `dmesg`) and a
quick `dcgmi diag -r 1` against the node's own host engine (never a second one).

Where it goes must work whatever zone the node is in (a ReadWriteOnce claim cannot follow
Jobs pinned to nodes in other zones):
- always a directory on the node itself, under `--host-dir` (default
  /var/log/remediation-operator on the host): `<host-dir>/<remediation>/diagnose-<n>`, named
  from REMEDIATION_DIAGNOSTICS_LOCATION; it survives a reboot (not a replacement), and a
  collector (a log shipper, `kubectl debug node/...`) reads it;
- with a `pvc://` destination, the mounted claim's REMEDIATION_DIAGNOSTICS_DIR instead;
- with `--upload`, a command run afterwards with `{dir}` and `{location}` replaced (e.g.
  `aws s3 cp --recursive {dir} {location}`), for an object store every zone reaches.
Each part is best effort; the result lists what was written and what failed.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remediation_operator.node.host import NOT_FOUND, Ran
from remediation_operator.node.platform import GPU_OPERATOR_DRIVER_ROOT, Platform
from remediation_operator.node.result import Check, Outcome, Result

Runner = Callable[[list[str]], Ran]
BUG_REPORT = "remediation-bug-report"


@dataclass(frozen=True)
class Settings:
    location: str = ""
    """REMEDIATION_DIAGNOSTICS_LOCATION: `<destination>/<remediation>/diagnose-<n>`."""
    claim_dir: str = ""
    """REMEDIATION_DIAGNOSTICS_DIR: the mounted claim's directory (pvc:// destinations)."""
    host_dir: str = "/var/log/remediation-operator"
    upload: str = ""
    hostengine: str = "localhost:5555"


def target(platform: Platform, settings: Settings) -> Path:
    """Where this run writes: the claim's directory, else the per-node host directory."""
    if settings.claim_dir:
        return Path(settings.claim_dir)
    parts = [p for p in settings.location.rstrip("/").split("/") if p][-2:]
    return Path(platform.host_root) / settings.host_dir.lstrip("/") / "/".join(parts or ["run"])


def _driver_tool(platform: Platform, tool: str) -> list[str]:
    if platform.driver_root == GPU_OPERATOR_DRIVER_ROOT:
        return ["chroot", str(Path(platform.host_root) / "run/nvidia/driver"), tool]
    if shutil.which(tool) is None and platform.driver_root == "/":
        return ["chroot", platform.host_root, tool]
    return [tool]


def collect(platform: Platform, run: Runner, settings: Settings) -> Result:
    out = target(platform, settings)
    out.mkdir(parents=True, exist_ok=True)
    checks: list[Check] = []
    written: list[str] = []

    def keep(name: str, ran: Ran, file: str) -> None:
        ok = ran.code == 0 and bool(ran.stdout)
        if ok:
            (out / file).write_text(ran.stdout, encoding="utf-8")
            written.append(file)
        checks.append(Check(name, "", ok, ran.said if not ok else file))

    keep("nvidia-smi", run([*platform.smi(), "-q", "-x"]), "nvidia-smi.xml")
    kernel = run(["nsenter", "-t", "1", "-m", "--", "journalctl", "-k", "-b", "--no-pager"])
    if kernel.code != 0:
        kernel = run(["nsenter", "-t", "1", "-m", "--", "dmesg"])
    keep("kernel-log", kernel, "kernel.log")
    report = run(
        [
            *_driver_tool(platform, "nvidia-bug-report.sh"),
            "--safe-mode",
            "--output-file",
            f"/tmp/{BUG_REPORT}.log",
        ]
    )
    made = _bug_report(platform, out)
    checks.append(Check("nvidia-bug-report", "", report.code == 0 and made, report.said))
    if made:
        written.append(f"{BUG_REPORT}.log.gz")
    if settings.hostengine:
        dcgm = run(["dcgmi", "diag", "-r", "1", "--host", settings.hostengine])
        if dcgm.code != NOT_FOUND and "host engine" not in (dcgm.stderr + dcgm.stdout).lower():
            (out / "dcgm-diag.txt").write_text(dcgm.stdout + dcgm.stderr, encoding="utf-8")
            written.append("dcgm-diag.txt")
    actions = [f"wrote {', '.join(written)} to {out}"] if written else []
    if settings.upload and written:
        command = settings.upload.replace("{dir}", str(out)).replace(
            "{location}", settings.location
        )
        uploaded = run(shlex.split(command))
        checks.append(Check("upload", "", uploaded.code == 0, uploaded.said))
        actions.append(f"upload -> exit {uploaded.code}")
    failed = [c for c in checks if not c.ok]
    outcome = (
        Outcome.Succeeded
        if written and not [c for c in failed if c.name == "upload"]
        else (Outcome.Failed)
    )
    missing = f"; not collected: {', '.join(c.name for c in failed)}" if failed else ""
    message = f"collected {len(written)} file(s) in {out}{missing}"
    return Result(
        "collect",
        outcome,
        "DiagnosticsCollected" if outcome is Outcome.Succeeded else "DiagnosticsIncomplete",
        message,
        platform.as_result(),
        tuple(checks),
        tuple(actions),
    )


def _bug_report(platform: Platform, out: Path) -> bool:
    """Move the bug report from where the driver root's /tmp is on the host into `out`."""
    roots = [Path(platform.host_root)]
    if platform.driver_root == GPU_OPERATOR_DRIVER_ROOT:
        roots.insert(0, Path(platform.host_root) / "run/nvidia/driver")
    for root in [*roots, Path("/")]:
        made = root / "tmp" / f"{BUG_REPORT}.log.gz"
        if made.exists():
            shutil.move(str(made), out / made.name)
            return True
    return False
