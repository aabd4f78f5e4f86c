"""Refuse lock files that no longer match pyproject.toml's pins (standard library only).

`make install` and the image install exactly requirements/*.lock; a pin edited in pyproject.toml
without `make lock` would otherwise be silently ignored. Exit 1 naming each stale pin.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def normalized(name: str) -> str:
    """PEP 503: case, runs of `-`, `_` and `.` do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines: list[str]) -> dict[str, set[str]]:
    """name -> versions pinned (a universal lock may pin two versions under markers)."""
    found: dict[str, set[str]] = {}
    for line in lines:
        match = PIN.match(line.strip())
        if match:
            found.setdefault(normalized(match[1]), set()).add(match[2])
    return found


def stale(root: Path = ROOT) -> list[str]:
    """One line per pyproject pin that its lock file does not pin to the same version."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = {
        "operator.lock": project["dependencies"],
        "dev.lock": project["dependencies"] + project["optional-dependencies"]["dev"],
    }
    problems = []
    for lock, requirements in wanted.items():
        path = root / "requirements" / lock
        locked = pins(path.read_text().splitlines()) if path.exists() else {}
        for name, version in pins(requirements).items():
            (want,) = version
            if want not in locked.get(name, set()):
                have = ", ".join(sorted(locked.get(name, set()))) or "nothing"
                problems.append(
                    f"requirements/{lock} pins {name} to {have}, pyproject.toml to {want}"
                )
    return problems


def main() -> int:
    problems = stale()
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("the lock files are stale: run `make lock` and commit them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
