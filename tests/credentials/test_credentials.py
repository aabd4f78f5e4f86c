"""The operator's own kubeconfig and in-cluster loading (it replaced the `kubernetes` package).

Each test talks to a small real HTTP(S) server that accepts only the credential it expects, so
a wrong header, a stale token or a certificate that was not presented shows up as the 401 or
TLS failure a real API server would give.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from remediation_operator.k8s import credentials
from remediation_operator.k8s.client import ApiError, Client, ConfigError


@asynccontextmanager
async def server(
    accept: Callable[[web.Request], bool], tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[str, list[web.Request]]]:
    """Answer /version with 200 when `accept(request)`, else 401; yields (url, requests)."""
    seen: list[web.Request] = []

    async def version(request: web.Request) -> web.Response:
        seen.append(request)
        if not accept(request):
            return web.json_response(
                {"kind": "Status", "reason": "Unauthorized", "code": 401}, status=401
            )
        return web.json_response({"major": "1", "minor": "36"})

    app = web.Application()
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def bearer(token: str) -> Callable[[web.Request], bool]:
    return lambda request: request.headers.get("Authorization") == f"Bearer {token}"


def kubeconfig(path: Path, server_url: str, user: dict[str, Any], **cluster: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": {"server": server_url, **cluster}}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def exec_plugin(tmp_path: Path, body: str) -> dict[str, Any]:
    """An exec entry running a Python script; `body` sees `count` (runs so far, from 1) and
    `info` (the parsed KUBERNETES_EXEC_INFO) and prints the ExecCredential."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, pathlib, sys\n"
        f"counter = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "count = int(counter.read_text()) + 1 if counter.exists() else 1\n"
        "counter.write_text(str(count))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n" + body
    )
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "env": [{"name": "PLUGIN_GREETING", "value": "hello"}],
            "interactiveMode": "Never",
        }
    }


def runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text())


async def test_a_token_kubeconfig_sends_the_bearer_token(tmp_path: Path) -> None:
    async with server(bearer("s3cret")) as (url, seen):
        client = await Client.from_environment(
            str(kubeconfig(tmp_path / "config", url, {"token": "s3cret"}))
        )
        try:
            assert (await client.get("/version"))["minor"] == "36"
        finally:
            await client.close()
    assert seen[0].headers["User-Agent"] == "remediation-operator"


