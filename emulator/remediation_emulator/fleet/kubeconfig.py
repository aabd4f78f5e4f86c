"""Read a kubeconfig into the fleet's `Connection`, so the fleet can drive a real cluster too.

The emulated kubelet, agent and Karpenter only speak HTTP; pointing them at kind or any
cluster (for end-to-end runs) needs the same connection details kubectl uses: the current
context's server, its CA, and a bearer token or a client certificate. Exec plugins and auth
providers are not supported; the error says so and names the user entry.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import yaml

from remediation_emulator.fleet.client import Connection


class KubeconfigError(ValueError):
    """A kubeconfig the fleet cannot use; the message names the file and the entry."""


def _named(config: dict[str, Any], section: str, name: str, path: Path) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            value: dict[str, Any] = entry.get(section[:-1]) or {}
            return value
    raise KubeconfigError(f"{path}: {section} has no entry named {name!r}")


def _material(entry: dict[str, Any], key: str, base: Path) -> str | None:
    """A file path for `key` or `key-data` (data is written to a private temp file)."""
    if entry.get(f"{key}-data"):
        handle, name = tempfile.mkstemp(prefix="fleet-kubeconfig-")
        with os.fdopen(handle, "wb") as out:
            out.write(base64.b64decode(entry[f"{key}-data"]))
        return name
    if entry.get(key):
        return str((base / entry[key]).resolve())
    return None


def load(path: str | os.PathLike[str], context: str | None = None) -> Connection:
    """The Connection for `context` (default: current-context) of the kubeconfig at `path`."""
    file = Path(path)
    try:
        config = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KubeconfigError(f"{file}: cannot read a kubeconfig ({exc})") from exc
    if not isinstance(config, dict):
        raise KubeconfigError(f"{file}: not a kubeconfig (expected a mapping)")
    name = context or config.get("current-context")
    if not name:
        raise KubeconfigError(f"{file}: no context given and no current-context set")
    ctx = _named(config, "contexts", name, file)
    cluster = _named(config, "clusters", ctx.get("cluster", ""), file)
    user = _named(config, "users", ctx.get("user", ""), file) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{file}: cluster {ctx.get('cluster')!r} has no server")
    if user.get("exec") or user.get("auth-provider"):
        raise KubeconfigError(
            f"{file}: user {ctx.get('user')!r} uses an exec plugin or auth provider, which the "
            "fleet does not support; use a token or a client certificate"
        )
    headers = {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    context_ssl = None
    if str(server).startswith("https://"):
        base = file.parent
        context_ssl = ssl.create_default_context(
            cafile=_material(cluster, "certificate-authority", base)
        )
        if cluster.get("insecure-skip-tls-verify"):
            context_ssl.check_hostname = False
            context_ssl.verify_mode = ssl.CERT_NONE
        cert = _material(user, "client-certificate", base)
        key = _material(user, "client-key", base)
        if cert:
            context_ssl.load_cert_chain(cert, key)
    return Connection(str(server), headers=headers, ssl_context=context_ssl)
