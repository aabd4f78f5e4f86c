"""Shared test configuration.

Real: everything under test. Faked: nothing at this level; each sub-suite's conftest.py says
what it fakes (a manual clock, in-memory ports, the API emulator instead of a cluster).
"""