async def test_a_rotated_token_file_is_read_again_after_a_401(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("old\n")
    async with server(bearer("new")) as (url, seen):
        config = kubeconfig(tmp_path / "config", url, {"tokenFile": "token"})  # relative path
        client = await Client.from_environment(str(config))
        try:
            (tmp_path / "token").write_text("new\n")  # rotated while the old one is cached
            assert (await client.get("/version"))["major"] == "1"
        finally:
            await client.close()
    assert [r.headers["Authorization"] for r in seen] == ["Bearer old", "Bearer new"]


async def test_an_exec_plugin_token_is_reused_then_refreshed_after_a_401(tmp_path: Path) -> None:
    user = exec_plugin(
        tmp_path,
        "assert info['apiVersion'] == 'client.authentication.k8s.io/v1', info\n"
        "assert info['spec']['interactive'] is False and os.environ['PLUGIN_GREETING'] == 'hello'\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': {'token': f'token-{count}'}}))\n",
    )
    async with server(bearer("token-2")) as (url, seen):
        client = await Client.from_environment(str(kubeconfig(tmp_path / "config", url, user)))
        assert runs(tmp_path) == 1  # run once at start-up, so a broken plugin fails early
        try:
            await client.get("/version")  # token-1 is refused: the plugin runs again
            await client.get("/version")  # token-2 is still good: no new run
        finally:
            await client.close()
    assert runs(tmp_path) == 2
    assert [r.headers["Authorization"] for r in seen] == [
        "Bearer token-1",
        "Bearer token-2",
        "Bearer token-2",
    ]


async def test_an_expired_exec_credential_runs_the_plugin_again(tmp_path: Path) -> None:
    user = exec_plugin(
        tmp_path,
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': {'token': f'token-{count}',"
        " 'expirationTimestamp': '2020-01-01T00:00:00Z'}}))\n",
    )
    creds = credentials.from_kubeconfig(kubeconfig(tmp_path / "config", "http://unused", user))
    first, second = await creds.source.current(), await creds.source.current()
    assert (first.token, second.token) == ("token-1", "token-2")
    assert first.expires is not None
    assert first.expires.year == 2020


async def test_a_failing_exec_plugin_is_a_clear_start_up_error(tmp_path: Path) -> None:
    user = exec_plugin(
        tmp_path,
        "sys.stderr.write('Unable to locate credentials for profile gpu\\n')\nsys.exit(3)\n",
    )
    user["exec"]["installHint"] = "install the aws CLI"
    config = kubeconfig(tmp_path / "config", "http://unused", user)
    with pytest.raises(ConfigError) as raised:
        await Client.from_environment(str(config))
    message = str(raised.value)
    assert str(config) in message
    assert "user 'u'" in message
    assert "exited with 3" in message
    assert "Unable to locate credentials for profile gpu" in message


async def test_an_exec_plugin_answering_another_api_version_is_refused(tmp_path: Path) -> None:
    user = exec_plugin(
        tmp_path,
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',"
        " 'kind': 'ExecCredential', 'status': {'token': 'x'}}))\n",
    )
    with pytest.raises(ConfigError, match=r"expected 'client\.authentication\.k8s\.io/v1'"):
        await Client.from_environment(str(kubeconfig(tmp_path / "c", "http://unused", user)))


def test_a_removed_auth_provider_is_refused_naming_the_replacement(tmp_path: Path) -> None:
    user = {"auth-provider": {"name": "gcp", "config": {"access-token": "x"}}}
    with pytest.raises(credentials.CredentialsError, match="gke-gcloud-auth-plugin"):
        credentials.from_kubeconfig(kubeconfig(tmp_path / "config", "https://x", user))


def test_a_context_that_does_not_exist_is_named(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "https://x", {"token": "t"})
    with pytest.raises(credentials.CredentialsError, match="no entry named 'staging'"):
        credentials.from_kubeconfig(config, context="staging")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(directory: Path) -> None:
    """A CA; a server certificate for the name apiserver.test only; a client certificate."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "1", "-subj", "/CN=test-ca", cwd=directory)  # fmt: skip
    for name, subject, extension in (
        ("server", "/CN=apiserver", "subjectAltName=DNS:apiserver.test"),
        ("client", "/CN=remediation-operator/O=gpuops", "extendedKeyUsage=clientAuth"),
    ):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", subject, cwd=directory)  # fmt: skip
        (directory / f"{name}.ext").write_text(extension + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile",
                f"{name}.ext", cwd=directory)  # fmt: skip


def same_bytes(a: str | Path, b: str | Path) -> bool:
    return Path(a).read_bytes() == Path(b).read_bytes()


def data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def test_a_client_certificate_given_inline_authenticates_over_tls(tmp_path: Path) -> None:
    certificates(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    tls.load_cert_chain(str(tmp_path / "server.crt"), str(tmp_path / "server.key"))
    tls.verify_mode = ssl.CERT_REQUIRED  # no client certificate: the handshake fails

    def from_client_certificate(request: web.Request) -> bool:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peercert")
        return bool(peer["subject"][:1] == ((("commonName", "remediation-operator"),),))

    user = {
        "client-certificate-data": data(tmp_path / "client.crt"),
        "client-key-data": data(tmp_path / "client.key"),
    }
    async with server(from_client_certificate, tls) as (url, _):
        ca = {"certificate-authority-data": data(tmp_path / "ca.crt")}
        named = kubeconfig(
            tmp_path / "named", url, user, **ca, **{"tls-server-name": "apiserver.test"}
        )
        client = await Client.from_environment(str(named))
        try:
            assert (await client.get("/version"))["minor"] == "36"
            kopf_sees = await client.connection()
            assert kopf_sees.certificate_path is not None
            assert same_bytes(kopf_sees.certificate_path, tmp_path / "client.crt")
        finally:
            await client.close()
        # The same server under its IP address: the certificate does not name it.
        unnamed = await Client.from_environment(
            str(kubeconfig(tmp_path / "unnamed", url, user, **ca))
        )
        try:
            with pytest.raises(ApiError) as raised:
                await unnamed.get("/version")
            assert raised.value.status == 0
            assert "certificate" in raised.value.message.lower()
        finally:
            await unnamed.close()


async def test_in_cluster_reads_the_service_account_and_its_rotated_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = credentials.in_cluster(environ, tmp_path)
    assert creds.server == "https://[fd00::1]:443"
    assert await creds.headers() == {"Authorization": "Bearer first"}
    (tmp_path / "token").write_text("second")
    creds.source.invalidate()  # what a 401 does; otherwise the file is read once a minute
    assert await creds.headers() == {"Authorization": "Bearer second"}


def test_outside_a_cluster_without_a_kubeconfig_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(credentials.CredentialsError, match="--kubeconfig or set KUBECONFIG"):
        credentials.in_cluster({}, tmp_path)


async def test_exec_info_carries_the_cluster_when_asked(tmp_path: Path) -> None:
    user = exec_plugin(
        tmp_path,
        f"pathlib.Path({str(tmp_path / 'info.json')!r}).write_text(json.dumps(info))\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': {'token': 't'}}))\n",
    )
    user["exec"]["provideClusterInfo"] = True
    config = kubeconfig(tmp_path / "config", "https://api.example:6443", user)
    await credentials.from_kubeconfig(config).source.current()
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["spec"]["cluster"] == {"server": "https://api.example:6443"}


@pytest.mark.parametrize(
    ("user", "says"),
    [
        ({"exec": "aws eks get-token"}, "malformed kubeconfig"),
        (
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}},
            "v1alpha1",
        ),
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "x",
                    "env": [{"name": "A"}],
                }
            },
            "need a name and a value",
        ),
        ({"client-certificate-data": "Zm9v"}, "without a key"),
    ],
)
async def test_a_malformed_user_is_a_start_up_error_naming_the_file(
    tmp_path: Path, user: dict[str, Any], says: str
) -> None:
    config = kubeconfig(tmp_path / "config", "https://x", user)
    with pytest.raises(ConfigError) as raised:
        await Client.from_environment(str(config))
    assert str(config) in str(raised.value)
    assert says in str(raised.value)
