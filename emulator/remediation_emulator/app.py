"""The HTTP face of the emulator: one aiohttp handler that speaks the Kubernetes REST API.

Every request goes the same way: route -> RBAC attributes -> fault rules (before any state
is touched) -> optional RBAC check -> the store -> a JSON (or Table, or watch stream) response,
and one request-log entry. Errors are `Status` bodies with the real codes and reasons.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import yaml
from aiohttp import web

from remediation_emulator import (
    discovery,
    errors,
    faults,
    kubeconfig,
    openapi,
    protobuf,
    routing,
    tables,
)
from remediation_emulator.eviction import Disruption
from remediation_emulator.rbac import Authorizer
from remediation_emulator.requestlog import Entry, RequestLog
from remediation_emulator.resources import ResourceType
from remediation_emulator.store import PATCH_TYPES, Store, present
from remediation_emulator.watch import encode

DEFAULT_WATCH_TIMEOUT = 1800.0  # the real server's --min-request-timeout
_RETURNS_OBJECT_ON_DELETE = {("", "pods")}
_TRUE = ("true", "1")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(obj), status=status, content_type="application/json")


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"invalid value for {name}: {raw!r}") from None


_JSON_RANGES = ("application/json", "application/*", "*/*", "application/yaml")


def _check_accept(accept: str) -> None:
    """406 when the client accepts none of what the emulator writes (JSON).

    Clients always list JSON (client-go: "application/vnd.kubernetes.protobuf,
    application/json"); one asking for protobuf alone gets the real server's 406 for custom
    resources. A real server would answer protobuf for built-ins: the emulator cannot.
    YAML is answered with JSON (a YAML superset).
    """
    if not accept:
        return
    ranges = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    if not any(r in _JSON_RANGES for r in ranges):
        raise errors.ApiError(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml, "
            "application/vnd.kubernetes.protobuf",
        )


class ApiApp:
    def __init__(
        self,
        store: Store,
        disruption: Disruption,
        request_log: RequestLog,
        fault_rules: faults.Faults,
        *,
        bookmark_interval: float,
        authorizer: Authorizer | None,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.disruption = disruption
        self.request_log = request_log
        self.faults = fault_rules
        self.bookmark_interval = bookmark_interval
        self.authorizer = authorizer
        self.clock = clock
        self.server_address = ""

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        route = routing.parse(request.path)
        query = request.query
        watching = query.get("watch", "").lower() in _TRUE or route.legacy_watch
        verb = routing.verb(request.method, route, watching)
        user = self._user(request)
        name = route.name
        if not name and verb in ("list", "watch"):
            selector = query.get("fieldSelector", "")
            for term in selector.split(","):
                if term.startswith("metadata.name=") and "!" not in term:
                    name = term.split("=", 1)[1].lstrip("=")
        code = 500
        streamed = False
        try:
            rules = self.faults.match(verb, route.plural, route.subresource, route.namespace, name)
            for rule in rules:
                if rule.delay:
                    await asyncio.sleep(rule.delay)
            for rule in rules:
                if rule.code is not None:
                    raise errors.ApiError(
                        rule.code,
                        faults.reason_for(rule.code),
                        rule.message or f"injected fault: {verb} {route.plural} {name}".rstrip(),
                    )
            drops = [r.drop_watch_after for r in rules if r.drop_watch_after is not None]
            if self.authorizer is not None and route.kind == "resource":
                self.authorizer.check(
                    user, verb, route.group, route.plural, route.subresource, route.namespace, name
                )
            if route.kind == "resource":
                _check_accept(request.headers.get("Accept", ""))
            if route.kind == "resource" and verb == "watch" and request.method == "GET":
                rtype = self._resource_type(route)
                streamed = True
                return await self._watch(
                    request, rtype, route, user, name, min(drops) if drops else None
                )
            response = await self._dispatch(request, route, verb)
            code = response.status
            return response
        except errors.ApiError as exc:
            code = exc.code
            return _json(exc.to_status(), exc.code)
        finally:
            if not streamed:
                self._log(verb, route, name, code, user, request.path, started)

    def _log(
        self,
        verb: str,
        route: routing.Route,
        name: str,
        code: int,
        user: str,
        path: str,
        started: float = 0.0,
    ) -> None:
        self.request_log.append(
            Entry(
                time=self.clock(),
                verb=verb,
                group=route.group,
                resource=route.plural,
                subresource=route.subresource,
                namespace=route.namespace,
                name=name,
                code=code,
                user=user,
                path=path,
                seconds=time.perf_counter() - started if started else 0.0,
            )
        )

    def _user(self, request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        if header.lower().startswith("bearer "):
            return kubeconfig.user_of(header[7:].strip())
        return "system:anonymous"

    # -- discovery -----------------------------------------------------------------------

    def _discovery(self, request: web.Request, route: routing.Route) -> web.Response:
        path = request.path.rstrip("/")
        types = self.store.types()
        if route.kind == "health":
            return web.Response(text="ok")
        if path == "/version":
            return _json(discovery.VERSION_INFO)
        if path == "/api":
            return _json(discovery.api_versions(self.server_address))
        if path == "/apis":
            return _json(discovery.api_group_list(types))
        parts = [p for p in path.split("/") if p]
        doc: dict[str, Any] | None
        if parts[0] == "api":
            doc = discovery.resource_list(types, "", parts[1])
        elif len(parts) == 2:
            doc = discovery.api_group(types, parts[1])
        else:
            doc = discovery.resource_list(types, parts[1], parts[2])
        if doc is None:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return _json(doc)

    def _openapi(self, request: web.Request) -> web.Response:
        parts = [p for p in request.path.split("/") if p]
        types = self.store.types()
        doc: dict[str, Any] | None = None
        if parts == ["openapi", "v3"]:
            doc = openapi.root(types)
        elif parts[:2] == ["openapi", "v3"] and len(parts) == 4 and parts[2] == "api":
            doc = openapi.group_version(types, "", parts[3])
        elif parts[:2] == ["openapi", "v3"] and len(parts) == 5 and parts[2] == "apis":
            doc = openapi.group_version(types, parts[3], parts[4])
        if doc is None:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return _json(doc)

    # -- resources -----------------------------------------------------------------------

    def _resource_type(self, route: routing.Route) -> ResourceType:
        rtype = self.store.lookup(route.group, route.version, route.plural)
        if rtype is None:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if route.namespace and not rtype.namespaced:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if route.subresource and route.subresource not in rtype.subresources:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return rtype

    async def _body(self, request: web.Request, rtype: ResourceType | None = None) -> Any:
        raw = await request.read()
        if not raw:
            return None
        if protobuf.is_protobuf(request.content_type):
            return protobuf.decode(raw, custom=rtype is not None and not rtype.builtin)
        try:
            if "yaml" in request.content_type:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the request body is not valid JSON: {exc}") from None

    async def _dispatch(
        self, request: web.Request, route: routing.Route, verb: str
    ) -> web.StreamResponse:
        if route.kind in ("discovery", "health"):
            return self._discovery(request, route)
        if route.kind == "openapi":
            return self._openapi(request)
        if route.kind != "resource":
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        rtype = self._resource_type(route)
        if rtype.namespaced and not route.namespace and verb not in ("list", "watch"):
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        namespace = route.namespace or None
        query = request.query
        dry_run = query.get("dryRun") == "All"
        validation = query.get("fieldValidation", "")
        if verb == "get":
            obj = self.store.get(rtype, route.name, namespace)
            return self._object_or_table(
                request, rtype, [obj], obj["metadata"]["resourceVersion"], single=obj
            )
        if verb == "list":
            result = self.store.list(
                rtype,
                namespace,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                limit=_int_param(query, "limit") or 0,
                continue_token=query.get("continue", ""),
                resource_version=query.get("resourceVersion", ""),
                resource_version_match=query.get("resourceVersionMatch", ""),
            )
            if self._wants_table(request):
                return _json(
                    tables.render(
                        rtype,
                        result.items,
                        self.clock(),
                        resource_version=result.resource_version,
                        continue_token=result.continue_token,
                        include_object=query.get("includeObject", "Metadata"),
                    )
                )
            metadata: dict[str, Any] = {"resourceVersion": result.resource_version}
            if result.continue_token:
                metadata["continue"] = result.continue_token
            if result.remaining is not None:
                metadata["remainingItemCount"] = result.remaining
            return _json(
                {
                    "kind": rtype.list_kind,
                    "apiVersion": rtype.api_version,
                    "metadata": metadata,
                    "items": result.items,
                }
            )
        if verb == "create":
            body = await self._body(request, rtype)
            if route.subresource == "eviction" and rtype.key == ("", "pods"):
                code, status = self.disruption.evict(
                    route.namespace, route.name, body or {}, dry_run=dry_run
                )
                return _json(status, code)
            if route.name or route.subresource:
                raise errors.method_not_allowed(
                    "the server does not allow this method on the requested resource"
                )
            created = self.store.create(
                rtype, body or {}, namespace, dry_run=dry_run, field_validation=validation
            )
            return _json(created, 201)
        if verb == "update":
            body = await self._body(request, rtype)
            if not isinstance(body, Mapping):
                raise errors.bad_request("the body of the request must be a JSON object")
            obj = self.store.replace(
                rtype,
                route.name,
                body,
                namespace,
                subresource=route.subresource,
                dry_run=dry_run,
                field_validation=validation,
            )
            return _json(obj)
        if verb == "patch":
            patch_type = PATCH_TYPES.get(request.content_type)
            if request.content_type == "application/apply-patch+yaml":
                raise errors.ApiError(
                    415,
                    "UnsupportedMediaType",
                    "server-side apply (application/apply-patch+yaml) is not implemented by the "
                    "API emulator; use a JSON merge, JSON or strategic merge patch",
                )
            if patch_type is None:
                raise errors.unsupported_media_type(request.content_type)
            body = await self._body(request, rtype)
            obj = self.store.patch(
                rtype,
                route.name,
                body,
                namespace,
                patch_type=patch_type,
                subresource=route.subresource,
                dry_run=dry_run,
                field_validation=validation,
            )
            return _json(obj)
        if verb == "delete":
            options = await self._body(request, rtype) or {}
            if not isinstance(options, Mapping):
                raise errors.bad_request("DeleteOptions must be a JSON object")
            grace = _int_param(query, "gracePeriodSeconds")
            if grace is None and options.get("gracePeriodSeconds") is not None:
                grace = int(options["gracePeriodSeconds"])
            dry_run = dry_run or "All" in (options.get("dryRun") or [])
            obj, gone = self.store.delete(
                rtype,
                route.name,
                namespace,
                grace_period_seconds=grace,
                preconditions=options.get("preconditions"),
                dry_run=dry_run,
            )
            if gone and rtype.builtin and rtype.key not in _RETURNS_OBJECT_ON_DELETE:
                return _json(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": route.name,
                            "group": rtype.group,
                            "kind": rtype.plural,
                            "uid": obj["metadata"]["uid"],
                        },
                    }
                )
            return _json(obj)
        if verb == "deletecollection":
            options = await self._body(request, rtype) or {}
            grace = _int_param(query, "gracePeriodSeconds")
            self.store.delete_collection(
                rtype,
                namespace,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                grace_period_seconds=grace,
                dry_run=dry_run or "All" in (options.get("dryRun") or []),
            )
            return _json(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            )
        raise errors.method_not_allowed(f"the server does not allow this method ({request.method})")

    def _wants_table(self, request: web.Request) -> bool:
        accept = request.headers.get("Accept", "")
        first = accept.split(",")[0]
        return "as=Table" in first

    def _object_or_table(
        self,
        request: web.Request,
        rtype: ResourceType,
        objs: list[dict[str, Any]],
        rv: str,
        *,
        single: dict[str, Any],
    ) -> web.Response:
        if self._wants_table(request):
            return _json(
                tables.render(
                    rtype,
                    objs,
                    self.clock(),
                    resource_version=rv,
                    include_object=request.query.get("includeObject", "Metadata"),
                )
            )
        return _json(single)

    # -- watch ---------------------------------------------------------------------------

    async def _watch(
        self,
        request: web.Request,
        rtype: ResourceType,
        route: routing.Route,
        user: str,
        name: str,
        drop_after: int | None,
    ) -> web.StreamResponse:
        """Stream watch events as JSON lines until timeoutSeconds, a drop, or the client goes."""
        query = request.query
        timeout = float(_int_param(query, "timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        bookmarks = query.get("allowWatchBookmarks", "").lower() in _TRUE
        initial_end = query.get("sendInitialEvents", "").lower() in _TRUE
        field_selector = query.get("fieldSelector")
        if route.name:  # legacy /watch/.../NAME
            field_selector = ",".join(filter(None, [field_selector, f"metadata.name={route.name}"]))
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            watcher = self.store.watch(
                rtype,
                route.namespace or None,
                label_selector=query.get("labelSelector"),
                field_selector=field_selector,
                resource_version="" if initial_end else query.get("resourceVersion", ""),
            )
        except errors.ApiError as exc:
            if exc.code != 410:
                self._log("watch", route, name, exc.code, user, request.path)
                raise
            # As the real server: HTTP 200 and a single ERROR event carrying the 410 Status.
            self._log("watch", route, name, 200, user, request.path)
            await response.prepare(request)
            await response.write(encode("ERROR", exc.to_status()))
            await response.write_eof()
            return response
        self._log("watch", route, name, 200, user, request.path)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        initial = watcher.queue.qsize() if initial_end else -1
        as_table = self._wants_table(request)
        sent = 0
        try:
            await response.prepare(request)
            if initial == 0:
                await response.write(self._bookmark(rtype, initial_events_end=True))
            if drop_after == 0:
                return response
            waiting: asyncio.Task[Any] | None = None
            while True:
                items: list[Any] = []
                if waiting is not None:
                    items.append(waiting.result())
                    waiting = None
                while not watcher.queue.empty():
                    items.append(watcher.queue.get_nowait())
                batch: list[bytes] = []
                closed = False
                for item in items:
                    if item is None:
                        closed = True
                        break
                    type_, obj, event = item
                    if as_table:  # kubectl get -w: each event carries a one-row Table
                        row = tables.render(
                            rtype,
                            [present(rtype, obj)],
                            self.clock(),
                            resource_version=obj["metadata"].get("resourceVersion", ""),
                            include_object=query.get("includeObject", "Metadata"),
                        )
                        batch.append(encode(type_, row))
                    elif event is not None and obj.get("apiVersion") == rtype.api_version:
                        batch.append(event.line())
                    else:
                        batch.append(encode(type_, present(rtype, obj)))
                    sent += 1
                    if sent == initial:
                        batch.append(self._bookmark(rtype, initial_events_end=True))
                    if drop_after is not None and sent >= drop_after:
                        closed = True
                        break
                if batch:
                    await response.write(b"".join(batch))
                if closed:
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if bookmarks:
                        await response.write(self._bookmark(rtype))
                    break
                wait = min(remaining, self.bookmark_interval) if bookmarks else remaining
                waiting = asyncio.ensure_future(watcher.queue.get())
                done, _ = await asyncio.wait({waiting}, timeout=wait)
                if not done:
                    waiting.cancel()
                    waiting = None
                    if bookmarks and deadline - loop.time() > 0:
                        await response.write(self._bookmark(rtype))
        except ConnectionResetError:
            pass
        finally:
            self.store.unwatch(rtype, watcher)
        return response

    def _bookmark(self, rtype: ResourceType, *, initial_events_end: bool = False) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if initial_events_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return encode(
            "BOOKMARK", {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": metadata}
        )
