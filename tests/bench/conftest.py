"""Smoke tests of the benchmark harness (`make bench`) at a tiny scale.

Real: the API emulator in its own process, the floor watcher and the operator as real
processes (`python -m remediation_operator run`), faults written to the emulator's store and
timed to the cordon, CPU and RSS read from /proc. Shrunk: 30 nodes, a few faults, a
two-second CPU window and a 10-pod drain, so the whole harness runs in well under 30 s; the
figures are not asserted against the targets (they need the full scale and an idle machine),
only that every measurement was taken and is plausible.
"""
