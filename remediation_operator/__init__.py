"""Graduated remediation of GPU nodes: cordon, drain, GPU reset, reboot, replace.

The version lives in pyproject.toml only; `remediation-operator --version` reads it from the
installed distribution and scripts/check_version.py checks every other copy against it.
"""
