"""The `remediation-operator` command: one sub-command per job a user has.

Sub-commands live in `remediation_operator.commands`, one module each; a module there *is* a
sub-command (`check_policy.py` is `check-policy`), so adding one touches nothing else.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from remediation_operator import commands


def _names() -> list[str]:
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(commands.__path__))


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"remediation_operator.commands.{name.replace('-', '_')}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remediation-operator",
        description="Graduated, budgeted, explained remediation of GPU nodes.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _names():
        module = _module(name)
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
