"""The reboot protocol (`remediation-operator node reboot`).

A Job's pod runs at least once, not exactly once: it can run again after the node comes
back, and graceful node shutdown can mark it Failed while the node still shows the old
bootID, so a second attempt would reboot the node again when it returns. Two guards:
- the expected bootID (the Node's `status.nodeInfo.bootID` when the step started, given by
  the operator in REMEDIATION_EXPECTED_BOOT_ID): if the kernel's boot_id
  (/proc/sys/kernel/random/boot_id, the same value the kubelet reports) differs, the reboot
  already happened: exit successfully without rebooting;
- a marker on the host (`<state-dir>/reboot-<bootID>`) written before asking for the reboot:
  if it is there and the bootID is still the old one, a reboot was already requested in this
  boot and may still be under way: do not ask again (success; the operator confirms the
  reboot by the new bootID and Ready, never by this Job).
The request itself is the platform's (platform.py): `systemctl reboot` through nsenter on
systemd hosts, `apiclient reboot` on Bottlerocket, none elsewhere (a permanent failure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from remediation_operator.node.host import Ran
from remediation_operator.node.platform import Platform
from remediation_operator.node.result import Outcome, Result

Runner = Callable[[list[str]], Ran]


@dataclass(frozen=True)
class Settings:
    expected_boot_id: str
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    state_dir: str = "/var/lib/remediation-operator"
    """On the host (under --host-root): where the marker of a requested reboot is kept."""


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def reboot(
    platform: Platform, run: Runner, settings: Settings, now: Callable[[], datetime]
) -> Result:
    def result(outcome: Outcome, reason: str, message: str, *actions: str) -> Result:
        return Result("reboot", outcome, reason, message, platform.as_result(), (), actions)

    boot = _read(settings.boot_id_file)
    if not boot:
        return result(
            Outcome.PermanentFailure,
            "BootIdUnreadable",
            f"cannot read the boot ID from {settings.boot_id_file}; not rebooting blind",
        )
    if not settings.expected_boot_id:
        return result(
            Outcome.PermanentFailure,
            "NoExpectedBootId",
            "no expected boot ID given (REMEDIATION_EXPECTED_BOOT_ID): a rerun after the"
            " reboot could not be told apart, so the node is not rebooted",
        )
    if boot != settings.expected_boot_id:
        return result(
            Outcome.Succeeded,
            "AlreadyRebooted",
            f"the node already rebooted (boot ID {boot}, was {settings.expected_boot_id});"
            " not rebooting again",
        )
    marker = Path(platform.host_root) / settings.state_dir.lstrip("/") / f"reboot-{boot}"
    if marker.exists():
        return result(
            Outcome.Succeeded,
            "RebootPending",
            f"a reboot was already requested in this boot ({_read(str(marker))}); not asking"
            " again while it may still be under way",
        )
    argv = platform.reboot()
    if argv is None:
        return result(
            Outcome.PermanentFailure,
            "NoRebootPath",
            f"no known way to reboot this host (os {platform.os_id or 'unknown'}: neither"
            " systemd nor Bottlerocket)",
        )
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(now().isoformat(), encoding="utf-8")
    ran = run(argv)
    done = f"{' '.join(argv[-2:])} -> exit {ran.code}"
    if ran.code != 0:
        # The request was refused: no reboot is under way, so a later attempt may ask again.
        marker.unlink(missing_ok=True)
        return result(Outcome.Failed, "RebootRefused", f"{argv[0]}: {ran.said}", done)
    return result(
        Outcome.Succeeded,
        "RebootRequested",
        f"reboot requested ({'apiclient' if platform.bottlerocket else 'systemctl'});"
        " the operator waits for the new boot ID",
        done,
    )
