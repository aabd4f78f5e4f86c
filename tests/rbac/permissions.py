"""Compare what the operator used (from the emulator's request log) with what the chart grants.

This is the audit behind "least privilege": every request is reduced to the attributes the
Kubernetes RBAC authorizer checks (API group, resource or `resource/subresource`, verb, and the
namespace, empty for cluster-scoped and all-namespace requests), then matched against the
rendered ClusterRole (bound cluster-wide) and Roles (each bound in its own namespace only: the
operator's, for the Lease, and the executors', for the Jobs):

- missing: a request no grant covers;
- unused: a granted (group, resource, verb) no request needed (a ClusterRole rule is needed
  only by a request no Role can cover: cluster scope or a namespace without that Role rule; a
  Role rule only by a request in its namespace the ClusterRole does not already cover);
- wildcards: any `*` in apiGroups, resources, verbs, or a rule with nonResourceURLs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remediation_emulator.requestlog import Entry

Rule = tuple[str, str, str]
"""(apiGroup, resource[/subresource], verb), as `tests/chart/chart_check.granted` returns."""


@dataclass(frozen=True, order=True)
class Use:
    """One authorisation decision the operator needed."""

    group: str
    resource: str
    """`resource` or `resource/subresource`, as RBAC rules spell it."""
    verb: str
    namespace: str
    """Empty for cluster-scoped objects and for requests across all namespaces."""

    @property
    def rule(self) -> Rule:
        return (self.group, self.resource, self.verb)

    def __str__(self) -> str:
        group = self.group or "core"
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {group}/{self.resource} {where}"


@dataclass(frozen=True)
class Deliberate:
    """A grant the scenarios do not exercise, kept on purpose; `reason` says why."""

    scope: str
    """"cluster" (ClusterRole) or the namespace of the Role."""
    rule: Rule
    reason: str


@dataclass(frozen=True)
class Report:
    missing: frozenset[Use] = field(default_factory=frozenset)
    unused: frozenset[tuple[str, Rule]] = field(default_factory=frozenset)
    """(scope, rule): scope is "cluster" or the namespace of a Role."""
    wildcards: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unused or self.wildcards)

    def __str__(self) -> str:
        lines = [f"the chart lacks: {u}" for u in sorted(self.missing)]
        lines += [
            f"the chart's {'ClusterRole' if scope == 'cluster' else f'Role in {scope}'} grants,"
            " never used: "
            f"{verb} {group or 'core'}/{resource}"
            for scope, (group, resource, verb) in sorted(self.unused)
        ]
        lines += [f"wildcard: {w}" for w in self.wildcards]
        return "\n".join(lines) or "least privilege: every grant used, every use granted"


def used(entries: Iterable[Entry], user: str) -> frozenset[Use]:
    """What `user` asked for, resource requests only (discovery is open to every user)."""
    return frozenset(
        Use(
            e.group,
            f"{e.resource}/{e.subresource}" if e.subresource else e.resource,
            e.verb,
            e.namespace,
        )
        for e in entries
        if e.user == user and e.resource
    )


DISCOVERY_URLS = (
    "/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*",
    "/api", "/api/*", "/apis", "/apis/*",
)  # fmt: skip
"""The default `system:discovery` ClusterRole's `get` URLs, bound to every authenticated user
(kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go): the chart need not
grant these."""


def _url_allowed(path: str) -> bool:
    return any(
        path == url or (url.endswith("/*") and path.startswith(url[:-1])) for url in DISCOVERY_URLS
    )


def beyond_discovery(entries: Iterable[Entry], user: str) -> frozenset[str]:
    """Non-resource requests of `user` the default discovery role would not allow."""
    return frozenset(
        f"{e.verb} {e.path}"
        for e in entries
        if e.user == user and not e.resource and not (e.verb == "get" and _url_allowed(e.path))
    )


def wildcards(roles: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Every rule of the given (Cluster)Roles that grants more than it names."""
    found: list[str] = []
    for role in roles:
        name = f"{role.get('kind')} {role.get('metadata', {}).get('name', '')}"
        for index, rule in enumerate(role.get("rules") or []):
            where = f"{name} rules[{index}]"
            for key in ("apiGroups", "resources", "verbs"):
                for value in rule.get(key) or []:
                    if "*" in str(value):
                        found.append(f"{where}.{key} contains {value!r}")
            if rule.get("nonResourceURLs"):
                found.append(f"{where} grants nonResourceURLs {rule['nonResourceURLs']!r}")
        if role.get("aggregationRule"):
            found.append(f"{name} aggregates other roles (its rules are not fixed)")
    return tuple(found)


def compare(
    uses: Iterable[Use],
    grants: Mapping[str, frozenset[Rule]],
    roles: Iterable[Mapping[str, Any]] = (),
    exceptions: Iterable[Deliberate] = (),
) -> Report:
    """Audit `grants` ({"cluster": ClusterRole rules, namespace: that Role's rules}) against
    `uses`."""
    cluster = grants.get("cluster", frozenset())
    missing: set[Use] = set()
    needed: set[tuple[str, Rule]] = set()
    for use in uses:
        local = grants.get(use.namespace, frozenset()) if use.namespace else frozenset()
        if use.rule in local and use.rule not in cluster:
            needed.add((use.namespace, use.rule))
        elif use.rule in cluster:
            needed.add(("cluster", use.rule))
        elif use.rule not in local:
            missing.add(use)
    kept = {(e.scope, e.rule) for e in exceptions}
    granted = {(scope, r) for scope, rules in grants.items() for r in rules}
    # A Role rule the ClusterRole also grants is never needed: it is a redundant grant.
    unused = granted - needed - kept
    return Report(frozenset(missing), frozenset(unused), wildcards(roles))
