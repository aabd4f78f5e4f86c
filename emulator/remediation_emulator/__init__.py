"""A Kubernetes API server emulator and an emulated GPU fleet, for tests and the demo.

It stands apart from the operator (import-linter checks both directions): the operator must
work unchanged against a real kube-apiserver, so it may never rely on anything in here. It is a
distribution of its own (emulator/pyproject.toml), so the operator's wheel and image carry none
of it; its `commands` add `sandbox` and `demo` to `remediation-operator`.
"""
