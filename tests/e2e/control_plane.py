"""A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager.

Why: the API emulator is not a Kubernetes API server, and the differences (404 for a missing
namespace, 429 evictions computed from PDB status, pods stuck Terminating without a kubelet,
schemas and CEL enforced on write, RBAC) are exactly what a user's cluster does. This module
plays the role envtest plays for Go operators: it starts unmodified upstream binaries from a
directory (`E2E_ASSETS`, or `KUBEBUILDER_ASSETS` as setup-envtest prints it), with certificates
made per run by `openssl`, on free loopback ports, and tears everything down afterwards. With
`E2E_KUBECONFIG` it uses an existing cluster instead (kind, for `make e2e-kind`).

Everything here is synchronous (subprocess + urllib) so that a session-scoped fixture can serve
tests of any event loop. `RealCluster` is what tests get: the admin kubeconfig, a small admin
client for setup and assertions, and kubeconfigs for other identities.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

Obj = dict[str, Any]

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
SKIP_MESSAGE = (
    "e2e: no Kubernetes binaries; set E2E_ASSETS (or KUBEBUILDER_ASSETS) to a directory with "
    "etcd, kube-apiserver and kube-controller-manager (`setup-envtest use -p path` gives etcd and "
    "kube-apiserver), or E2E_KUBECONFIG to an existing cluster"
)


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries the tail of its log."""


class ApiError(Exception):
    """A non-2xx answer from the real server (status, Status reason, message)."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


def assets_dir() -> Path | None:
    """The directory of binaries given by the environment, if it holds what we need."""
    for variable in ("E2E_ASSETS", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(variable)
        if value and all((Path(value) / b).is_file() for b in ("etcd", "kube-apiserver")):
            return Path(value)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# Certificates ------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args[:2])} failed: {result.stderr[-1000:]}")


@dataclass(frozen=True)
class Pki:
    """A CA made for one run, and what the servers need from it."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        _openssl("genrsa", "-out", "ca.key", "2048", cwd=directory)
        _openssl(
            "req", "-x509", "-new", "-key", "ca.key", "-days", "2", "-subj", "/CN=e2e-ca",
            "-out", "ca.crt", cwd=directory,
        )  # fmt: skip
        pki = cls(directory)
        pki.issue("serving", "kube-apiserver", sans="IP:127.0.0.1,DNS:localhost")
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
        return pki

    def issue(
        self, name: str, common_name: str, groups: tuple[str, ...] = (), sans: str = ""
    ) -> tuple[Path, Path]:
        """A key and certificate signed by the CA: CN is the user, each O a group."""
        d = self.directory
        subject = "/CN=" + common_name + "".join(f"/O={g}" for g in groups)
        _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
        _openssl(
            "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d
        )
        extensions = d / f"{name}.ext"
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment"]
        lines.append("extendedKeyUsage=" + ("serverAuth" if sans else "clientAuth"))
        if sans:
            lines.append(f"subjectAltName={sans}")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", extensions.name, "-out", f"{name}.crt",
            cwd=d,
        )  # fmt: skip
        return d / f"{name}.crt", d / f"{name}.key"


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path | None,
    *,
    user: str,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """A kubeconfig with one context, certificate data inlined (portable across directories)."""
    cluster: Obj = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    credentials: Obj = {}
    if cert is not None and key is not None:
        credentials["client-certificate-data"] = base64.b64encode(cert.read_bytes()).decode()
        credentials["client-key-data"] = base64.b64encode(key.read_bytes()).decode()
    if token is not None:
        credentials["token"] = token
    context: Obj = {"cluster": "e2e", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "e2e", "context": context}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# The admin client ----------------------------------------------------------------------------


