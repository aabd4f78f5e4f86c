"""Which kind of GPU node this is, found on the host's own filesystem, and how each step is
done there.

- systemd host (AL2023, Ubuntu, RHEL): `/run/systemd/system` exists (sd_booted(3)); reboot is
  `nsenter -t 1 -m -u -i -n -p -- systemctl reboot` from the hostPID pod.
- Bottlerocket (`ID=bottlerocket` in os-release): SELinux refuses that to privileged pods; its
  API is the way (`apiclient reboot`, over the API socket /run/api.sock).
- NVIDIA GPU Operator: the driver container's root is `/run/nvidia/driver` on the host
  (gpu-operator's validator runs `chroot /run/nvidia/driver nvidia-smi`); in its default CDI
  mode nvidia is not containerd's default runtime, so the pod has no nvidia-smi of its own.
- EKS AMI (awslabs/amazon-eks-ami: `/etc/eks`): the driver is on the host, nvidia-smi is
  mounted into the pod by the container toolkit (nvidia is containerd's default runtime).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

GPU_OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
BOTTLEROCKET_API_SOCKET = "/run/api.sock"


@dataclass(frozen=True)
class Platform:
    os_id: str
    """`ID` of the host's /etc/os-release ("" when unreadable)."""
    systemd: bool
    bottlerocket: bool
    eks_ami: bool
    driver_root: str
    """The host path holding the driver and its tools: /run/nvidia/driver under the GPU
    Operator, "/" when the host has them, "" when neither (the pod's own, if any)."""
    host_root: str

    def smi(self) -> list[str]:
        """How to call nvidia-smi here."""
        if self.driver_root == GPU_OPERATOR_DRIVER_ROOT:
            return ["chroot", _join(self.host_root, GPU_OPERATOR_DRIVER_ROOT), "nvidia-smi"]
        if shutil.which("nvidia-smi") is None and self.driver_root == "/":
            return ["chroot", self.host_root, "nvidia-smi"]
        return ["nvidia-smi"]

    def reboot(self) -> list[str] | None:
        """The command that asks the host for an orderly reboot (None: none known here)."""
        if self.bottlerocket:
            # The host's own apiclient (a static binary) unless the image has one.
            client = shutil.which("apiclient") or _join(self.host_root, "/usr/bin/apiclient")
            socket = _join(self.host_root, BOTTLEROCKET_API_SOCKET)
            return [client, "--socket-path", socket, "reboot"]
        if self.systemd:
            return ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "reboot"]
        return None

    def as_result(self) -> dict[str, object]:
        return {
            "os": self.os_id,
            "systemd": self.systemd,
            "bottlerocket": self.bottlerocket,
            "eksAmi": self.eks_ami,
            "driverRoot": self.driver_root,
        }


def _join(root: str, path: str) -> str:
    return str(Path(root) / path.lstrip("/"))


def _os_release(root: Path) -> dict[str, str]:
    for candidate in ("etc/os-release", "usr/lib/os-release"):
        try:
            text = (root / candidate).read_text(encoding="utf-8")
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip('"')
        return values
    return {}


def detect(host_root: str) -> Platform:
    root = Path(host_root)
    release = _os_release(root)
    os_id = release.get("ID", "")
    if (root / GPU_OPERATOR_DRIVER_ROOT.lstrip("/") / "usr/bin/nvidia-smi").exists():
        driver_root = GPU_OPERATOR_DRIVER_ROOT
    elif (root / "usr/bin/nvidia-smi").exists():
        driver_root = "/"
    else:
        driver_root = ""
    return Platform(
        os_id=os_id,
        systemd=(root / "run/systemd/system").is_dir(),
        bottlerocket=os_id == "bottlerocket",
        eks_ami=(root / "etc/eks").is_dir(),
        driver_root=driver_root,
        host_root=host_root,
    )
