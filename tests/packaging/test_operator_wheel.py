"""The operator as a user installs it: its wheel in an empty virtualenv, dependencies from the lock.

The recipe is the Dockerfile's, step for step, without Docker: a build venv from
requirements/build.lock builds the wheel (`pip wheel --no-deps --no-build-isolation`); a fresh
venv gets requirements/operator.lock (`--require-hashes`) and then the wheel with `--no-deps`.
So a dependency missing from the lock, a module missing from the wheel, or a runtime import of
a development-only package (the official `kubernetes` client) fails here, not in the image.
The emulator's distribution (emulator/) is built beside it: the operator's venv must hold none
of it, and a second venv with both wheels must have the `sandbox` and `demo` commands it adds.
Needs PyPI (or pip's cache); it takes about a minute.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EMULATOR = tomllib.loads((ROOT / "emulator" / "pyproject.toml").read_text())["project"]
OPERATOR_COMMANDS = {"check-policy", "crds", "node", "run", "simulate"}
EMULATOR_COMMANDS = {"demo", "sandbox"}
SIZE_LIMIT_MB = 100
"""Issue 14's target for the installed operator (site-packages without pip and setuptools,
which the image removes)."""
INSTALLER_ONLY = {"pip", "setuptools"}

pytestmark = [
    pytest.mark.timeout(600),
    # One worker under `make test`'s xdist runs the module: its two virtualenvs are
    # module-scoped, built once.
    pytest.mark.xdist_group("operator-wheel"),
]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path
    site_packages: Path
    emulator_wheel: Path

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )


def commands(help_text: str) -> set[str]:
    """The sub-command names `remediation-operator --help` lists (argparse's 4-space indent)."""
    return set(re.findall(r"^    ([a-z][a-z-]*)\b", help_text, flags=re.MULTILINE))


def venv_with(venv: Path, *wheels: Path) -> None:
    """A fresh venv: the operator's lock (hashes checked), then `wheels` without dependencies."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip(
        venv,
        "install",
        "--quiet",
        "--require-hashes",
        "-r",
        str(ROOT / "requirements/operator.lock"),
    )
    pip(venv, "install", "--quiet", "--no-deps", *map(str, wheels))


def pip(venv: Path, *args: str) -> None:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # what the Dockerfile copies; building writes build/ there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(
        ROOT / "remediation_operator",
        source / "remediation_operator",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(
        ROOT / "emulator", work / "emulator", ignore=shutil.ignore_patterns("__pycache__")
    )
    build, operator = work / "build", work / "operator"
    subprocess.run([sys.executable, "-m", "venv", str(build)], check=True, timeout=120)
    pip(
        build, "install", "--quiet", "--require-hashes", "-r", str(ROOT / "requirements/build.lock")
    )
    for project in (source, work / "emulator"):
        pip(
            build,
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work / "dist"),
            str(project),
        )
    (wheel,) = (work / "dist").glob("remediation_operator-*.whl")
    (emulator_wheel,) = (work / "dist").glob("remediation_operator_emulator-*.whl")
    venv_with(operator, wheel)
    (site,) = (operator / "lib").glob("python3*/site-packages")
    return Installed(wheel, operator / "bin", site, emulator_wheel)


@pytest.fixture(scope="module")
def with_emulator(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a second venv: the operator's lock, the operator's and the emulator's wheels
    (the emulator needs nothing the operator's lock does not hold)."""
    venv = tmp_path_factory.mktemp("emulator") / "venv"
    venv_with(venv, installed.wheel, installed.emulator_wheel)
    return venv / "bin"


def test_the_installed_operator_reports_its_version(installed: Installed) -> None:
    result = installed.run("remediation-operator", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"remediation-operator {PROJECT['version']}"


def test_run_help_names_the_connection_flags(installed: Installed) -> None:
    result = installed.run("remediation-operator", "run", "--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--kubeconfig", "--context", "--namespace", "--metrics-address"):
        assert flag in result.stdout


def test_the_operator_wheel_holds_no_emulator_code(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert any(n.startswith("remediation_operator/commands/run.py") for n in names)
    leaked = [
        n
        for n in names
        if n.startswith(("remediation_emulator/", "remediation_operator/emulator/"))
        or re.search(r"commands/(sandbox|demo)\.py$|demo-policy\.yaml$", n)
    ]
    assert leaked == []


def test_the_installed_operator_has_no_emulator_modules_or_commands(installed: Installed) -> None:
    probe = installed.run(
        "python",
        "-c",
        "import importlib.util as u;"
        "print(u.find_spec('remediation_emulator'), u.find_spec('remediation_operator.emulator'))",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["None", "None"]
    shown = installed.run("remediation-operator", "--help")
    assert shown.returncode == 0, shown.stderr
    assert commands(shown.stdout) == OPERATOR_COMMANDS
    missing = installed.run("remediation-operator", "sandbox", "--help")
    assert missing.returncode == 2
    assert "invalid choice: 'sandbox'" in missing.stderr


def test_the_emulator_wheel_adds_sandbox_and_demo(with_emulator: Path) -> None:
    shown = subprocess.run(
        [str(with_emulator / "remediation-operator"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert commands(shown.stdout) == OPERATOR_COMMANDS | EMULATOR_COMMANDS
    for command in EMULATOR_COMMANDS:
        helped = subprocess.run(
            [str(with_emulator / "remediation-operator"), command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert helped.returncode == 0, helped.stderr
        assert "--nodes" in helped.stdout


@pytest.fixture
def installed_sandbox(with_emulator: Path, tmp_path: Path) -> Iterator[Path]:
    """`remediation-operator sandbox` from the installed wheels, run outside any checkout;
    yields its kubeconfig once written (the fleet built, the operator's CRDs applied)."""
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [str(with_emulator / "remediation-operator"), "sandbox", "--nodes", "2", "--speed",
         "fast", "--kubeconfig", str(kubeconfig)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "no kubeconfig within 60s"
            time.sleep(0.1)
        yield kubeconfig
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_the_installed_sandbox_serves_a_fleet_and_the_operators_crds(
    installed_sandbox: Path,
) -> None:
    """Package data (the fleet's fault catalogue and NodeClaim CRD) and the operator's CRD
    models reach the installed sandbox, with no repository around it."""
    config = yaml.safe_load(installed_sandbox.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"]["token"]

    def get(path: str) -> dict[str, object]:
        request = urllib.request.Request(
            server + path, headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body: dict[str, object] = json.loads(response.read())
            return body

    nodes = get("/api/v1/nodes")["items"]
    assert isinstance(nodes, list)
    assert len(nodes) == 2
    crds = get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    assert isinstance(crds, list)
    names = {crd["metadata"]["name"] for crd in crds}
    assert {"remediations.remediation.gpuops.io", "nodeclaims.karpenter.sh"} <= names


def test_the_emulator_pins_the_operators_version_and_dependencies() -> None:
    """emulator/pyproject.toml needs the operator at exactly its version, and any package both
    use at the operator's pin, so one lock installs both."""
    wanted = {
        normalized(name): version
        for name, _, version in (d.partition("==") for d in PROJECT["dependencies"])
    }
    wanted["remediation-operator"] = PROJECT["version"]
    pins = {
        normalized(name): version
        for name, _, version in (d.partition("==") for d in EMULATOR["dependencies"])
    }
    assert "remediation-operator" in pins
    assert {name: wanted.get(name) for name in pins} == pins
    assert EMULATOR["version"] == PROJECT["version"]


def test_the_operator_starts_without_the_official_kubernetes_client(
    installed: Installed, tmp_path: Path
) -> None:
    """The whole start path (kopf, handlers, credentials) imports; with no cluster it ends
    with the one-line credentials error, not an ImportError."""
    probe = installed.run(
        "python", "-c", "import importlib.util as u; print(u.find_spec('kubernetes'))"
    )
    assert probe.stdout.strip() == "None"
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    result = installed.run(
        "remediation-operator", "run", "--metrics-address", "127.0.0.1:0", env=env
    )
    assert result.returncode == 1
    lines = [json.loads(line) for line in (result.stdout + result.stderr).strip().splitlines()]
    assert [line["event"] for line in lines] == ["no_cluster_credentials"]
    assert str(tmp_path / "missing") in lines[0]["error"]


def test_exactly_the_locked_packages_are_installed(installed: Installed) -> None:
    result = installed.run(
        "python", "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"
    )
    have = {
        normalized(p["name"]): p["version"]
        for p in json.loads(result.stdout)
        if normalized(p["name"]) not in INSTALLER_ONLY | {"remediation-operator"}
    }
    locked = {name: versions.pop() for name, versions in lock_pins("operator.lock").items()}
    assert have == locked


def test_the_install_is_under_the_size_target(installed: Installed) -> None:
    total = sum(
        f.stat().st_size
        for entry in installed.site_packages.iterdir()
        if normalized(entry.name.split("-")[0]) not in INSTALLER_ONLY
        for f in ([entry] if entry.is_file() else entry.rglob("*"))
        if f.is_file()
    )
    assert total < SIZE_LIMIT_MB * 1024 * 1024, f"{total / 2**20:.1f} MB"


def normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def lock_pins(lock: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in (ROOT / "requirements" / lock).read_text().splitlines():
        if line[:1].isalnum() and "==" in line:
            name, _, rest = line.partition("==")
            found.setdefault(normalized(name), set()).add(rest.split()[0].rstrip(";"))
    return found


def test_the_locks_match_pyproject_toml() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/check_lock.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "kubernetes" not in lock_pins("operator.lock")


def test_a_pin_changed_without_relocking_is_named(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/check_lock.py", tmp_path / "scripts")
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    pinned = PROJECT["dependencies"][0]  # e.g. "kopf==1.45.2"
    name, _, version = pinned.partition("==")
    pyproject = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(pyproject.replace(f'"{pinned}"', f'"{name}==0.0.1"'))
    result = subprocess.run(
        [sys.executable, str(tmp_path / "scripts/check_lock.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    expected = f"operator.lock pins {normalized(name)} to {version}, pyproject.toml to 0.0.1"
    assert expected in result.stderr
    assert "make lock" in result.stderr
