"""Platform detection from the host's filesystem (issue 22) and what each platform runs."""

from __future__ import annotations

from pathlib import Path

from remediation_operator.node import platform


def host(tmp_path: Path, *paths: str, os_id: str = "ubuntu") -> str:
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/os-release").write_text(f"NAME=x\nID={os_id}\n")
    for p in paths:
        target = tmp_path / p
        if p.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")
    return str(tmp_path)


def test_gpu_operator_driver_root_is_used_for_nvidia_smi(tmp_path: Path) -> None:
    root = host(tmp_path, "run/systemd/system/", "run/nvidia/driver/usr/bin/nvidia-smi")
    found = platform.detect(root)
    assert found.driver_root == "/run/nvidia/driver"
    assert found.smi() == ["chroot", f"{root}/run/nvidia/driver", "nvidia-smi"]
    command = found.reboot()
    assert command is not None
    assert command[-2:] == ["systemctl", "reboot"]


def test_eks_ami_and_bottlerocket_are_told_apart(tmp_path: Path) -> None:
    eks = platform.detect(host(tmp_path / "a", "etc/eks/", "run/systemd/system/", os_id="amzn"))
    assert (eks.eks_ami, eks.bottlerocket, eks.systemd) == (True, False, True)
    rocket = platform.detect(host(tmp_path / "b", "run/systemd/system/", os_id="bottlerocket"))
    assert rocket.bottlerocket
    assert rocket.reboot() == [
        f"{tmp_path / 'b'}/usr/bin/apiclient",  # the host's, when the image has none
        "--socket-path",
        f"{tmp_path / 'b'}/run/api.sock",
        "reboot",
    ]
    assert rocket.as_result()["bottlerocket"] is True
