"""Read and write our custom resources: Remediations and RemediationPolicies' status.

Both are cluster-scoped and have the status subresource, so status is written through
`/status` with a full-object PUT carrying the resourceVersion that was read: a stale writer
gets 409 (optimistic concurrency) instead of overwriting a newer state, and lists and maps in
status are replaced exactly (a JSON merge patch would merge maps and keep deleted keys).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remediation_operator.k8s import names
from remediation_operator.k8s.client import ApiError, Client, path

_ATTEMPTS = 5


def remediation_path(name: str | None = None, subresource: str | None = None) -> str:
    return path(names.GROUP_VERSION, names.REMEDIATIONS, name, subresource=subresource)


def policy_path(name: str | None = None, subresource: str | None = None) -> str:
    return path(names.GROUP_VERSION, names.POLICIES, name, subresource=subresource)


async def list_remediations(client: Client) -> list[dict[str, Any]]:
    """Every Remediation, following `continue` tokens."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query: dict[str, str | int] = {"limit": 500}
        if token:
            query["continue"] = token
        page = await client.get(remediation_path(), **query)
        items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def get_remediation(client: Client, name: str) -> dict[str, Any]:
    return await client.get(remediation_path(name))


async def create_remediation(
    client: Client, name: str, node: str, policy: str, status: dict[str, Any]
) -> dict[str, Any]:
    """Create the object, then write its status; finishes a create a crash interrupted.

    Raises ApiError(409) when an object of that name already has a status (a real conflict).
    """
    body = {
        "apiVersion": names.GROUP_VERSION,
        "kind": "Remediation",
        "metadata": {"name": name, "labels": {names.MANAGED_BY: names.MANAGER}},
        "spec": {"nodeName": node, "policyName": policy},
    }
    try:
        created = await client.create(remediation_path(), body)
    except ApiError as error:
        if error.status != 409:
            raise
        created = await get_remediation(client, name)
        if created.get("status"):
            raise
    created["status"] = status
    return await client.replace(remediation_path(name, "status"), created)


async def write_remediation_status(
    client: Client, name: str, status: dict[str, Any], resource_version: str
) -> dict[str, Any]:
    """Replace the status, precondition on `resource_version` (409 when stale).

    No read first: a PUT to /status ignores everything but the status stanza (CRD
    `subresources.status`, apiextensions.k8s.io/v1) and the resourceVersion in the body is the
    precondition, so one round trip does it.
    """
    body = {
        "apiVersion": names.GROUP_VERSION,
        "kind": "Remediation",
        "metadata": {"name": name, "resourceVersion": resource_version},
        "status": status,
    }
    return await client.replace(remediation_path(name, "status"), body)


async def delete_remediation(client: Client, name: str, resource_version: str) -> None:
    try:
        await client.delete(
            remediation_path(name), {"preconditions": {"resourceVersion": resource_version}}
        )
    except ApiError as error:
        if error.status not in (404, 409):
            raise


async def get_policy(client: Client, name: str) -> dict[str, Any]:
    return await client.get(policy_path(name))


async def list_policies(client: Client) -> list[dict[str, Any]]:
    listed = await client.get(policy_path())
    return [i for i in listed.get("items") or [] if isinstance(i, dict)]


async def update_policy_status(
    client: Client, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> dict[str, Any]:
    """Read the policy, let `change` compute its new status (None: unchanged), PUT /status.

    Retries a lost race a few times: the runtime (Accepted, lastAcceptedSpec) and the engine
    (counts, breakers) write different parts of the same status. Returns the policy as
    written (or as read, when unchanged), so a caller can cache it.
    """
    for attempt in range(_ATTEMPTS):
        policy = await get_policy(client, name)
        status = change(dict(policy.get("status") or {}))
        if status is None:
            return policy
        policy["status"] = status
        try:
            return await client.replace(policy_path(name, "status"), policy)
        except ApiError as error:
            if error.status != 409 or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
