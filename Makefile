# Everything a developer or CI needs; `make demo` and `make test` install on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HELM := $(BIN)/helm
HELM3 := $(BIN)/helm3

.PHONY: install lock promtool test e2e e2e-kind lint crds chart-check demo sandbox bench bench-emulator reliability clean

install: $(STAMP)

# Exactly requirements/dev.lock (every file checked against its hash, pip, setuptools and wheel
# included), then the project itself and the emulator's distribution (emulator/: `sandbox`,
# `demo`), editable, with nothing resolved afresh. A pin changed in pyproject.toml reinstalls;
# install stops with a message if the locks were not rewritten.
$(STAMP): pyproject.toml emulator/pyproject.toml requirements/dev.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python scripts/check_lock.py
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/dev.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . -e ./emulator
	@touch $(STAMP)

# Rewrite the hashed locks from pyproject.toml (PyPI only, any platform, Python 3.11): the dev
# lock first (requirements/dev.in: the project's deps and dev extra, the emulator's deps, and the
# build tools), then the operator's (the image's) and the build lock, constrained to the dev
# lock's versions so CI tests exactly what the image ships. Needs PyPI; commit the results.
UV_COMPILE = $(BIN)/uv pip compile --quiet --no-config --index-url https://pypi.org/simple \
	--python-version 3.11 --universal --generate-hashes --custom-compile-command 'make lock'
lock:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet "$$(grep -o 'uv==[0-9.]*' pyproject.toml)"
	$(UV_COMPILE) --no-emit-package remediation-operator \
	  --no-emit-package remediation-operator-emulator -o requirements/dev.lock requirements/dev.in
	$(UV_COMPILE) -c requirements/dev.lock -o requirements/operator.lock pyproject.toml
	$(UV_COMPILE) -c requirements/dev.lock -o requirements/build.lock requirements/build.in
	$(BIN)/python scripts/check_lock.py

# promtool (Debian's `prometheus` package) checks the metrics exposition and the chart's alert
# rules (tests/observability, tests/chart/test_alerts.py); those tests skip without it. CI runs
# as root and installs it; elsewhere this prints the command instead of failing.
promtool:
	@command -v promtool >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get install -y --no-install-recommends prometheus >/dev/null; } \
	  || echo "promtool not installed: run 'apt-get install prometheus' as root"

$(HELM): scripts/install_helm.py | $(STAMP)
	$(BIN)/python scripts/install_helm.py $(HELM)

# Helm 3 as well, for the upgrade test (tests/e2e/test_upgrade.py runs docs/install.md's
# commands with both majors).
$(HELM3): scripts/install_helm.py | $(STAMP)
	$(BIN)/python scripts/install_helm.py --major 3 $(HELM3)

# On TEST_WORKERS processes (pytest-xdist): most tests wait on processes, HTTP and policy
# windows rather than compute, so four share two cores well (D78, docs/testing.md).
# `make test TEST_WORKERS=0` runs them in one process.
TEST_WORKERS ?= 4
test: install $(HELM)
	$(BIN)/python -m pytest -q -m 'not e2e' -n $(TEST_WORKERS) --dist loadgroup

# Against a real kube-apiserver: binaries from E2E_ASSETS (or KUBEBUILDER_ASSETS), or an
# existing cluster from E2E_KUBECONFIG; skips with how to get them when neither is set.
e2e: install $(HELM) $(HELM3)
	$(BIN)/python -m pytest -q -m e2e tests

# The same suite on a kind cluster with the chart installed from a locally built image (needs
# Docker and kind; it cannot run where there is no Docker). Once the Deployment is ready it is
# scaled to zero: the scenarios run their own operator processes (killed, restarted,
# re-credentialed per test), which the installed one would compete with. See docs/e2e.md.
E2E_KIND_CLUSTER ?= remediation-e2e
e2e-kind: install $(HELM)
	kind create cluster --name $(E2E_KIND_CLUSTER) --kubeconfig .e2e/kind.kubeconfig
	docker build -t remediation-operator:e2e .
	kind load docker-image remediation-operator:e2e --name $(E2E_KIND_CLUSTER)
	KUBECONFIG=.e2e/kind.kubeconfig $(HELM) upgrade --install remediation-operator-crd \
	  charts/remediation-operator-crd --namespace remediation-system --create-namespace
	KUBECONFIG=.e2e/kind.kubeconfig $(HELM) upgrade --install remediation-operator \
	  charts/remediation-operator --namespace remediation-system --create-namespace \
	  --set image.repository=remediation-operator --set image.tag=e2e \
	  --set image.pullPolicy=Never --wait
	kubectl --kubeconfig .e2e/kind.kubeconfig -n remediation-system scale deployment --all --replicas=0
	E2E_KUBECONFIG=.e2e/kind.kubeconfig $(BIN)/python -m pytest -q -m e2e tests; \
	  status=$$?; kind delete cluster --name $(E2E_KIND_CLUSTER); exit $$status

lint: install
	$(BIN)/ruff check remediation_operator emulator tests scripts bench
	$(BIN)/ruff format --check remediation_operator emulator tests scripts bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_version.py
	$(BIN)/remediation-operator crds --out crds --out charts/remediation-operator-crd/files --docs docs/policy.md --check

crds: install
	$(BIN)/remediation-operator crds --out crds --out charts/remediation-operator-crd/files --docs docs/policy.md
	$(BIN)/python -m tests.chart.values_schema --write

demo: install
	$(BIN)/remediation-operator demo

sandbox: install
	$(BIN)/remediation-operator sandbox --nodes 16 --fault-rate 2 --speed demo --kubeconfig .sandbox/kubeconfig

bench: install
	$(BIN)/python -m bench.operator_bench

bench-emulator: install
	$(BIN)/python bench/emulator_bench.py

reliability: install
	RELIABILITY_RUNS=50 HYPOTHESIS_PROFILE=random SAFETY_EXAMPLES=2000 $(BIN)/python -m pytest -q -m reliability tests/reliability tests/safety tests/hostile/test_input_limits.py

chart-check: install $(HELM)
	$(BIN)/python -m tests.chart.chart_check

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
