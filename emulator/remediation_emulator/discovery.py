"""Discovery documents: /version, /api, /apis, /api/v1 and /apis/<group>/<version>.

kubectl, kopf and the official client find resources here before anything else. The core group
is advertised as version "v1" under /api (kubectl rejects "/v1"), subresources appear as
"pods/eviction" entries whose group/version point at policy/v1 (kubectl drain checks that),
and CRDs appear as soon as they are created. Aggregated discovery (apidiscovery.k8s.io/v2) is
not offered: clients asking for it get plain JSON and fall back to these legacy documents.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from remediation_emulator.resources import ResourceType

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SUBRESOURCE_SHAPES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    # name: (group, version, kind, verbs); group/version "" means the parent's.
    "status": ("", "", "", ("get", "patch", "update")),
    "scale": ("autoscaling", "v1", "Scale", ("get", "patch", "update")),
    "eviction": ("policy", "v1", "Eviction", ("create",)),
    "log": ("", "", "", ("get",)),
    "binding": ("", "", "Binding", ("create",)),
    "proxy": ("", "", "NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
    "finalize": ("", "", "", ("update",)),
}


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA before beta before alpha, higher numbers first."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (0, 0, 0)
    stage = {"": 3, "beta": 2, "alpha": 1}[match.group(2) or ""]
    return (stage, int(match.group(1)), int(match.group(3) or 0))


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _groups(types: list[ResourceType]) -> dict[str, list[str]]:
    versions: dict[str, list[str]] = defaultdict(list)
    for rtype in types:
        if rtype.group and rtype.version not in versions[rtype.group]:
            versions[rtype.group].append(rtype.version)
    for group in versions:
        versions[group].sort(key=_version_priority, reverse=True)
    return versions


def _group_doc(group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(types: list[ResourceType]) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, vs) for g, vs in _groups(types).items()],
    }


def api_group(types: list[ResourceType], group: str) -> dict[str, Any] | None:
    versions = _groups(types).get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def resource_list(types: list[ResourceType], group: str, version: str) -> dict[str, Any] | None:
    served = [t for t in types if t.group == group and t.version == version]
    if not served:
        return None
    resources: list[dict[str, Any]] = []
    for rtype in served:
        entry: dict[str, Any] = {
            "name": rtype.plural,
            "singularName": rtype.singular,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": list(rtype.verbs),
        }
        if rtype.short_names:
            entry["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            entry["categories"] = list(rtype.categories)
        resources.append(entry)
        for sub in sorted(rtype.subresources):
            sub_group, sub_version, sub_kind, verbs = _SUBRESOURCE_SHAPES[sub]
            sub_entry: dict[str, Any] = {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": sub_kind or rtype.kind,
                "verbs": list(verbs),
            }
            if sub_group:
                sub_entry["group"], sub_entry["version"] = sub_group, sub_version
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