def _ssl_from_kubeconfig(path: Path) -> tuple[str, ssl.SSLContext | None, dict[str, str]]:
    """server, TLS context and headers of the current context (data or file entries)."""
    config = yaml.safe_load(path.read_text())
    ctx_name = config["current-context"]
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
    users = config.get("users") or []
    user: Obj = next((u["user"] for u in users if u["name"] == ctx.get("user")), {})
    server = str(cluster["server"]).rstrip("/")
    headers: dict[str, str] = {}
    if user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    if not server.startswith("https://"):
        return server, None, headers
    scratch = Path(tempfile.mkdtemp(prefix="e2e-tls-"))

    def material(entry: Obj, key: str) -> str | None:
        if entry.get(f"{key}-data"):
            file = scratch / key
            file.write_bytes(base64.b64decode(entry[f"{key}-data"]))
            return str(file)
        if entry.get(key):
            return str((path.parent / entry[key]).resolve())
        return None

    context = ssl.create_default_context(cafile=material(cluster, "certificate-authority"))
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert = material(user, "client-certificate")
    if cert:
        context.load_cert_chain(cert, material(user, "client-key"))
    shutil.rmtree(scratch, ignore_errors=True)
    return server, context, headers


class AdminClient:
    """A small synchronous JSON client for test setup and assertions (not the code under test)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.server, self.ssl_context, self._headers = _ssl_from_kubeconfig(kubeconfig)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Obj:
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **self._headers}
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, context=self.ssl_context, timeout=timeout) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                status_body = json.loads(text)
            except ValueError:
                status_body = {"message": text[:300]}
            raise ApiError(
                error.code,
                str(status_body.get("reason", "")),
                str(status_body.get("message", "")),
                status_body,
            ) from None
        result: Obj = json.loads(text) if text else {}
        return result

    def get(self, path: str, **params: str) -> Obj:
        return self.request("GET", path, params=params or None)

    def watch(self, path: str, seconds: int, **params: str) -> list[Obj]:
        """The events of a watch on `path` that the server ends after `seconds` (blocking:
        run it in a thread to watch while something happens)."""
        query = urllib.parse.urlencode({**params, "watch": "true", "timeoutSeconds": str(seconds)})
        headers = {"Accept": "application/json", **self._headers}
        request = urllib.request.Request(f"{self.server}{path}?{query}", headers=headers)
        with urllib.request.urlopen(request, context=self.ssl_context, timeout=seconds + 10) as r:
            return [json.loads(line) for line in r if line.strip()]

    def find(self, path: str) -> Obj | None:
        try:
            return self.get(path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any, kind: str = "merge") -> Obj:
        types = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }
        return self.request("PATCH", path, body, content_type=types[kind])

    def delete(self, path: str, *, grace_period_seconds: int | None = None) -> Obj | None:
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        try:
            return self.request("DELETE", path, options)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def apply(self, obj: Obj, *, manager: str = "e2e") -> Obj:
        """Server-side apply of one object (any kind the server knows, found by discovery)."""
        path = self.path_of(obj)
        return self.request(
            "PATCH",
            path,
            obj,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": manager, "force": "true"},
        )

    def path_of(self, obj: Obj, *, collection: bool = False) -> str:
        api_version: str = obj["apiVersion"]
        kind: str = obj["kind"]
        plural, namespaced = self.resource_of(api_version, kind)
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        metadata = obj.get("metadata") or {}
        if namespaced:
            prefix += f"/namespaces/{metadata.get('namespace') or 'default'}"
        path = f"{prefix}/{plural}"
        return path if collection else f"{path}/{metadata['name']}"

    def resource_of(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from discovery."""
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        for resource in self.get(base).get("resources") or []:
            if resource.get("kind") == kind and "/" not in resource["name"]:
                return str(resource["name"]), bool(resource.get("namespaced"))
        raise ApiError(404, "NotFound", f"the server does not serve {kind} in {api_version}")

    def ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            )

    def wait_for(self, check: Any, *, within: float = 30.0, what: str = "condition") -> Any:
        """Poll `check()` until truthy (synchronously); raise TimeoutError naming `what`."""
        deadline = time.monotonic() + within
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not happen within {within}s")
            time.sleep(0.2)

    def apply_crds(self, files: list[Path]) -> None:
        """Create (or update) CRDs and wait until each is Established."""
        names = []
        for file in files:
            for doc in yaml.safe_load_all(file.read_text()):
                if not doc:
                    continue
                self.request(
                    "PATCH",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                    + doc["metadata"]["name"],
                    doc,
                    content_type="application/apply-patch+yaml",
                    params={"fieldManager": "e2e", "force": "true"},
                )
                names.append(doc["metadata"]["name"])
        for name in names:
            self.wait_for(
                lambda name=name: _established(
                    self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                ),
                what=f"CRD {name} established",
            )


