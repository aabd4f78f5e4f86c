"""The Dockerfile, linted as text: no Docker engine exists here to build it.

Checks what an image reviewer would: a multi-stage build on a pinned base, a numeric non-root
USER, the `remediation-operator run` entrypoint, nothing fetched with ADD, nothing `latest`,
no package managers or compilers in the final stage, and every `pip install` either from a
hashed lock (`--require-hashes -r requirements/*.lock`) or of one built wheel with `--no-deps`.
Each rule is shown to fire on a Dockerfile that breaks it, so the lint cannot pass vacuously.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from tests.chart.chart_check import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENTRYPOINT = ["remediation-operator", "run"]
BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|yum|dnf|pip|pip3|gcc|cc|make|build-essential)\b")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str


def instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, argument = stripped.partition(" ")
            found.append(Instruction(keyword.upper(), argument.strip()))
    return found


def stages(text: str) -> list[list[Instruction]]:
    """Instructions grouped by stage (the global ARGs before the first FROM are stage 0)."""
    groups: list[list[Instruction]] = [[]]
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            groups.append([])
        groups[-1].append(instruction)
    return groups


def problems(text: str) -> list[str]:
    found: list[str] = []
    groups = stages(text)
    global_args = {
        name: default
        for i in groups[0]
        if i.keyword == "ARG"
        for name, _, default in [i.argument.partition("=")]
    }
    built = groups[1:]
    if len(built) < 2:
        found.append("not a multi-stage build")
    aliases: set[str] = set()
    for stage in built:
        parts = stage[0].argument.split()
        image = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), ""), parts[0])
        name = image.rsplit("/", 1)[-1]
        pinned = "@sha256:" in image or (":" in name and not name.endswith(":latest"))
        if image.lower() not in aliases and not pinned:
            found.append(f"base image {parts[0]!r} ({image!r}) is not pinned by tag or digest")
        if len(parts) == 3 and parts[1].upper() == "AS":
            aliases.add(parts[2].lower())
    if "latest" in text.lower():
        found.append("mentions `latest`")
    for instruction in instructions(text):
        if instruction.keyword == "ADD" and re.search(r"\b(https?|git)://", instruction.argument):
            found.append(f"ADD fetches a URL: {instruction.argument}")
    final = built[-1] if built else []
    users = [i.argument for i in final if i.keyword == "USER"]
    if not users or not re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]):
        found.append(f"the final stage's USER is not a numeric non-root id: {users}")
    for instruction in final:
        if instruction.keyword == "RUN" and BUILD_TOOLS.search(instruction.argument):
            found.append(f"the final stage runs build tooling: {instruction.argument}")
    for instruction in instructions(text):
        if instruction.keyword == "RUN":
            found += unlocked_installs(instruction.argument)
    entrypoints = [i.argument for i in final if i.keyword == "ENTRYPOINT"]
    if not entrypoints or json.loads(entrypoints[-1]) != ENTRYPOINT:
        found.append(f"ENTRYPOINT is not {ENTRYPOINT} in exec form: {entrypoints}")
    return found


LOCK = re.compile(r"--require-hashes\b[^&;\n]*\s-r\s+(requirements/\S+\.lock)\b")


def unlocked_installs(command: str) -> list[str]:
    """Each `pip install` that could resolve a dependency outside the hashed locks."""
    found = []
    for step in re.split(r"&&|;", command):
        if not re.search(r"\bpip3?\s+install\b", step):
            continue
        if not LOCK.search(step) and "--no-deps" not in step.split():
            found.append(f"pip installs without a hashed lock: {step.strip()}")
    return found


def test_dockerfile_passes_the_lint() -> None:
    assert problems(DOCKERFILE.read_text()) == []


def test_dockerfile_pins_python_311_bookworm_and_runs_as_65532() -> None:
    text = DOCKERFILE.read_text()
    assert "ARG PYTHON_BASE=python:3.11-slim-bookworm" in text
    assert "USER 65532:65532" in text


def test_the_image_installs_the_operator_lock_which_the_build_context_carries() -> None:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    locks = set(LOCK.findall(text))
    assert locks == {"requirements/build.lock", "requirements/operator.lock"}
    sent = set(DOCKERIGNORE.read_text().splitlines())
    for lock in locks:
        assert f"!{lock}" in sent, f"{lock} is not sent to the builder (.dockerignore)"
        lines = (ROOT / lock).read_text().splitlines()
        assert any(line.strip().startswith("--hash=sha256:") for line in lines)
    copied = [i.argument for i in instructions(DOCKERFILE.read_text()) if i.keyword == "COPY"]
    assert any("requirements/operator.lock" in argument for argument in copied)


def test_dockerignore_sends_only_the_package() -> None:
    lines = [
        line
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert set(lines) >= {"!pyproject.toml", "!README.md", "!remediation_operator/"}
    assert not any(line.startswith("!") and ".venv" in line for line in lines)


GOOD = """\
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE} AS build
RUN pip install --require-hashes -r requirements/operator.lock \\
    && pip wheel --no-deps -w /dist . && pip install --no-deps /dist/*.whl
FROM ${BASE}
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
ENTRYPOINT ["remediation-operator", "run"]
"""


@pytest.mark.parametrize(
    ("broken", "complaint"),
    [
        (GOOD.replace("python:3.11-slim-bookworm", "python"), "is not pinned"),
        (GOOD.replace("3.11-slim-bookworm", "latest"), "is not pinned"),
        (GOOD.replace("USER 65532:65532", "USER nonroot"), "numeric non-root"),
        (GOOD.replace("USER 65532:65532", "USER 0"), "numeric non-root"),
        (GOOD.replace("USER 65532:65532\n", ""), "numeric non-root"),
        (GOOD.replace('"run"]', '"serve"]'), "ENTRYPOINT"),
        (GOOD.replace("COPY --from", "RUN apt-get install -y gcc\nCOPY --from"), "build tooling"),
        (GOOD.replace("COPY --from", "ADD https://example.com/x.tgz /x\nCOPY --from"), "ADD"),
        ("\n".join(GOOD.splitlines()[4:]), "multi-stage"),
        (GOOD.replace("--require-hashes -r requirements/operator.lock", "."), "hashed lock"),
        (GOOD.replace("--require-hashes ", ""), "hashed lock"),
        (GOOD.replace("install --no-deps", "install"), "hashed lock"),
    ],
)
def test_lint_catches(broken: str, complaint: str) -> None:
    assert problems(GOOD) == []
    assert any(complaint in problem for problem in problems(broken)), problems(broken)
