"""Optional RBAC enforcement: bearer token -> user -> (Cluster)Roles bound to it -> allow or 403.

Off by default. When on, the emulator answers like a real server with the RBAC authorizer:
403 Forbidden with the same message shape, checked against ClusterRoles, ClusterRoleBindings,
Roles and RoleBindings stored in the emulator. This lets a test prove that the operator's
Helm chart grants exactly what the operator uses. Discovery and health paths are always
allowed (the default `system:discovery` binding does the same on a real cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from remediation_emulator import errors
from remediation_emulator.store import Store

SUPERUSERS = frozenset({"admin", "system:admin", "emulator-admin"})


def _subject_matches(subject: Mapping[str, Any], user: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user)
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace', '')}:{name}"
    if kind == "Group":
        groups = {"system:authenticated"}
        if user.startswith("system:serviceaccount:"):
            groups |= {"system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"}
        return name in groups
    return False


def _rule_allows(
    rule: Mapping[str, Any], verb: str, group: str, resource: str, subresource: str, name: str
) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and verb not in verbs:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and group not in groups:
        return False
    wanted = f"{resource}/{subresource}" if subresource else resource
    resources = rule.get("resources") or []
    if not (
        "*" in resources or wanted in resources or (subresource and f"*/{subresource}" in resources)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


class Authorizer:
    def __init__(self, store: Store, superusers: Iterable[str] = SUPERUSERS) -> None:
        self.store = store
        self.superusers = frozenset(superusers)

    def allowed(
        self,
        user: str,
        verb: str,
        group: str,
        resource: str,
        subresource: str,
        namespace: str,
        name: str,
    ) -> bool:
        if user in self.superusers:
            return True
        rules: list[Mapping[str, Any]] = []
        for binding in self.store.list("clusterrolebindings").items:
            if any(_subject_matches(s, user) for s in binding.get("subjects") or []):
                rules += self._role_rules(binding, None)
        if namespace:
            for binding in self.store.list("rolebindings", namespace).items:
                if any(_subject_matches(s, user) for s in binding.get("subjects") or []):
                    rules += self._role_rules(binding, namespace)
        return any(_rule_allows(r, verb, group, resource, subresource, name) for r in rules)

    def _role_rules(
        self, binding: Mapping[str, Any], namespace: str | None
    ) -> list[Mapping[str, Any]]:
        ref = binding.get("roleRef") or {}
        kind = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        try:
            role = self.store.get(kind, ref.get("name", ""), namespace if kind == "roles" else None)
        except errors.ApiError:
            return []
        return list(role.get("rules") or [])

    def check(
        self,
        user: str,
        verb: str,
        group: str,
        resource: str,
        subresource: str,
        namespace: str,
        name: str,
    ) -> None:
        if self.allowed(user, verb, group, resource, subresource, namespace, name):
            return
        full = f"{resource}/{subresource}" if subresource else resource
        subject = f'{full} "{name}"' if name else full
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise errors.forbidden(
            f'{subject} is forbidden: User "{user}" cannot {verb} resource "{full}" '
            f'in API group "{group}" {scope}',
            resource,
            group,
            name,
        )
