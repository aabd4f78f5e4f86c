"""Who we are to the API server: a kubeconfig context or the in-cluster service account.

Why not the official `kubernetes` package: it was 126 MB of the operator's 196 MB install and
we used only its credential loading and request helper (docs/decisions.md D33). This module
reads what client-go's `clientcmd` reads for the users an operator meets: a bearer `token` or
`tokenFile`, client certificates (`client-certificate[-data]`, `client-key[-data]`), HTTP basic
auth, and `exec` credential plugins (`client.authentication.k8s.io/v1` and `v1beta1`:
`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`); the cluster's `server`,
`certificate-authority[-data]`, `insecure-skip-tls-verify` and `tls-server-name`. Relative file
paths are relative to the kubeconfig's directory, as in client-go. `auth-provider`s (gcp and
azure were removed from client-go in 1.26; oidc) are refused with a message naming the exec
plugins to use instead. kopf's own login reads only "raw kubeconfig data (with no additional
interpretation or parsing)" (docs.kopf.dev, Authentication): no tokenFile, no exec.

In a cluster: the service account token is re-read at most once a minute (projected tokens
rotate; client-go's in-cluster config does the same), the CA is the mounted `ca.crt`.
Certificate material given inline is written once to private files (mode 0600 in a 0700
directory, removed at exit), because Python's `ssl` and kopf's login load client certificates
from files.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import base64
import json
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_PERIOD = 60.0
"""Seconds a token read from a file is used before the file is read again."""
EXEC_TIMEOUT = 60.0
"""Seconds an exec credential plugin may run before we give up on it."""
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class CredentialsError(Exception):
    """Credentials that cannot be loaded or refreshed; the message names the file and entry."""


@dataclass(frozen=True)
class Secret:
    """One bearer token, or one client certificate and key (as files), and when it expires."""

    token: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None
    expires: datetime | None = None


class _Materials:
    """Inline PEM data written to private files, once per distinct content."""

    def __init__(self) -> None:
        self._directory: str | None = None
        self._written: dict[bytes, str] = {}

    def file_for(self, data: bytes) -> str:
        if data in self._written:
            return self._written[data]
        if self._directory is None:
            self._directory = tempfile.mkdtemp(prefix="remediation-operator-credentials-")
            atexit.register(shutil.rmtree, self._directory, True)
        handle, name = tempfile.mkstemp(dir=self._directory)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        self._written[data] = name
        return name


_MATERIALS = _Materials()


class Source(abc.ABC):
    """Where the current Secret comes from; `invalidate` after a 401 forces a fresh one."""

    refreshable = False

    @abc.abstractmethod
    async def current(self) -> Secret:
        """The secret to send now (read, or run, again when the cached one is stale)."""

    @abc.abstractmethod
    def invalidate(self) -> None:
        """Forget any cached secret, after the server refused it."""


class StaticSource(Source):
    """A token or certificate written in the kubeconfig itself."""

    def __init__(self, secret: Secret) -> None:
        self._secret = secret

    async def current(self) -> Secret:
        return self._secret

    def invalidate(self) -> None:
        """Nothing to forget: a fixed secret cannot be refreshed (`refreshable` is False)."""


class FileTokenSource(Source):
    """A token file (kubeconfig `tokenFile`, or the projected service account token)."""

    refreshable = True

    def __init__(self, path: Path, secret: Secret) -> None:
        self._path = path
        self._base = secret
        self._token: str | None = None
        self._read_at = 0.0

    async def current(self) -> Secret:
        now = time.monotonic()
        if self._token is None or now - self._read_at >= TOKEN_FILE_PERIOD:
            try:
                self._token = self._path.read_text().strip()
            except OSError as error:
                raise CredentialsError(
                    f"cannot read the token file {self._path}: {error}"
                ) from error
            self._read_at = now
        return Secret(
            token=self._token,
            certificate_path=self._base.certificate_path,
            private_key_path=self._base.private_key_path,
        )

    def invalidate(self) -> None:
        self._token = None


class ExecSource(Source):
    """An exec credential plugin: run it, use its ExecCredential until it expires or a 401."""

    refreshable = True

    def __init__(
        self,
        where: str,
        spec: Mapping[str, Any],
        base: Path,
        cluster: Mapping[str, Any],
        fallback: Secret,
    ) -> None:
        self._where = where
        self._api_version = str(spec.get("apiVersion") or "")
        if self._api_version not in EXEC_API_VERSIONS:
            raise CredentialsError(
                f"{where}: exec apiVersion {self._api_version!r} is not supported (use one of"
                f" {', '.join(EXEC_API_VERSIONS)})"
            )
        command = str(spec.get("command") or "")
        if not command:
            raise CredentialsError(f"{where}: exec has no command")
        if os.sep in command and not os.path.isabs(command):
            command = str(base / command)  # client-go: relative to the kubeconfig's directory
        self._argv = [command, *(str(a) for a in spec.get("args") or [])]
        env = spec.get("env") or []
        if not all(isinstance(e, dict) and "name" in e and "value" in e for e in env):
            raise CredentialsError(f"{where}: exec env entries need a name and a value")
        self._env = {str(e["name"]): str(e["value"]) for e in env}
        self._hint = str(spec.get("installHint") or "")
        if spec.get("interactiveMode") == "Always":
            raise CredentialsError(
                f"{where}: the exec plugin requires an interactive terminal"
                " (interactiveMode: Always), which an operator does not have"
            )
        info: dict[str, Any] = {"interactive": False}
        if spec.get("provideClusterInfo"):
            info["cluster"] = {
                k: v
                for k, v in {
                    "server": cluster.get("server"),
                    "tls-server-name": cluster.get("tls-server-name"),
                    "insecure-skip-tls-verify": cluster.get("insecure-skip-tls-verify"),
                    "certificate-authority-data": cluster.get("certificate-authority-data"),
                }.items()
                if v
            }
        self._info = {"apiVersion": self._api_version, "kind": "ExecCredential", "spec": info}
        self._fallback = fallback
        self._secret: Secret | None = None
        self._lock = asyncio.Lock()

    async def current(self) -> Secret:
        async with self._lock:  # one plugin run at a time, however many requests wait
            secret = self._secret
            if secret is None or (
                secret.expires is not None and datetime.now(UTC) >= secret.expires
            ):
                secret = self._secret = await self._run()
            return secret

    def invalidate(self) -> None:
        self._secret = None

    async def _run(self) -> Secret:
        env = {**os.environ, **self._env, "KUBERNETES_EXEC_INFO": json.dumps(self._info)}
        try:
            process = await asyncio.create_subprocess_exec(
                *self._argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except OSError as error:
            hint = f" ({self._hint})" if self._hint else ""
            raise CredentialsError(
                f"{self._where}: cannot run exec plugin {self._argv[0]!r}: {error}{hint}"
            ) from error
        try:
            out, err = await asyncio.wait_for(process.communicate(), EXEC_TIMEOUT)
        except TimeoutError as error:
            process.kill()
            await process.wait()
            raise CredentialsError(
                f"{self._where}: exec plugin {self._argv[0]!r} did not finish in {EXEC_TIMEOUT:g}s"
            ) from error
        if process.returncode != 0:
            tail = err.decode("utf-8", "replace").strip()[-500:]
            raise CredentialsError(
                f"{self._where}: exec plugin {self._argv[0]!r} exited with"
                f" {process.returncode}: {tail}"
            )
        return self._parse(out)

    def _parse(self, out: bytes) -> Secret:
        try:
            credential = json.loads(out)
            status = credential["status"]
            if not isinstance(status, dict):
                raise TypeError("status is not an object")
        except (ValueError, KeyError, TypeError) as error:
            raise CredentialsError(
                f"{self._where}: exec plugin {self._argv[0]!r} did not print an ExecCredential"
                f" with a status ({error})"
            ) from error
        if credential.get("apiVersion") != self._api_version:
            raise CredentialsError(
                f"{self._where}: exec plugin answered apiVersion"
                f" {credential.get('apiVersion')!r}, expected {self._api_version!r}"
            )
        expires: datetime | None = None
        if status.get("expirationTimestamp"):
            stamp = str(status["expirationTimestamp"]).replace("Z", "+00:00")
            try:
                expires = datetime.fromisoformat(stamp)
            except ValueError as error:
                raise CredentialsError(
                    f"{self._where}: exec plugin expirationTimestamp {stamp!r} is not RFC 3339"
                ) from error
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=UTC)
        certificate, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if bool(certificate) != bool(key):
            raise CredentialsError(
                f"{self._where}: exec plugin gave clientCertificateData without clientKeyData"
                " (or the reverse)"
            )
        token = status.get("token")
        if not token and not certificate:
            raise CredentialsError(
                f"{self._where}: exec plugin's ExecCredential has neither a token nor a client"
                " certificate"
            )
        return Secret(
            token=str(token) if token else None,
            certificate_path=(
                _MATERIALS.file_for(str(certificate).encode())
                if certificate
                else self._fallback.certificate_path
            ),
            private_key_path=(
                _MATERIALS.file_for(str(key).encode()) if key else self._fallback.private_key_path
            ),
            expires=expires,
        )


@dataclass(frozen=True)
class Credentials:
    """One API server and how to authenticate to it."""

    server: str
    source: Source
    ca_path: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    basic: tuple[str, str] | None = None
    _contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = field(
        default_factory=dict, compare=False, repr=False
    )
    """One TLS context per client certificate in use (an exec plugin may hand out new ones)."""

    async def headers(self) -> dict[str, str]:
        secret = await self.source.current()
        if secret.token:
            return {"Authorization": f"Bearer {secret.token}"}
        if self.basic is not None:
            pair = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    async def ssl_context(self) -> ssl.SSLContext | None:
        """None for plain http; otherwise the CA, verification and client certificate."""
        if not self.server.startswith("https://"):
            return None
        secret = await self.source.current()
        key = (secret.certificate_path, secret.private_key_path)
        cached = self._contexts.get(key)
        if cached is not None:
            return cached
        context = ssl.create_default_context(cafile=self.ca_path)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if secret.certificate_path:
            try:
                context.load_cert_chain(secret.certificate_path, secret.private_key_path)
            except (OSError, ssl.SSLError) as error:
                raise CredentialsError(
                    f"cannot use the client certificate {secret.certificate_path}: {error}"
                ) from error
        self._contexts[key] = context
        return context


def _decode(where: str, value: Any) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError as error:
        raise CredentialsError(f"{where}: not valid base64 ({error})") from error


def _file(entry: Mapping[str, Any], key: str, base: Path, where: str) -> str | None:
    """`key-data` (written to a private file) or `key` (a path, relative to `base`)."""
    if entry.get(f"{key}-data"):
        return _MATERIALS.file_for(_decode(f"{where} {key}-data", entry[f"{key}-data"]))
    if entry.get(key):
        path = base / str(entry[key])
        if not path.is_file():
            raise CredentialsError(f"{where}: {key} {path} does not exist")
        return str(path)
    return None


def _named(config: Mapping[str, Any], section: str, name: str, file: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(section[:-1]) or {}
            if not isinstance(value, dict):
                raise CredentialsError(f"{file}: {section} entry {name!r} is not a mapping")
            return value
    raise CredentialsError(f"{file}: {section} has no entry named {name!r}")


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> Credentials:
    """The credentials of `context` (default: current-context) in the kubeconfig at `path`."""
    file = Path(path)
    where = str(file)
    if not file.is_file():
        raise CredentialsError(f"{where} does not exist")
    try:
        config = yaml.safe_load(file.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise CredentialsError(f"{where}: {str(error).replace(chr(10), ' ')}") from error
    if not isinstance(config, dict):
        raise CredentialsError(
            f"{where}: not a kubeconfig (expected a YAML mapping with clusters, users, contexts"
            " and current-context)"
        )
    name = context or config.get("current-context")
    if not name:
        raise CredentialsError(f"{where}: no context given and no current-context set")
    chosen = _named(config, "contexts", str(name), where)
    cluster = _named(config, "clusters", str(chosen.get("cluster") or ""), where)
    user_name = str(chosen.get("user") or "")
    user = _named(config, "users", user_name, where) if user_name else {}
    server = str(cluster.get("server") or "")
    if not server:
        raise CredentialsError(f"{where}: cluster {chosen.get('cluster')!r} has no server")
    base = file.parent
    who = f"{where}: user {user_name!r}"
    if user.get("auth-provider"):
        provider = str((user["auth-provider"] or {}).get("name", ""))
        why = (
            "which client-go removed in 1.26"
            if provider in ("gcp", "azure")
            else "which the operator does not support"
        )
        raise CredentialsError(
            f"{who} uses auth-provider {provider!r}, {why}; use an exec plugin instead"
            " (gke-gcloud-auth-plugin, kubelogin)"
        )
    certificate = _file(user, "client-certificate", base, who)
    key = _file(user, "client-key", base, who)
    if bool(certificate) != bool(key):
        raise CredentialsError(f"{who} has a client certificate without a key (or the reverse)")
    fixed = Secret(
        token=user.get("token") or None, certificate_path=certificate, private_key_path=key
    )
    source: Source
    if user.get("exec"):
        source = ExecSource(who, user["exec"], base, cluster, fixed)
    elif not fixed.token and user.get("tokenFile"):
        source = FileTokenSource(base / str(user["tokenFile"]), fixed)
    else:
        source = StaticSource(fixed)
    basic = None
    if user.get("username") and user.get("password"):
        basic = (str(user["username"]), str(user["password"]))
    return Credentials(
        server=server.rstrip("/"),
        source=source,
        ca_path=_file(cluster, "certificate-authority", base, f"{where}: cluster"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
        basic=basic,
    )


def in_cluster(
    environ: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT
) -> Credentials:
    """The pod's service account: KUBERNETES_SERVICE_HOST/PORT, its token and CA."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no kubeconfig:"
            " pass --kubeconfig or set KUBECONFIG"
        )
    token = account / "token"
    if not token.is_file():
        raise CredentialsError(f"the service account token {token} does not exist")
    ca = account / "ca.crt"
    host = f"[{host}]" if ":" in host else host  # IPv6
    return Credentials(
        server=f"https://{host}:{port}",
        source=FileTokenSource(token, Secret()),
        ca_path=str(ca) if ca.is_file() else None,
    )


def load(kubeconfig: str | None = None, context: str | None = None) -> tuple[Credentials, str]:
    """`kubeconfig` (else KUBECONFIG's first file, else ~/.kube/config) if any, else in-cluster;
    also says where the credentials came from."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    default = Path.home() / ".kube" / "config"
    if path or default.exists():
        chosen = path or str(default)
        try:
            return from_kubeconfig(chosen, context), chosen
        except (AttributeError, KeyError, TypeError) as error:  # a field of the wrong shape
            raise CredentialsError(f"{chosen}: malformed kubeconfig ({error!r})") from error
    return in_cluster(), "the in-cluster service account"
