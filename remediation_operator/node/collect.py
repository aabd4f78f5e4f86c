"""Diagnostics before a destructive step (`remediation-operator node collect`).

What support and RMA cases ask for, taken before a reboot or replacement loses it:
`nvidia-smi -q -x`, NVIDIA's `nvidia-bug-report.sh --safe-mode` (run from the driver's root:
the host's, or the GPU Operator's `/run/nvidia/driver`, as NVSentinel's gpu_reset.sh does),
the kernel log of this boot (`journalctl -k -b` in the host's namespaces, else `dmesg`) and a
quick `dcgmi diag -r 1` against the node's own host engine (never a second one).

Where it goes must work whatever zone the node is in (a ReadWriteOnce claim cannot follow
Jobs pinned to nodes in other zones), and is the policy's `diagnostics.destination`, whose
run location (`<destination>/<remediation>/diagnose-<n>`) arrives in
REMEDIATION_DIAGNOSTICS_LOCATION:
- `pvc://...`: the mounted claim's REMEDIATION_DIAGNOSTICS_DIR;
- `hostpath://<dir>`: that directory on the node itself (under the host root): it survives a
  reboot (not a replacement), and a collector (a log shipper, `kubectl debug node/...`) reads
  it;
- any other address (an object store every zone reaches): written on the node under
  `--host-dir` (default /var/log/remediation-operator, `<host-dir>/<remediation>/diagnose-<n>`),
  then the `--upload` command runs with `{dir}` and `{location}` replaced (e.g.
  `aws s3 cp --recursive {dir} {location}`). Without an upload command nothing reaches that
  address: the run fails (`DiagnosticsNotUploaded`) naming where on the node the files are,
  rather than let the Remediation record a location that holds nothing.
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


HOSTPATH_SCHEME = "hostpath://"
"""A destination on the node itself: `hostpath:///var/log/gpu-diagnostics`."""


def target(platform: Platform, settings: Settings) -> Path:
    """Where this run writes: the claim's directory, the hostpath:// directory, else the
    per-node host directory."""
    if settings.claim_dir:
        return Path(settings.claim_dir)
    host = Path(platform.host_root)
    if settings.location.startswith(HOSTPATH_SCHEME):
        where = [p for p in settings.location[len(HOSTPATH_SCHEME) :].split("/") if p]
        if any(p in (".", "..") for p in where):
            raise ValueError(f"{settings.location!r}: '.' and '..' are not allowed")
        return host.joinpath(*where)
    parts = [p for p in settings.location.rstrip("/").split("/") if p][-2:]
    return host / settings.host_dir.lstrip("/") / "/".join(parts or ["run"])


def on_the_node(platform: Platform, path: Path) -> str:
    """`path` as the node sees it (without the host root's mount point)."""
    try:
        return "/" + str(path.relative_to(platform.host_root))
    except ValueError:
        return str(path)


def _needs_upload(settings: Settings) -> bool:
    """An address the program cannot write to by itself (not a claim, not the node)."""
    return bool(settings.location) and not (
        settings.claim_dir or settings.location.startswith(HOSTPATH_SCHEME)
    )


def _driver_tool(platform: Platform, tool: str) -> list[str]:
    if platform.driver_root == GPU_OPERATOR_DRIVER_ROOT:
        return ["chroot", str(Path(platform.host_root) / "run/nvidia/driver"), tool]
    if shutil.which(tool) is None and platform.driver_root == "/":
        return ["chroot", platform.host_root, tool]
    return [tool]


def collect(platform: Platform, run: Runner, settings: Settings) -> Result:
    try:
        out = target(platform, settings)
    except ValueError as error:
        return Result("collect", Outcome.PermanentFailure, "BadArguments", str(error))
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
    shown = on_the_node(platform, out) if not settings.claim_dir else str(out)
    actions = [f"wrote {', '.join(written)} to {shown}"] if written else []
    failed = [c for c in checks if not c.ok]
    missing = f"; not collected: {', '.join(c.name for c in failed)}" if failed else ""
    if _needs_upload(settings) and not settings.upload:
        message = (
            f"{len(written)} file(s) kept on the node in {shown}, not sent to "
            f"{settings.location}: nothing uploads there (give the diagnostics a jobTemplate "
            f"whose image has the uploader and pass --upload){missing}"
        )
        return Result(
            "collect",
            Outcome.Failed,
            "DiagnosticsNotUploaded",
            message,
            platform.as_result(),
            tuple(checks),
            tuple(actions),
        )
    if settings.upload and written:
        command = settings.upload.replace("{dir}", str(out)).replace(
            "{location}", settings.location
        )
        uploaded = run(shlex.split(command))
        checks.append(Check("upload", "", uploaded.code == 0, uploaded.said))
        actions.append(f"upload -> exit {uploaded.code}")
        failed = [c for c in checks if not c.ok]
        missing = f"; not collected: {', '.join(c.name for c in failed)}" if failed else ""
    not_sent = [c for c in failed if c.name == "upload"]
    outcome = Outcome.Succeeded if written and not not_sent else Outcome.Failed
    where = settings.location if settings.upload and written and not not_sent else shown
    message = f"collected {len(written)} file(s) in {where}{missing}"
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
