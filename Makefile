# Everything a developer or CI needs; `make demo` and `make test` install on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HELM := $(BIN)/helm

.PHONY: install test lint crds chart-check demo sandbox bench bench-emulator reliability clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(HELM): scripts/install_helm.py | $(STAMP)
	$(BIN)/python scripts/install_helm.py $(HELM)

test: install $(HELM)
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check remediation_operator tests scripts bench
	$(BIN)/ruff format --check remediation_operator tests scripts bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/remediation-operator crds --out crds --out charts/remediation-operator/crds --docs docs/policy.md --check

crds: install
	$(BIN)/remediation-operator crds --out crds --out charts/remediation-operator/crds --docs docs/policy.md

demo: install
	$(BIN)/remediation-operator demo

sandbox: install
	$(BIN)/remediation-operator sandbox --nodes 16 --fault-rate 2 --speed demo --kubeconfig .sandbox/kubeconfig

bench: install
	$(BIN)/python -m bench.operator_bench

bench-emulator: install
	$(BIN)/python bench/emulator_bench.py

reliability: install
	RELIABILITY_RUNS=50 $(BIN)/python -m pytest -q -m reliability tests/reliability

chart-check: install $(HELM)
	$(BIN)/python -m tests.chart.chart_check

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
