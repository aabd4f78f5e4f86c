# Everything a developer or CI needs; `make demo` and `make test` install on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint crds demo bench reliability e2e-kind clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check remediation_operator tests
	$(BIN)/ruff format --check remediation_operator tests
	$(BIN)/mypy
	$(BIN)/lint-imports

crds: install
	$(BIN)/remediation-operator crds --out crds

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
