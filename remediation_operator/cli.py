"""The `remediation-operator` command: one sub-command per job a user has.

Sub-commands live in `remediation_operator.commands`, one module each; a module there *is* a
sub-command (`check_policy.py` is `check-policy`), so adding one touches nothing else. Other
installed distributions add sub-commands through the `remediation_operator.commands`
entry-point group (the emulator's `sandbox` and `demo`, emulator/pyproject.toml), so the
operator's wheel carries none of their code; a built-in command wins a name clash.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from types import ModuleType

from remediation_operator import commands

ENTRY_POINTS = "remediation_operator.commands"
"""The entry-point group whose members (name = sub-command, value = module) extend the CLI."""


def _version() -> str:
    """The installed distribution's version (what `pip show` and the image report)."""
    try:
        return metadata.version("remediation-operator")
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution)"


def _modules() -> dict[str, ModuleType]:
    """Sub-command name -> module: the entry points of installed distributions, then the
    built-in modules over them. An entry point that cannot load is left out with a one-line
    warning on stderr, so a broken add-on never stops `run`."""
    found: dict[str, ModuleType] = {}
    for entry in metadata.entry_points(group=ENTRY_POINTS):
        try:
            module = entry.load()
        except Exception as exc:  # any import failure of someone else's package
            print(
                f"remediation-operator: ignoring sub-command {entry.name!r} ({entry.value}):"
                f" {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            continue
        found[entry.name] = module
    for info in pkgutil.iter_modules(commands.__path__):
        name = info.name.replace("_", "-")
        found[name] = importlib.import_module(f"remediation_operator.commands.{info.name}")
    return dict(sorted(found.items()))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remediation-operator",
        description="Graduated, budgeted, explained remediation of GPU nodes.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _modules().items():
        summary: str = module.SUMMARY
        command = sub.add_parser(name, help=summary, description=summary)
        add_arguments: Callable[[argparse.ArgumentParser], None] = module.add_arguments
        add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args._run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
