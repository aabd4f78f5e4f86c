"""The contract suite's two servers: the API emulator and a real kube-apiserver.

Every test in tests/contract/ runs once against each (`server` is parametrized), sending the
same requests the operator, the emulated fleet and kubectl send, and asserting the same status
codes and the fields the operator reads. A difference is a bug in the emulator: fix it there,
or list it in docs/emulator.md.

Real: the emulator over HTTP (in a thread), and etcd + kube-apiserver + kube-controller-manager
from `tests/e2e/control_plane.py` (the E2E suite's launcher, shared for the session). Without
the binaries the real half skips with one line saying how to provide them. Nothing is faked;
each test works in its own namespace and with its own object names, so the real server (which
is shared) never sees two tests collide.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_emulator import apiserver
from tests.e2e.control_plane import SKIP_MESSAGE, RealCluster, _ssl_from_kubeconfig, assets_dir
from tests.e2e.control_plane import real_cluster as real_cluster

ROOT = Path(__file__).resolve().parents[2]
JSON = "application/json"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
PROTOBUF = "application/vnd.kubernetes.protobuf"
GROUP_VERSION = "/apis/remediation.gpuops.io/v1alpha1"
_names = itertools.count()


@dataclass(frozen=True)
class Response:
    code: int
    body: Any
    """The JSON body (a dict), or the raw bytes when it is not JSON."""
    content_type: str

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""

    @property
    def causes(self) -> set[str]:
        """`details.causes[].field` of a Status."""
        details = self.body.get("details") or {} if isinstance(self.body, dict) else {}
        return {str(c.get("field")) for c in details.get("causes") or []}


@dataclass
class Server:
    """One API server as the suite sees it: raw HTTP, watches, kubectl."""

    name: str
    kubeconfig: Path
    home: Path
    compact: Callable[[], None] | None = None
    """Forget watch history (emulator only: a real server's window cannot be forced)."""
    _tls: tuple[str, ssl.SSLContext | None, dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self._tls = _ssl_from_kubeconfig(self.kubeconfig)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        accept: str = JSON,
        params: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Response:
        server, context, headers = self._tls
        url = server + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        sent = {**headers, "Accept": accept}
        if data is not None:
            sent["Content-Type"] = content_type
        request = urllib.request.Request(url, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, context=context, timeout=timeout) as answer:
                return _response(answer.status, answer.read(), answer.headers)
        except urllib.error.HTTPError as error:
            return _response(error.code, error.read(), error.headers)

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        """request() that must succeed; returns the object."""
        answer = self.request(method, path, body, **kwargs)
        assert 200 <= answer.code < 300, f"{method} {path}: {answer.code} {answer.body}"
        assert isinstance(answer.body, dict)
        return answer.body

    def watch(self, path: str, seconds: int, **params: str) -> list[dict[str, Any]]:
        """Every event of a watch that the server ends after `seconds` (timeoutSeconds)."""
        server, context, headers = self._tls
        query = urllib.parse.urlencode({**params, "watch": "1", "timeoutSeconds": str(seconds)})
        request = urllib.request.Request(
            f"{server}{path}?{query}", headers={**headers, "Accept": JSON}
        )
        events = []
        with urllib.request.urlopen(request, context=context, timeout=seconds + 30) as stream:
            for line in stream:
                if line.strip():
                    events.append(json.loads(line))
        return events

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home)}
        return subprocess.run(
            ["kubectl", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def namespace(self) -> str:
        """A new namespace for one test."""
        name = unique("contract")
        self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        if self.name == "real":
            # The ServiceAccount admission plugin refuses pods until the controller-manager
            # has made the namespace's `default` ServiceAccount (about a second); the
            # emulator has no such admission (docs/emulator.md).
            deadline = time.monotonic() + 30
            account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
            while self.request("GET", account).code != 200:
                assert time.monotonic() < deadline, f"no default ServiceAccount in {name}"
                time.sleep(0.1)
        return name


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid() % 10000}-{next(_names)}"


def _response(code: int, raw: bytes, headers: Any) -> Response:
    content_type = str(headers.get("Content-Type", ""))
    body: Any = raw
    if "json" in content_type:
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw
    return Response(code, body, content_type)


def _crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]


@pytest.fixture(scope="session")
def emulator_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    threaded = apiserver.run_in_thread()
    try:
        for crd in _crds():
            threaded.store.create("customresourcedefinitions", crd)
        home = tmp_path_factory.mktemp("emulator")
        config = threaded.write_kubeconfig(home / "kubeconfig")
        yield Server("emulator", config, home, compact=threaded.store.compact)
    finally:
        threaded.stop()


@pytest.fixture(scope="session")
def real_server(
    real_cluster: RealCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Server:
    real_cluster.admin.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))
    return Server("real", real_cluster.kubeconfig, tmp_path_factory.mktemp("real"))


@pytest.fixture(params=["emulator", pytest.param("real", marks=pytest.mark.e2e)])
def server(request: pytest.FixtureRequest) -> Server:
    """Each server in turn; the real half is marked `e2e`, so `make test` runs the emulator
    half and `make e2e` (with the binaries) the real one."""
    chosen: Server = request.getfixturevalue(f"{request.param}_server")
    return chosen


_LEFT_OUT = pytest.StashKey[int]()


def _real_server_given() -> bool:
    return bool(os.environ.get("E2E_KUBECONFIG")) or assets_dir() is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a real server, its half of the suite is left out and said so in one line (at
    the end of the run), instead of one skip per test."""
    if _real_server_given() or "not e2e" in (config.option.markexpr or ""):
        return  # the real half runs, or was not asked for (`make test`)
    real = [i for i in items if i.nodeid.endswith("[real]") and "tests/contract/" in i.nodeid]
    if real:
        config.hook.pytest_deselected(items=real)
        kept = set(map(id, real))
        items[:] = [i for i in items if id(i) not in kept]
        config.stash[_LEFT_OUT] = len(real)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    left_out = config.stash.get(_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"contract: the real-server half ({left_out} tests) did not run: {SKIP_MESSAGE}"
        )


@pytest.fixture
def kubectl_available() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (Debian package `kubectl`)")
