"""Fail when the release version is not the same everywhere a user meets it.

One release has one version. Its only source is `[project].version` in pyproject.toml; every
other place that names it is a copy this script checks: the emulator distribution (its version
and its pin of the operator), both charts' `version` and `appVersion` (the image tag default is
`appVersion`, so `image.tag` in values.yaml must stay empty), the image tag in docs/install.md's
build commands, CHANGELOG.md's newest release (with its "Upgrade notes"), and the version the
installed distribution reports (`remediation-operator --version`). A 0.2.0 chart that deploys a
0.1.0 image crash-loops (the chart passes flags the old binary does not know), which is why
a disagreement fails `make lint`.

Usage: python scripts/check_version.py [--root DIR] [--skip-installed]
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ("charts/remediation-operator", "charts/remediation-operator-crd")
DISTRIBUTION = "remediation-operator"
IMAGE_TAG = re.compile(r"remediation-operator:(\S+?)(?=[\s`'\"]|$)", re.M)
RELEASE_HEADING = re.compile(r"^## \[([^\]]+)\]", re.M)


def version(root: Path) -> str:
    """The one source: pyproject.toml's [project].version."""
    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def _emulator(root: Path, wanted: str) -> list[str]:
    project = tomllib.loads((root / "emulator" / "pyproject.toml").read_text())["project"]
    problems = []
    if project["version"] != wanted:
        problems.append(f"emulator/pyproject.toml: version {project['version']}, expected {wanted}")
    pin = f"{DISTRIBUTION}=={wanted}"
    if pin not in project["dependencies"]:
        problems.append(f"emulator/pyproject.toml: dependencies do not pin {pin}")
    return problems


def _charts(root: Path, wanted: str) -> list[str]:
    problems = []
    for chart in CHARTS:
        meta = yaml.safe_load((root / chart / "Chart.yaml").read_text())
        for key in ("version", "appVersion"):
            if str(meta.get(key)) != wanted:
                problems.append(f"{chart}/Chart.yaml: {key} {meta.get(key)}, expected {wanted}")
    values = yaml.safe_load((root / CHARTS[0] / "values.yaml").read_text())
    tag = values["image"]["tag"]
    if tag not in ("", None):
        problems.append(
            f"{CHARTS[0]}/values.yaml: image.tag {tag!r} overrides appVersion; leave it empty"
        )
    return problems


def _docs(root: Path, wanted: str) -> list[str]:
    text = (root / "docs" / "install.md").read_text()
    tags = IMAGE_TAG.findall(text)
    if not tags:
        return [
            "docs/install.md: no remediation-operator:<version> image tag in the build commands"
        ]
    return [
        f"docs/install.md: image tag remediation-operator:{tag}, expected {wanted}"
        for tag in tags
        if tag != wanted
    ]


def _changelog(root: Path, wanted: str) -> list[str]:
    path = root / "CHANGELOG.md"
    if not path.is_file():
        return ["CHANGELOG.md is missing"]
    text = path.read_text()
    releases = [r for r in RELEASE_HEADING.findall(text) if r != "Unreleased"]
    if not releases or releases[0] != wanted:
        newest = releases[0] if releases else "none"
        return [f"CHANGELOG.md: newest release is {newest}, expected {wanted}"]
    section = text.split(f"## [{wanted}]", 1)[1].split("\n## [", 1)[0]
    if "### Upgrade notes" not in section:
        return [f"CHANGELOG.md: release {wanted} has no '### Upgrade notes'"]
    return []


def installed_version() -> str | None:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def problems(root: Path, installed: str | None) -> list[str]:
    """Every copy that disagrees with pyproject.toml's version, one line each."""
    wanted = version(root)
    found = _emulator(root, wanted) + _charts(root, wanted) + _docs(root, wanted)
    found += _changelog(root, wanted)
    if installed is not None and installed != wanted:
        found.append(
            f"installed {DISTRIBUTION} reports {installed} (`remediation-operator --version`),"
            f" expected {wanted}: run `make install`"
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    parser.add_argument(
        "--skip-installed",
        action="store_true",
        help="do not compare the installed distribution's version",
    )
    args = parser.parse_args(argv)
    found = problems(args.root, None if args.skip_installed else installed_version() or "none")
    for line in found:
        print(f"check_version: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"check_version: {version(args.root)} everywhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
