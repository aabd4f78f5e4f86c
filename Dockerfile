# syntax=docker/dockerfile:1
# The remediation-operator image: `remediation-operator run` as a non-root user on a slim
# Python base with no compilers, pip or build tools in the final stage.
#
# The base is pinned by tag (python:3.11-slim-bookworm: Python 3.11 on Debian 12). No digest is
# recorded because none can be resolved offline where this file is written; a release build
# should pass `--build-arg PYTHON_BASE=python:3.11-slim-bookworm@sha256:<digest>`.
ARG PYTHON_BASE=python:3.11-slim-bookworm

FROM ${PYTHON_BASE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Everything installed comes from the hashed locks (requirements/*.lock, written by `make lock`):
# pip checks every file against its hash and resolves nothing afresh, so two builds of one
# commit install the same bytes. All runtime dependencies ship wheels: nothing is compiled.
COPY requirements/build.lock requirements/operator.lock requirements/
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --require-hashes -r requirements/build.lock \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --require-hashes --only-binary :all: -r requirements/operator.lock
# The operator itself: a wheel built with the locked build tools, installed without its
# dependencies (they are all in place, from the lock).
COPY pyproject.toml README.md ./
COPY remediation_operator ./remediation_operator
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist . \
    && /opt/venv/bin/pip install --no-deps /tmp/dist/*.whl \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM ${PYTHON_BASE}
LABEL org.opencontainers.image.title="remediation-operator" \
      org.opencontainers.image.description="Graduated remediation of GPU nodes on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=build /opt/venv /opt/venv
# Numeric UID/GID (65532, "nonroot" by convention) so `runAsNonRoot` can be verified by the
# kubelet without a passwd entry.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["remediation-operator", "run"]
