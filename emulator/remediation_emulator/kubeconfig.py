"""Kubeconfig files pointing at the emulator, accepted by kubectl, kopf and the official client.

Plain HTTP with a bearer token: the token names the user, so the request log (and the optional
RBAC mode) can tell two clients apart, e.g. two operator replicas.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def token_for(user: str) -> str:
    """The bearer token the emulator maps back to `user`."""
    return f"emulator:{user}"


def user_of(token: str) -> str:
    return token.removeprefix("emulator:")


def render(url: str, user: str = "admin", namespace: str = "default") -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": user, "user": {"token": token_for(user)}}],
        "contexts": [
            {
                "name": "emulator",
                "context": {"cluster": "emulator", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "emulator",
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write(path: str | os.PathLike[str], url: str, user: str = "admin") -> Path:
    """Write atomically (temp file + rename) so a waiting process never reads half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp{os.getpid()}")
    temporary.write_text(render(url, user))
    temporary.chmod(0o600)
    os.replace(temporary, target)
    return target