def _established(crd: Obj) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


# The cluster -------------------------------------------------------------------------------


@dataclass
class RealCluster:
    """What tests get: an admin kubeconfig and client, and kubeconfigs for other users.

    `pki` is None when the cluster is an existing one (E2E_KUBECONFIG): then other identities
    are ServiceAccounts with tokens from the TokenRequest API (`service_account_kubeconfig`).
    """

    kubeconfig: Path
    admin: AdminClient
    workdir: Path
    pki: Pki | None = None
    has_controller_manager: bool = True
    _counter: int = field(default=0, repr=False)

    @property
    def server(self) -> str:
        return self.admin.server

    @property
    def managed(self) -> bool:
        """True when this run started the control plane (not an existing cluster)."""
        return self.pki is not None

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating as `user` in `groups` by client certificate."""
        if self.pki is None:
            raise RuntimeError("client certificates need the run's own CA (not E2E_KUBECONFIG)")
        self._counter += 1
        name = f"user-{self._counter}"
        cert, key = self.pki.issue(name, user, groups)
        path = self.workdir / f"kubeconfig-{name}"
        return write_kubeconfig(path, self.server, self.pki.ca_cert, user=user, cert=cert, key=key)

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig with a short-lived token of ServiceAccount `namespace/name`."""
        review = self.admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        token = review["status"]["token"]
        self._counter += 1
        path = self.workdir / f"kubeconfig-sa-{self._counter}"
        ca = self.pki.ca_cert if self.pki else self._existing_ca()
        return write_kubeconfig(path, self.server, ca, user=f"{namespace}-{name}", token=token)

    def _existing_ca(self) -> Path | None:
        config = yaml.safe_load(self.kubeconfig.read_text())
        ctx_name = config["current-context"]
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        file = self.workdir / "existing-ca.crt"
        if cluster.get("certificate-authority-data"):
            file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
            return file
        if cluster.get("certificate-authority"):
            return (self.kubeconfig.parent / str(cluster["certificate-authority"])).resolve()
        return None


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 2500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) started from `assets`."""

    def __init__(self, assets: Path, workdir: Path, *, controller_manager: bool = True) -> None:
        self.assets = assets
        self.workdir = workdir
        self.controller_manager = (
            controller_manager and (assets / "kube-controller-manager").is_file()
        )
        self._processes: list[_Process] = []
        self.cluster: RealCluster | None = None

    def _spawn(self, name: str, args: list[str]) -> _Process:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as sink:
            popen = subprocess.Popen(
                [str(self.assets / name), *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        process = _Process(name, popen, log)
        self._processes.append(process)
        return process

    def _wait(self, process: _Process, probe: Any, *, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            if process.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}"
                )
            with contextlib.suppress(OSError, ApiError, ValueError):
                if probe():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{process.name} not ready within {within}s:\n{process.tail()}"
                )
            time.sleep(0.2)

    def start(self) -> RealCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> RealCluster:
        pki = Pki.create(self.workdir / "pki")
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd = self._spawn(
            "etcd",
            [
                "--data-dir", str(self.workdir / "etcd"),
                "--name", "e2e",
                "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"e2e=http://127.0.0.1:{peer_port}",
                "--log-level", "warn",
            ],
        )  # fmt: skip

        def etcd_healthy() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{etcd_port}/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")

        self._wait(etcd, etcd_healthy, within=30)
        d = pki.directory
        apiserver = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={api_port}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--client-ca-file={d / 'ca.crt'}",
                f"--tls-cert-file={d / 'serving.crt'}",
                f"--tls-private-key-file={d / 'serving.key'}",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--disable-admission-plugins=TaintNodesByCondition",
                "--v=0",
            ],
        )
        server = f"https://127.0.0.1:{api_port}"
        cert, key = pki.issue("admin", "e2e-admin", ("system:masters",))
        kubeconfig = write_kubeconfig(
            self.workdir / "admin.kubeconfig", server, pki.ca_cert, user="admin", cert=cert, key=key
        )
        admin = AdminClient(kubeconfig)

        self._wait(apiserver, lambda: _readyz(admin), within=90)
        if self.controller_manager:
            port = free_port()
            cm_cert, cm_key = pki.issue("controller-manager", "system:kube-controller-manager")
            cm_kubeconfig = write_kubeconfig(
                self.workdir / "controller-manager.kubeconfig",
                server,
                pki.ca_cert,
                user="system:kube-controller-manager",
                cert=cm_cert,
                key=cm_key,
            )
            manager = self._spawn(
                "kube-controller-manager",
                [
                    f"--kubeconfig={cm_kubeconfig}",
                    f"--authentication-kubeconfig={cm_kubeconfig}",
                    f"--authorization-kubeconfig={cm_kubeconfig}",
                    "--controllers=*,-nodeipam,-nodelifecycle",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={d / 'sa.key'}",
                    f"--root-ca-file={d / 'ca.crt'}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                    "--v=0",
                ],
            )
            # Ready once it has created its controllers' ServiceAccounts (job-controller last
            # among those we need); Jobs, PDB status and GC depend on it.
            self._wait(
                manager,
                lambda: (
                    admin.find(
                        "/api/v1/namespaces/kube-system/serviceaccounts/disruption-controller"
                    )
                    and admin.find("/api/v1/namespaces/kube-system/serviceaccounts/job-controller")
                ),
                within=90,
            )
        self.cluster = RealCluster(
            kubeconfig, admin, self.workdir, pki, has_controller_manager=self.controller_manager
        )
        return self.cluster

    def stop(self) -> None:
        """Stop each component newest first (the apiserver before its etcd, or it hangs on
        shutdown): SIGTERM, then SIGKILL what has not exited within 10 s."""
        for process in reversed(self._processes):
            if process.popen.poll() is None:
                process.popen.terminate()
            try:
                process.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
        self._processes.clear()


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGKILL it when the test process dies, even by
    SIGKILL, so a crashed or killed test run leaves no server behind on a shared machine."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


PR_SET_PDEATHSIG = 1


def _readyz(admin: AdminClient) -> bool:
    url = admin.server + "/readyz"
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    try:
        with urllib.request.urlopen(request, context=admin.ssl_context, timeout=3) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def real_cluster_from_environment(workdir: Path) -> Iterator[RealCluster | None]:
    """The cluster the environment names: E2E_KUBECONFIG (existing), else a control plane
    started from E2E_ASSETS / KUBEBUILDER_ASSETS; None when neither is given."""
    existing = os.environ.get("E2E_KUBECONFIG")
    if existing:
        path = Path(existing).expanduser().resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        yield RealCluster(path, AdminClient(path), workdir)
        return
    assets = assets_dir()
    if assets is None:
        yield None
        return
    plane = ControlPlane(assets, workdir)
    try:
        yield plane.start()
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A real API server for the whole session (skips with how to get one when none is given).

    Import it into a conftest.py to use it elsewhere:
    `from tests.e2e.control_plane import real_cluster  # noqa: F401`.
    """
    with real_cluster_from_environment(tmp_path_factory.mktemp("control-plane")) as cluster:
        if cluster is None:
            pytest.skip(SKIP_MESSAGE)
        yield cluster
