"""One module per sub-command of `remediation-operator`.

Each module defines `SUMMARY` (one line), `add_arguments(parser)` and `run(args) -> int`, and
imports what it needs inside `run`, so that a cheap command never pays for an expensive one.
"""
