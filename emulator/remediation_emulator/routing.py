"""URL paths and HTTP methods mapped to what RBAC sees: verb, group, resource, subresource.

The same attributes drive dispatch, fault matching, the request log and RBAC checks, so a
test that asserts "the operator only ever patched nodes" checks what a real cluster's
authorizer would have been asked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    kind: str
    """"resource", "discovery" (/api, /apis...), "openapi", "health", or "unknown"."""
    group: str = ""
    version: str = ""
    plural: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    legacy_watch: bool = False


def parse(path: str) -> Route:
    parts = [p for p in path.split("/") if p]
    if parts in (["healthz"], ["livez"], ["readyz"]) or parts[:1] in (
        ["healthz"],
        ["livez"],
        ["readyz"],
    ):
        return Route("health")
    if parts[:1] == ["openapi"]:
        return Route("openapi")
    if parts == ["version"] or parts in (["api"], ["apis"]):
        return Route("discovery")
    if parts[:1] == ["api"]:
        if len(parts) < 2:
            return Route("unknown")
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"]:
        if len(parts) <= 3:
            return Route("discovery")
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return Route("unknown")
    if not rest:
        return Route("discovery", group, version)
    legacy_watch = False
    if rest[0] == "watch":
        legacy_watch, rest = True, rest[1:]
    if not rest:
        return Route("unknown")
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    else:
        namespace = ""
    if len(rest) > 3:
        return Route("unknown")
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return Route("resource", group, version, plural, namespace, name, sub, legacy_watch)


def verb(method: str, route: Route, watch: bool) -> str:
    """The RBAC verb (k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory)."""
    if route.kind != "resource":
        return method.lower()
    if method in ("GET", "HEAD"):
        if watch or route.legacy_watch:
            return "watch"
        return "get" if route.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    return method.lower()
