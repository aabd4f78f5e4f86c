"""Pointing the fleet at a cluster through a kubeconfig, as kubectl would."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation_emulator.apiserver import ApiServer
from remediation_emulator.fleet import kubeconfig, resources
from remediation_emulator.fleet.client import KubeClient
from remediation_emulator.fleet.kubeconfig import KubeconfigError


async def test_the_fleet_connects_with_the_emulators_kubeconfig_as_its_user(
    api: ApiServer, tmp_path: Path
) -> None:
    path = api.write_kubeconfig(tmp_path / "kubeconfig", user="someone")
    connection = kubeconfig.load(path)
    assert connection.server == api.url
    async with KubeClient(connection) as client:
        await client.list(resources.NODES)
    (entry,) = api.request_log.matching(verb="list", resource="nodes")
    assert entry.user == "someone"


def test_exec_plugins_are_refused_with_the_user_named(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: eks}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://example.invalid'}}]\n"
        "users: [{name: eks, user: {exec: {command: aws}}}]\n"
    )
    with pytest.raises(KubeconfigError, match="user 'eks' uses an exec plugin"):
        kubeconfig.load(path)


def test_an_unknown_context_is_named(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: gone\ncontexts: []\n")
    with pytest.raises(KubeconfigError, match="contexts has no entry named 'gone'"):
        kubeconfig.load(path)
