"""A fake GPU node: `nvidia-smi`, `nsenter` and `apiclient` executables driven by a state file.

The node program (`remediation-operator node ...`) runs against them in tests and in the
emulated fleet's executor Jobs, exactly as it runs against the real tools: it finds them on
PATH. `state.py` writes and reads the state (GPUs, their faults, what holds them, the boot
ID); `bin/` holds the executables (stdlib-only Python, so any interpreter runs them). What
they print and their exit codes follow nvidia-smi(1) and the sources cited in
docs/emulator.md ("The fake GPU node").
"""
