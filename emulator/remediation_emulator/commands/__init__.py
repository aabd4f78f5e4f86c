"""The `remediation-operator` sub-commands this distribution adds: `sandbox` and `demo`.

They reach the operator's command line through the `remediation_operator.commands` entry-point
group (emulator/pyproject.toml), so the operator's own wheel neither contains nor imports them.
Each module has the operator's command shape: `SUMMARY`, `add_arguments(parser)`, `run(args)`.
"""
