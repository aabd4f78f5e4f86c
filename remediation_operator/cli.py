"""The `remediation-operator` command: one sub-command per job a user has.

Sub-commands live in `remediation_operator.commands`, one module each, listed here by name.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

COMMANDS: tuple[str, ...] = ()
"""Sub-command names; `check-policy` lives in `remediation_operator.commands.check_policy`."""


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"remediation_operator.commands.{name.replace('-', '_')}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remediation-operator",
        description="Graduated, budgeted, explained remediation of GPU nodes.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
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
