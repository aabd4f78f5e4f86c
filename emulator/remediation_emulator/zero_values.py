"""Fields a real server always returns because Go serialises them even when empty.

k8s.io/api declares some fields without `omitempty` (e.g. every `NodeSystemInfo` string and
`ContainerStatus.image`), so a real server returns them as "" / 0 / false even if the writer
left them out. Clients rely on that: the official Python client (v37) refuses to deserialise a
Node whose `status.nodeInfo` lacks `machineID`. The emulator fills the same zero values.
"""

from __future__ import annotations

from typing import Any

from remediation_emulator.resources import ResourceType

_NODE_INFO = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
)
_CONTAINER_STATUS: dict[str, Any] = {
    "name": "",
    "ready": False,
    "restartCount": 0,
    "image": "",
    "imageID": "",
}


def fill(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """obj with the always-serialised fields present (a new dict when something was added)."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return obj
    if rtype.key == ("", "nodes"):
        info = status.get("nodeInfo")
        if isinstance(info, dict) and any(k not in info for k in _NODE_INFO):
            filled = {**{k: "" for k in _NODE_INFO}, **info}
            return {**obj, "status": {**status, "nodeInfo": filled}}
        if info is None:
            return {
                **obj,
                "status": {
                    **status,
                    "nodeInfo": {k: "" for k in _NODE_INFO},
                    "daemonEndpoints": status.get("daemonEndpoints")
                    or {"kubeletEndpoint": {"Port": 0}},
                },
            }
    elif rtype.key == ("", "pods"):
        changed = False
        new_status = dict(status)
        for field in ("containerStatuses", "initContainerStatuses"):
            entries = status.get(field)
            if isinstance(entries, list) and any(
                isinstance(e, dict) and any(k not in e for k in _CONTAINER_STATUS) for e in entries
            ):
                new_status[field] = [
                    {**_CONTAINER_STATUS, **e} if isinstance(e, dict) else e for e in entries
                ]
                changed = True
        if changed:
            return {**obj, "status": new_status}
    return obj
