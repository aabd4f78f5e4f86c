"""One version per release: scripts/check_version.py (run by `make lint`) passes on the tree and
fails, naming the copy, when any copy of the version disagrees with pyproject.toml's.

Real: the script, the repository's files (copied), the installed distribution's metadata.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_version", ROOT / "scripts" / "check_version.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_version = _load()
FILES = (
    "pyproject.toml",
    "emulator/pyproject.toml",
    "charts/remediation-operator/Chart.yaml",
    "charts/remediation-operator/values.yaml",
    "charts/remediation-operator-crd/Chart.yaml",
    "docs/install.md",
    "CHANGELOG.md",
)


def copy_of_tree(tmp_path: Path) -> Path:
    for name in FILES:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, target)
    return tmp_path


def test_the_tree_and_the_installed_distribution_agree() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/check_version.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"{wanted} everywhere" in result.stdout


def _replace(path: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        file = root / path
        text = file.read_text()
        assert old in text, f"{old!r} not in {path}"
        file.write_text(text.replace(old, new, 1))

    return edit


VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            _replace(
                "charts/remediation-operator/Chart.yaml",
                f'appVersion: "{VERSION}"',
                'appVersion: "0.0.1"',
            ),
            "charts/remediation-operator/Chart.yaml: appVersion 0.0.1",
        ),
        (
            _replace(
                "charts/remediation-operator-crd/Chart.yaml",
                f"version: {VERSION}",
                "version: 9.9.9",
            ),
            "charts/remediation-operator-crd/Chart.yaml: version 9.9.9",
        ),
        (
            _replace("charts/remediation-operator/values.yaml", 'tag: ""', 'tag: "0.0.1"'),
            "image.tag '0.0.1' overrides appVersion",
        ),
        (
            _replace(
                "docs/install.md",
                f"remediation-operator:{VERSION} .",
                "remediation-operator:0.0.1 .",
            ),
            "docs/install.md: image tag remediation-operator:0.0.1",
        ),
        (
            _replace("CHANGELOG.md", f"## [{VERSION}]", "## [0.0.1]"),
            "CHANGELOG.md: newest release is 0.0.1",
        ),
        (
            _replace(
                "emulator/pyproject.toml",
                f"remediation-operator=={VERSION}",
                "remediation-operator==0.0.1",
            ),
            f"emulator/pyproject.toml: dependencies do not pin remediation-operator=={VERSION}",
        ),
        (
            _replace("pyproject.toml", f'version = "{VERSION}"', 'version = "7.0.0"'),
            "charts/remediation-operator/Chart.yaml: version",
        ),
    ],
    ids=[
        "chart-appVersion",
        "crd-chart-version",
        "image-tag",
        "docs",
        "changelog",
        "emulator-pin",
        "bump-one",
    ],
)
def test_a_copy_that_disagrees_is_named(
    tmp_path: Path, edit: Callable[[Path], None], named: str
) -> None:
    root = copy_of_tree(tmp_path)
    assert check_version.problems(root, installed=None) == []
    edit(root)
    found = check_version.problems(root, installed=None)
    assert any(named in line for line in found), found


def test_a_stale_install_is_named(tmp_path: Path) -> None:
    root = copy_of_tree(tmp_path)
    [line] = check_version.problems(root, installed="0.0.1")
    assert "remediation-operator --version" in line
    assert "make install" in line


def test_upgrade_notes_are_required(tmp_path: Path) -> None:
    root = copy_of_tree(tmp_path)
    changelog = root / "CHANGELOG.md"
    section = f"## [{VERSION}]"
    head, rest = changelog.read_text().split(section, 1)
    body, later = rest.split("\n## [", 1)
    changelog.write_text(
        head + section + body.replace("### Upgrade notes", "### Notes") + "\n## [" + later
    )
    assert check_version.problems(root, installed=None) == [
        f"CHANGELOG.md: release {VERSION} has no '### Upgrade notes'"
    ]
