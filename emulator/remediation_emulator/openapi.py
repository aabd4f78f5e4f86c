"""A minimal OpenAPI v3 so kubectl can validate and patch without client-side schemas.

kubectl (1.27+) asks /openapi/v3 whether the server accepts `fieldValidation` on PATCH for a
kind; when it does, kubectl leaves validation to the server (which here prunes/validates
custom resources against their CRD schema) instead of downloading /openapi/v2. The PATCH
operations list JSON patch, merge patch and apply patch but not strategic merge, so kubectl's
apply falls back to its compiled-in types for built-ins and to JSON merge patch for custom
resources, exactly what it does against a real server for custom resources.
"""

from __future__ import annotations

import hashlib
from typing import Any

from remediation_emulator.resources import ResourceType


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def root(types: list[ResourceType]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for gv in sorted({(t.group, t.version) for t in types}):
        path = _gv_path(*gv)
        digest = (
            hashlib.sha256(
                repr(
                    sorted(
                        (t.plural, t.kind, t.schema is not None)
                        for t in types
                        if (t.group, t.version) == gv
                    )
                ).encode()
            )
            .hexdigest()[:32]
            .upper()
        )
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def group_version(types: list[ResourceType], group: str, version: str) -> dict[str, Any] | None:
    served = [t for t in types if t.group == group and t.version == version]
    if not served:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rtype in served:
        gvk = {"group": group, "version": version, "kind": rtype.kind}
        prefix = f"/{_gv_path(group, version)}"
        if rtype.namespaced:
            prefix += "/namespaces/{namespace}"
        schema_name = f"{group or 'core'}.{version}.{rtype.kind}"
        # kubectl explain (OpenAPI v3) finds a kind's schema by this extension, as the real
        # server's CRD builder (apiextensions-apiserver pkg/controller/openapi/builder) sets it.
        schemas[schema_name] = {
            **(rtype.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
            "x-kubernetes-group-version-kind": [gvk],
        }
        ref = {"$ref": f"#/components/schemas/{schema_name}"}
        patch_content = {
            media: {"schema": {"type": "object"}}
            for media in (
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            )
        }
        params = [
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {
                "name": "fieldManager",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
            {
                "name": "fieldValidation",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
        ]
        paths[f"{prefix}/{rtype.plural}/{{name}}"] = {
            "get": {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "get",
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
            },
            "put": {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "put",
                "parameters": params,
                "requestBody": {"content": {"application/json": {"schema": ref}}},
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
            },
            "patch": {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "patch",
                "parameters": params,
                "requestBody": {"content": patch_content},
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
            },
        }
        paths[f"{prefix}/{rtype.plural}"] = {
            "post": {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "post",
                "parameters": params,
                "requestBody": {"content": {"application/json": {"schema": ref}}},
                "responses": {"201": {"content": {"application/json": {"schema": ref}}}},
            },
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-emulator"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
