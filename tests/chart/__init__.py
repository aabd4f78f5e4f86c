"""Tests of the Helm chart, the Dockerfile and the chart tooling (see conftest.py)."""
