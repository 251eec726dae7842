"""The simulated API server's HTTP surface: routing, auth, verbs, bodies, Status errors.

This module owns the aiohttp application: it maps a request to (verb, resource,
namespace, name, subresource) the way the apiserver's RequestInfoResolver does,
authenticates and authorises it (:mod:`kubesim.rbac`), applies injected faults
(:mod:`kubesim.faults`), serves it from the :class:`~kubesim.store.Store`
and records it in the request log. Every failure becomes a ``kind: Status`` body
with the apiserver's code, reason and message; no request can crash the server.
LIST bodies are assembled from each object's cached JSON bytes. It never runs
background tasks of its own: timers belong to :class:`~kubesim.Simulator`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import anyio
import yaml
from aiohttp import web

from kubesim import discovery, protobuf
from kubesim.patch import APPLY_PATCH, PATCH_TYPES, apply_patch
from kubesim.rbac import forbidden_message
from kubesim.requestlog import RequestLog, RequestRecord
from kubesim.selectors import Selector, parse_selector
from kubesim.status import (
    ApiError,
    Cause,
    bad_request,
    forbidden,
    injected,
    internal_error,
    invalid_options,
    method_not_allowed,
    not_found,
    path_not_found,
    success_status,
    too_large_rv,
    unauthorized,
    undecodable,
    unsupported_media_type,
)
from kubesim.store import (
    RESOURCES,
    ResourceType,
    Store,
    continue_expired,
    decode_continue,
    encode,
    encode_continue,
)
from kubesim.versions import CURRENT, Version
from kubesim.watchers import DEFAULT_TIMEOUT, WatchRequest, WatchStream, parse_watch_flag

if TYPE_CHECKING:
    from kubesim.faults import Faults
    from kubesim.rbac import Authorizer

JSONDict = dict[str, Any]
ControlHandler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]

log = logging.getLogger(__name__)

JSON_TYPE = "application/json"
#: The media types of an object in a request body; protobuf only for kinds it reads.
TEXT_BODY_TYPES = (JSON_TYPE, "application/yaml")
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version"})
#: LISTs longer than this stream out in slices of this many objects.
STREAM_ITEMS = 2000
SUBRESOURCE_VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch"}


@dataclass(slots=True)
class RequestInfo:
    """What a request is, in the apiserver's terms; filled in as routing proceeds."""

    verb: str = ""
    resource: str = ""
    namespace: str = ""
    name: str = ""
    user: str = ""
    bytes: int = 0
    client_gone: bool = False


@dataclass(frozen=True, slots=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str
    subresource: str


def _json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=encode(body), status=status, content_type=JSON_TYPE, headers=headers or None
    )


def client_gone(exc: BaseException) -> bool:
    """True for what writing to a disconnected client raises, alone or grouped."""
    if isinstance(exc, BaseExceptionGroup):
        return all(client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, ConnectionError)


def _error_response(err: ApiError) -> web.Response:
    return _json_response(err.to_status(), err.code, err.headers)


def _query_int(query: Any, key: str, *, minimum: int = 0) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None
    if value < minimum:
        raise bad_request(
            f"{key}: Invalid value: {value}: must be greater than or equal to {minimum}"
        )
    return value


def _decode(raw: bytes, content_type: str) -> Any:
    """A request body as JSON, or as YAML for the YAML media types."""
    try:
        if content_type in ("application/yaml", APPLY_PATCH):
            return yaml.safe_load(raw.decode())
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding body: json parse error: {exc}") from None


def _body_types(rt: ResourceType) -> tuple[str, ...]:
    """The media types the server reads an object of ``rt`` in."""
    if rt.kind in protobuf.KINDS:
        return (*TEXT_BODY_TYPES, protobuf.MEDIA_TYPE)
    return TEXT_BODY_TYPES


def _validate_delete_options(options: JSONDict) -> None:
    """The apiserver's ValidateDeleteOptions: 422 Invalid, naming every bad field."""
    causes: list[Cause] = []
    policy = options.get("propagationPolicy")
    if policy is not None and options.get("orphanDependents") is not None:
        causes.append(
            (
                "propagationPolicy",
                "FieldValueInvalid",
                f'Invalid value: "{policy}": orphanDependents and deletionPropagation cannot '
                "be both set",
            )
        )
    if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
        causes.append(
            (
                "propagationPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                '"Orphan", "nil"',
            )
        )
    dry_run = options.get("dryRun") or []
    if any(value != "All" for value in dry_run):
        shown = ", ".join(f'"{value}"' for value in dry_run)
        causes.append(
            (
                "dryRun",
                "FieldValueNotSupported",
                f'Unsupported value: []string{{{shown}}}: supported values: "All"',
            )
        )
    if causes:
        raise invalid_options("DeleteOptions.meta.k8s.io", causes)


