"""Benchmarks (`make bench`): run as modules, e.g. `python -m bench.operator_bench`."""