#: The Go type of each DeleteOptions field, for the decoder's type errors.
_DELETE_OPTION_TYPES: dict[str, tuple[type, str]] = {
    "gracePeriodSeconds": (int, "readUint64: unexpected character"),
    "propagationPolicy": (str, 'ReadString: expects " or n'),
    "orphanDependents": (bool, "ReadBool: expect t or f"),
    "dryRun": (list, "[]string: decode slice: expect [ or n"),
    "preconditions": (dict, "ReadObjectCB: expect { or n"),
}
_GO_JSON_TYPES = {list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def _decode_delete_options(raw: bytes, content_type: str) -> JSONDict:
    """A DELETE body as the apiserver decodes it into DeleteOptions.

    The body's kind must be DeleteOptions (or absent); its apiVersion is not checked.
    Undecodable bodies answer 500 without a reason; the caller picks the code its
    version answers.
    """
    try:
        if content_type == "application/yaml":
            parsed = yaml.safe_load(raw.decode())
        else:
            parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise undecodable(f"couldn't get version/kind; json parse error: {exc}") from None
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        shown = _GO_JSON_TYPES.get(type(parsed), "value")
        raise undecodable(
            f"couldn't get version/kind; json parse error: json: cannot unmarshal {shown} into "
            'Go value of type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
            'Kind string "json:\\"kind,omitempty\\"" }'
        )
    kind = parsed.get("kind")
    if kind not in (None, "", "DeleteOptions"):
        version = parsed.get("apiVersion") or "meta.k8s.io/v1"
        raise undecodable(
            f'no kind "{kind}" is registered for version "{version}" in scheme '
            '"k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme/register.go:27"'
        )
    for name, (expected, complaint) in _DELETE_OPTION_TYPES.items():
        value = parsed.get(name)
        if value is None:
            continue
        wrong = not isinstance(value, expected) or (expected is int and isinstance(value, bool))
        if isinstance(value, list):
            wrong = wrong or not all(isinstance(v, str) for v in value)
        if isinstance(value, dict):
            wrong = wrong or not all(isinstance(v, str | None) for v in value.values())
        if wrong:
            field_name = name[0].upper() + name[1:]
            raise undecodable(f"v1.DeleteOptions.{field_name}: {complaint}, found {value!r}")
    return dict(parsed)


_UNSIGNED = re.compile(r"[0-9]+")
NOT_OLDER_THAN = "NotOlderThan"


@dataclass(frozen=True, slots=True)
class ListOptions:
    """The query of a LIST or WATCH, decoded and validated as the apiserver does."""

    selector: Selector
    resource_version: str
    #: ``resource_version`` parsed; None when empty (or "0" on a watch).
    rv: int | None
    match: str
    limit: int
    token: str
    timeout: int | None
    bookmarks: bool
    #: ``sendInitialEvents``; None when absent or unknown to the imitated version.
    send_initial: bool | None


def _option_causes(opts: ListOptions, version: Version, *, watch: bool) -> list[Cause]:
    """ValidateListOptions of the imitated version: what makes a LIST or WATCH a 422."""
    causes: list[Cause] = []
    match, initial = opts.match, opts.send_initial

    def forbid(why: str, field: str = "resourceVersionMatch") -> None:
        causes.append((field, "FieldValueForbidden", f"Forbidden: {why}"))

    def only(*supported: str) -> None:
        if match not in supported:
            shown = ", ".join(f'"{value}"' for value in supported)
            message = f'Unsupported value: "{match}": supported values: {shown}'
            causes.append(("resourceVersionMatch", "FieldValueNotSupported", message))

    if watch and initial is not None and match != NOT_OLDER_THAN:
        forbid(f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}")
    if match and watch and version.watch_list:
        if initial is None:
            forbid(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            )
        only(NOT_OLDER_THAN)
    elif match:
        if watch:
            forbid("resourceVersionMatch is forbidden for watch")
        if not opts.resource_version:
            forbid("resourceVersionMatch is forbidden unless resourceVersion is provided")
        only("Exact", NOT_OLDER_THAN, "")
        if match == "Exact" and opts.resource_version == "0":
            forbid('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
    if match and opts.token:
        forbid("resourceVersionMatch is forbidden when continue is provided")
    if not watch and initial is not None:
        forbid("sendInitialEvents is forbidden for list", "sendInitialEvents")
    return causes


def _list_options(query: Any, resource: str, version: Version, *, watch: bool) -> ListOptions:
    """The options of a LIST or WATCH request: 400 when undecodable, 422 when invalid.

    An unparsable resourceVersion is a 500 without a reason on a WATCH (and on a LIST
    of 1.20), a 400 on a paginated or ``Exact`` LIST, which the apiserver hands to etcd.
    """
    refused = version.unsupported_pod_fields if resource == "pods" else frozenset()
    raw_initial = query.get("sendInitialEvents") if version.watch_list else None
    opts = ListOptions(
        selector=parse_selector(
            resource, query.get("fieldSelector", ""), query.get("labelSelector", ""), refused
        ),
        resource_version=query.get("resourceVersion", ""),
        rv=None,
        match=query.get("resourceVersionMatch", ""),
        limit=_query_int(query, "limit") or 0,
        token=query.get("continue", ""),
        timeout=_query_int(query, "timeoutSeconds"),
        bookmarks=parse_watch_flag(query.get("allowWatchBookmarks")),
        send_initial=None if raw_initial is None else parse_watch_flag(raw_initial),
    )
    causes = _option_causes(opts, version, watch=watch)
    if causes:
        raise invalid_options("ListOptions.meta.k8s.io", causes)
    raw = opts.resource_version
    # A watch from "0" starts from the current state; a continued list from its token.
    if not raw or (watch and raw == "0") or (not watch and opts.token):
        return opts
    if not _UNSIGNED.fullmatch(raw):
        why = (
            f'resourceVersion: Invalid value: "{raw}": strconv.ParseUint: parsing "{raw}": '
            "invalid syntax"
        )
        if watch:
            raise undecodable(why)
        if opts.limit or opts.match == "Exact":
            raise bad_request(f"invalid resource version: {why}")
        raise undecodable(why, version.bad_list_rv_status)
    return replace(opts, rv=int(raw))


class ApiServer:
    """The aiohttp application serving the simulated Kubernetes API."""

    def __init__(
        self,
        store: Store,
        authorizer: Authorizer,
        faults: Faults,
        requests: RequestLog,
        *,
        bookmark_interval: float = 1.0,
        control: ControlHandler | None = None,
        server_address: Callable[[], str] = lambda: "127.0.0.1:0",
        version: Version = CURRENT,
    ) -> None:
        self.version = version
        self.store = store
        self.authorizer = authorizer
        self.faults = faults
        self.requests = requests
        self.bookmark_interval = bookmark_interval
        self._control = control
        self._server_address = server_address
        self.streams: set[WatchStream] = set()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._handle)

    def cut_watches(self) -> None:
        for stream in list(self.streams):
            stream.cut()

    # ------------------------------------------------------------------ entry

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        info = RequestInfo()
        status = 500
        response: web.StreamResponse
        try:
            response = await self._serve(request, info)
            status = response.status
            if isinstance(response, web.Response) and response.body is not None:
                info.bytes = len(response.body) if isinstance(response.body, bytes) else 0
        except ApiError as err:
            response = _error_response(err)
            status = err.code
            info.bytes = len(response.body) if isinstance(response.body, bytes) else 0
        except anyio.get_cancelled_exc_class():
            status = 499
            raise
        except Exception as exc:
            if not client_gone(exc):
                log.exception(
                    "simulated apiserver failed on %s %s", request.method, request.path_qs
                )
                response = _error_response(internal_error("simulator failure"))
                status = 500
            else:
                log.debug("client left during %s %s", request.method, request.path_qs)
                status = 499
                # Nothing more can reach the client; aborting makes aiohttp's own
                # finishing write fail fast, which it treats as a disconnect.
                if request.transport is not None:
                    request.transport.abort()
                response = web.Response(status=499)
        else:
            if info.client_gone:
                status = 499
        finally:
            if not request.path.startswith("/_sim/"):
                self.requests.add(
                    RequestRecord(
                        verb=info.verb or request.method.lower(),
                        resource=info.resource,
                        namespace=info.namespace,
                        name=info.name,
                        path=request.path,
                        query=request.query_string,
                        status=status,
                        bytes=info.bytes,
                        duration=time.perf_counter() - started,
                        user=info.user,
                        time=time.time(),
                    )
                )
        return response

    async def _serve(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        path = request.path
        user = self.authorizer.authenticate(request.headers.get("Authorization"))
        if user is None and path in PUBLIC_PATHS:
            # system:public-info-viewer lets anyone read these on a real apiserver.
            info.verb = "get"
            return self._non_resource([path.strip("/")]) or _json_response({})
        if user is None:
            raise unauthorized()
        info.user = user
        if path.startswith("/_sim/") or path == "/_sim":
            if not self.authorizer.is_admin(user) or self._control is None:
                raise path_not_found()
            return await self._control(request, path[len("/_sim/") :])
        parts = [unquote(p) for p in path.split("/") if p]
        doc = self._non_resource(parts, request.headers.get("Accept", ""))
        if doc is not None:
            info.verb = "get"
            if request.method not in ("GET", "HEAD"):
                raise method_not_allowed()
            return doc
        target = self._route(parts)
        return await self._resource(request, info, target)

    def _non_resource(self, parts: list[str], accept: str = "") -> web.Response | None:
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return web.Response(text="ok", content_type="text/plain")
        body: JSONDict | None = None
        if parts == ["version"]:
            body = self.version.version_info()
        elif parts == ["api"]:
            body = discovery.api_versions(self._server_address())
        elif parts == ["apis"]:
            body = discovery.api_group_list()
        elif len(parts) == 2 and parts[0] == "api":
            body = discovery.resource_list("", parts[1])
            if body is None:
                raise path_not_found()
        elif len(parts) == 2 and parts[0] == "apis":
            body = discovery.api_group(parts[1])
            if body is None:
                raise path_not_found()
        elif parts == ["openapi", "v2"]:
            body = discovery.openapi_v2_document(self.version.git_version)
            if "protobuf" in accept:
                return web.Response(
                    body=discovery.openapi_v2_protobuf(body),
                    content_type=discovery.OPENAPI_V2_PROTOBUF,
                )
        elif parts == ["openapi", "v3"]:
            body = discovery.openapi_v3_index()
        elif len(parts) >= 3 and parts[:2] == ["openapi", "v3"]:
            gv = parts[2:]
            doc = None
            if gv[0] == "api" and len(gv) == 2:
                doc = discovery.openapi_v3_document("", gv[1], self.version.git_version)
            elif gv[0] == "apis" and len(gv) == 3:
                doc = discovery.openapi_v3_document(gv[1], gv[2], self.version.git_version)
            if doc is None:
                raise path_not_found()
            body = doc
        elif len(parts) == 3 and parts[0] == "apis":
            body = discovery.resource_list(parts[1], parts[2])
            if body is None:
                raise path_not_found()
        if body is None:
            return None
        return _json_response(body)

    def _route(self, parts: list[str]) -> Target:
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise path_not_found()

        def lookup(name: str) -> ResourceType:
            rt = RESOURCES.get(name)
            if rt is None or rt.group != group or rt.version != version:
                raise path_not_found()
            return rt

        if not rest:
            raise path_not_found()
        # /namespaces/NS/RESOURCE... unless it is the core group's own namespaces
        # resource with a subresource (/api/v1/namespaces/NAME/status).
        if rest[0] == "namespaces" and len(rest) >= 3 and (group or rest[2] in RESOURCES):
            rt = lookup(rest[2])
            if not rt.namespaced or len(rest) > 5:
                raise path_not_found()
            return Target(
                rt,
                rest[1],
                rest[3] if len(rest) > 3 else "",
                rest[4] if len(rest) > 4 else "",
            )
        rt = lookup(rest[0])
        if len(rest) > 3:
            raise path_not_found()
        if len(rest) > 1 and rt.namespaced:
            raise path_not_found()
        return Target(rt, None, rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else "")

    # -------------------------------------------------------------- resources

    async def _resource(
        self, request: web.Request, info: RequestInfo, target: Target
    ) -> web.StreamResponse:
        rt = target.rt
        method = request.method
        query = request.query
        if target.subresource and target.subresource not in rt.subresources:
            raise path_not_found()
        if target.name:
            verbs = {
                "GET": "get",
                "HEAD": "get",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
            }
        else:
            watching = parse_watch_flag(query.get("watch"))
            verbs = {
                "GET": "watch" if watching else "list",
                "HEAD": "list",
                "POST": "create",
                "DELETE": "deletecollection",
            }
        if target.subresource:
            verbs = SUBRESOURCE_VERBS
        verb = verbs.get(method)
        if verb is None or verb == "deletecollection":
            raise method_not_allowed()
        info.verb = verb
        info.resource = rt.name + (f"/{target.subresource}" if target.subresource else "")
        info.namespace = target.namespace or ""
        info.name = target.name
        resource_for_auth = info.resource
        denied = self.authorizer.authorize(
            info.user, verb, rt.group, resource_for_auth, target.namespace, target.name or None
        )
        if denied is not None:
            raise forbidden(denied, rt.qualified, target.name)
        decision = self.faults.on_request(verb, rt.name)
        if decision.delay > 0:
            await anyio.sleep(decision.delay)
        if decision.error is not None:
            if decision.error.status == 403:  # the authorizer's refusal, as for a missing rule
                message = forbidden_message(
                    info.user,
                    verb,
                    rt.group,
                    resource_for_auth,
                    target.namespace or None,
                    target.name or None,
                )
                raise forbidden(message, rt.qualified, target.name)
            raise injected(decision.error.status, decision.error.retry_after)

        if verb == "list":
            return await self._list(request, info, target)
        if verb == "watch":
            return await self._watch(request, info, target)
        if verb == "get":
            return self._get(request, target)
        if verb == "create":
            return await self._create(request, target)
        if verb == "update":
            return await self._update(request, target)
        if verb == "patch":
            return await self._patch(request, target)
        return await self._delete(request, info, target)

    def _ns(self, target: Target) -> str:
        return target.namespace or "" if target.rt.namespaced else ""

    def _current(self, target: Target) -> JSONDict:
        obj = self.store.get(target.rt.name, self._ns(target), target.name)
        if obj is None:
            raise not_found(target.rt.qualified, target.name)
        return obj

    def _get(self, request: web.Request, target: Target) -> web.Response:
        stored = self.store.get_stored(target.rt.name, self._ns(target), target.name)
        if stored is None:
            raise not_found(target.rt.qualified, target.name)
        if discovery.wants_table(request.headers.get("Accept", "")):
            meta = {"resourceVersion": str(stored.rv)}
            return _json_response(
                discovery.table(
                    target.rt, [stored.copy()], meta, request.query.get("includeObject", "Metadata")
                )
            )
        return web.Response(body=stored.raw, content_type=JSON_TYPE)

    async def _list(
        self, request: web.Request, info: RequestInfo, target: Target
    ) -> web.StreamResponse:
        query = request.query
        rt = target.rt
        opts = _list_options(query, rt.name, self.version, watch=False)
        at_rv: int | None = None
        start = None
        if opts.token:
            if opts.resource_version:
                raise bad_request(
                    "resourceVersion: Forbidden: specifying resource version is not allowed "
                    "when using continue"
                )
            at_rv, start = decode_continue(opts.token)
            if at_rv < self.store.oldest_resource_version:
                raise continue_expired(self.store, start)
        elif opts.rv == 0 and opts.match != "Exact":
            # Served from the watch cache, which does not paginate: every item, no continue.
            opts = replace(opts, limit=0)
        elif opts.rv is not None:
            if opts.match == "Exact":
                if opts.rv > self.store.resource_version and not self.version.exact_list_waits:
                    # 1.20 reads an Exact list from etcd and passes its refusal on.
                    raise internal_error("etcdserver: mvcc: required revision is a future revision")
                at_rv = opts.rv
            elif opts.rv > self.store.resource_version:
                raise too_large_rv(opts.rv, self.store.resource_version)
        ns = target.namespace if rt.namespaced else None
        page = self.store.list_page(
            rt.name, ns, opts.selector, limit=opts.limit, start_after=start, at_rv=at_rv
        )
        meta: JSONDict = {"resourceVersion": str(page.rv)}
        if page.next_start is not None:
            meta["continue"] = encode_continue(page.rv, page.next_start)
            if page.remaining is not None:
                meta["remainingItemCount"] = page.remaining
        if discovery.wants_table(request.headers.get("Accept", "")):
            return _json_response(
                discovery.table(
                    rt,
                    [s.copy() for s in page.items],
                    meta,
                    request.query.get("includeObject", "Metadata"),
                )
            )
        head = (
            b'{"kind":"'
            + rt.list_kind.encode()
            + b'","apiVersion":"'
            + rt.api_version.encode()
            + b'","metadata":'
            + encode(meta)
            + b',"items":['
        )
        items = page.items
        if len(items) <= STREAM_ITEMS:
            body = head + b",".join(s.raw for s in items) + b"]}"
            return web.Response(body=body, content_type=JSON_TYPE)
        # Big lists go out in slices with a known length: no single huge buffer is
        # built (and then copied again by the transport).
        length = len(head) + sum(len(s.raw) for s in items) + len(items) - 1 + 2
        response = web.StreamResponse(headers={"Content-Type": JSON_TYPE})
        response.content_length = length
        await response.prepare(request)
        await response.write(head)
        for offset in range(0, len(items), STREAM_ITEMS):
            chunk = b",".join(s.raw for s in items[offset : offset + STREAM_ITEMS])
            await response.write(chunk if offset == 0 else b"," + chunk)
        await response.write(b"]}")
        await response.write_eof()
        info.bytes = length
        return response

    async def _watch(
        self, request: web.Request, info: RequestInfo, target: Target
    ) -> web.StreamResponse:
        rt = target.rt
        opts = _list_options(request.query, rt.name, self.version, watch=True)
        # A resourceVersion beyond the present is no error for a watch: the watch cache
        # waits for it to come, silent until then (on every release).
        if opts.rv is not None and opts.rv <= self.store.resource_version:
            self.store.check_watch_start(opts.rv)
        if target.name:
            raise method_not_allowed()
        watch = WatchRequest(
            rt=rt,
            namespace=target.namespace if rt.namespaced else None,
            selector=opts.selector,
            resource_version=opts.resource_version,
            timeout=float(opts.timeout) if opts.timeout else DEFAULT_TIMEOUT,
            bookmarks=opts.bookmarks,
            send_initial_events=opts.send_initial,
        )
        stream = WatchStream(
            self.store, self.faults, watch, bookmark_interval=self.bookmark_interval
        )
        response = web.StreamResponse(
            status=200, headers={"Content-Type": JSON_TYPE, "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        self.streams.add(stream)
        try:
            await stream.run(request, response)
        finally:
            self.streams.discard(stream)
            info.bytes = stream.bytes
            info.client_gone = stream.client_gone
        return response

    # ---------------------------------------------------------------- writing

    async def _body(
        self, request: web.Request, rt: ResourceType, *, patch: bool = False
    ) -> tuple[str, Any]:
        content_type = request.content_type or JSON_TYPE
        if content_type == "application/octet-stream" and not patch:
            content_type = JSON_TYPE
        accepted = PATCH_TYPES if patch else _body_types(rt)
        if content_type not in accepted:
            raise unsupported_media_type(accepted)
        raw = await request.read()
        if content_type == protobuf.MEDIA_TYPE:
            try:
                return content_type, protobuf.decode(raw)
            except protobuf.UndecodableError as exc:
                raise bad_request(f"error decoding body: protobuf: {exc}") from None
        data = _decode(raw, content_type)
        if not patch and not isinstance(data, dict):
            raise bad_request(
                "the object provided is unrecognized (must be of type "
                f"{'list' if isinstance(data, list) else type(data).__name__})"
            )
        return content_type, data

    def _check_kind(self, target: Target, obj: JSONDict) -> None:
        rt = target.rt
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if kind not in (None, "", rt.kind):
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        if api_version not in (None, "", rt.api_version):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            given = meta.get("namespace")
            if given not in (None, "", target.namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = target.namespace
        if target.name and meta.get("name") not in (None, "", target.name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({target.name})"
            )
        if target.name:
            meta["name"] = target.name

    def _dry_run(self, request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":
                raise bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
        return bool(values)

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        _, obj = await self._body(request, target.rt)
        self._check_kind(target, obj)
        if target.rt.name in ("pods", "namespaces"):
            # The apiserver resets status on create: kubelets and controllers own it.
            obj["status"] = {}
        if self._dry_run(request):
            return _json_response(obj, 201)
        created = self.store.create(target.rt.name, obj, validate=True)
        return _json_response(created, 201)

    def _merge_protected(self, target: Target, current: JSONDict, new: JSONDict) -> JSONDict:
        """Keep what a write through this endpoint may not change (status vs spec)."""
        if target.rt.name not in ("pods", "nodes", "namespaces"):
            return new
        if target.subresource == "status":
            merged = dict(current)
            merged["status"] = new.get("status", {})
            meta = dict(current.get("metadata") or {})
            new_meta = new.get("metadata") or {}
            for key in ("labels", "annotations"):
                if key in new_meta:
                    meta[key] = new_meta[key]
            meta.pop("resourceVersion", None)
            if new_meta.get("resourceVersion"):
                meta["resourceVersion"] = new_meta["resourceVersion"]
            merged["metadata"] = meta
            return merged
        new = dict(new)
        new["status"] = current.get("status", {})
        return new

    async def _update(self, request: web.Request, target: Target) -> web.Response:
        _, obj = await self._body(request, target.rt)
        self._check_kind(target, obj)
        current = self._current(target)
        obj = self._merge_protected(target, current, obj)
        if self._dry_run(request):
            return _json_response(obj)
        updated = self.store.update(target.rt.name, obj)
        return _json_response(updated)

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        content_type, patch = await self._body(request, target.rt, patch=True)
        rt = target.rt
        current = self.store.get(rt.name, self._ns(target), target.name)
        if current is None:
            if content_type != APPLY_PATCH or target.subresource:
                raise not_found(rt.qualified, target.name)
            if not isinstance(patch, dict):
                raise bad_request("apply patch must be an object")
            self._check_kind(target, patch)
            created = self.store.create(rt.name, patch, validate=True)
            return _json_response(created, 201)
        result = apply_patch(content_type, current, patch)
        if not isinstance(result, dict):
            raise bad_request("patch did not produce an object")
        result_meta = result.get("metadata") or {}
        if result_meta.get("name") != target.name:
            raise bad_request("metadata.name: Invalid value: the name of the object cannot change")
        self._check_kind(target, result)
        result = self._merge_protected(target, current, result)
        if self._dry_run(request):
            return _json_response(result)
        updated = self.store.update(rt.name, result)
        return _json_response(updated)

    async def _delete_options(self, request: web.Request) -> JSONDict:
        """DeleteOptions as kube-apiserver reads them: from the body whenever there is one.

        The query is decoded only when the body is empty; next to a body, query options
        (``dryRun``, ``gracePeriodSeconds``, ``propagationPolicy``, ``orphanDependents``)
        are ignored without a word. A client that sends ``?dryRun=All`` beside a
        preconditions body deletes for real, here as on the real server.
        """
        raw = await request.read()
        options: JSONDict
        if raw:
            content_type = request.content_type or JSON_TYPE
            if content_type not in (*TEXT_BODY_TYPES, "application/octet-stream"):
                raise unsupported_media_type(TEXT_BODY_TYPES)
            try:
                options = _decode_delete_options(raw, content_type)
            except ApiError as err:
                raise undecodable(err.message, self.version.undecodable_delete_status) from None
        else:
            query = request.query
            options = {}
            grace = _query_int(query, "gracePeriodSeconds")
            if grace is not None:
                options["gracePeriodSeconds"] = grace
            if "propagationPolicy" in query:
                options["propagationPolicy"] = query["propagationPolicy"]
            if "orphanDependents" in query:
                options["orphanDependents"] = query["orphanDependents"] == "true"
            if "dryRun" in query:
                options["dryRun"] = query.getall("dryRun")
        _validate_delete_options(options)
        return options

    async def _delete(
        self, request: web.Request, info: RequestInfo, target: Target
    ) -> web.Response:
        options = await self._delete_options(request)
        grace = options.get("gracePeriodSeconds")
        dry_run = bool(options.get("dryRun"))
        pre = options.get("preconditions") or {}
        uid = pre.get("uid")
        rv = pre.get("resourceVersion")
        result = self.store.delete(
            target.rt.name,
            self._ns(target),
            target.name,
            uid=None if uid is None else str(uid),
            resource_version=None if rv is None else str(rv),
            dry_run=dry_run,
            grace_period=grace,
            user=info.user,
        )
        meta = result.get("metadata") or {}
        if target.rt.returns_object_on_delete or "deletionTimestamp" in meta:
            # An object its finalizers keep is answered as it now stands, whatever its kind.
            return _json_response(result)
        return _json_response(
            success_status(target.name, target.rt.group, target.rt.name, str(meta.get("uid", "")))
        )
