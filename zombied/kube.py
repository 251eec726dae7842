"""Talking to the API server: one transport, one owner of credentials, one failure type.

`open_kube` finds the cluster and credentials (`zombied.access`), builds the one
HTTP transport every request goes through (`open_session`: its limits, timeouts and
keep-alive say why they are what they are) and yields a `Kube`, which sends each
request with the header `zombied.credentials.Credentials` keeps fresh and, after a
401, once more with a refreshed one. Every failure (error answer, watch ``Status``,
broken connection, timeout, garbled body) is one `ApiError` with a `Kind`, read from
the answer's ``Status`` body; what a kind means for the work is the caller's decision.
`Permissions` logs each missing RBAC rule once and tells ``/readyz`` what is refused;
only the authorizer's refusals count as missing rules, and a record expires when the
refusal is not seen again. Never retries beyond the one request after a credential
refresh, and never decides anything about pods.
"""

from __future__ import annotations

import math
import platform
import re
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import aiohttp.helpers
import anyio
import kubernetes_asyncio
import msgspec
from yarl import URL

from zombied import __version__
from zombied.access import Cluster, load_access
from zombied.credentials import CredentialError, Credentials
from zombied.errors import KubeconfigError, ZombiedError
from zombied.log import get_logger

log = get_logger(__name__)

#: The HTTP method of each writing verb; get, list and watch are GETs.
_WRITE_METHODS: Final = {"create": "POST", "update": "PUT", "delete": "DELETE"}

#: Go's names for the CPU architectures, as kubectl's User-Agent spells them.
_GOARCH: Final = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

# -- the transport: every value here is a decision, with its reason -------------------

#: Seconds an idle pooled connection is kept. Middleboxes between zombied and its API
#: server forget quiet flows and then drop their packets without a reset (Azure's load
#: balancer after 4 minutes, AWS NLB after 350 s, some NAT gateways and proxies far
#: sooner); a request sent on such a connection hangs until its deadline. Kept well
#: under those and under the API server's own idle timeout (90 s), so a pooled
#: connection is never one the far end has dropped or is closing. A new connection
#: costs one TLS handshake: nothing at zombied's rates.
KEEPALIVE_S: Final = 15.0
#: Seconds to open a connection (TCP and TLS). A healthy API server answers in
#: milliseconds; without a bound, a SYN into a dead address waits out the kernel's
#: retries (about two minutes) while a DELETE's or the lease's deadline runs.
CONNECT_TIMEOUT_S: Final = 10.0
#: The largest line a watch may send: a pod in a watch event can exceed aiohttp's
#: default read buffer, and etcd allows objects of 1.5 MiB.
READ_BUFSIZE: Final = 2**21


def user_agent() -> str:
    """``zombied/0.2.0 (linux/amd64) kubernetes_asyncio/36.1.0``, in kubectl's format."""
    machine = platform.machine().lower()
    arch = _GOARCH.get(machine, machine or "unknown")
    return (
        f"zombied/{__version__} ({sys.platform}/{arch}) "
        f"kubernetes_asyncio/{kubernetes_asyncio.__version__}"
    )


def pool_size(*, watches: int, workers: int) -> int:
    """Connections the transport may open, so that no request waits for another's
    socket (a DELETE queued behind a full pool spends its deadline waiting): one per
    watch and per delete worker, plus the Event writer, the lease and a spare."""
    return watches + workers + 4


def open_session(cluster: Cluster, *, pool_size: int) -> aiohttp.ClientSession:
    """The HTTP transport of every request to ``cluster``: ``pool_size`` connections,
    each kept ``KEEPALIVE_S`` when idle and opened within ``CONNECT_TIMEOUT_S``. There
    is no read timeout here: a request carries its own deadline, and a watch guards
    its stream against silence itself (what counts as silence depends on the server).
    No TCP keep-alive either: a middlebox answers those itself, and that guard notices
    a dead stream anyway. ``trust_env`` is off: aiohttp would read netrc on every
    request (an entry for the API server replaces the bearer token with Basic auth);
    the proxy variables are read once, by `Kube`."""
    connector = aiohttp.TCPConnector(
        limit=pool_size, limit_per_host=0, keepalive_timeout=KEEPALIVE_S, ssl=_tls(cluster)
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        trust_env=False,
        read_bufsize=READ_BUFSIZE,
    )


def _tls(cluster: Cluster) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=cluster.ca_file)
    if cluster.cert_file:
        context.load_cert_chain(cluster.cert_file, keyfile=cluster.key_file)
    if not cluster.verify:  # insecure-skip-tls-verify
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


# -- requests and their failures --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """One API request, named the way RBAC names what it needs."""

    verb: str  # get, list, watch, create, update, delete
    resource: str  # plural: pods, events, leases
    namespace: str | None = None  # None: every namespace
    name: str | None = None
    group: str = ""  # API group; "" is the core group

    @property
    def method(self) -> str:
        """The HTTP method of the verb: GET for get, list and watch."""
        return _WRITE_METHODS.get(self.verb, "GET")

    @property
    def path(self) -> str:
        """The URL path, every segment quoted."""
        parts = ["api", "v1"] if not self.group else ["apis", self.group, "v1"]
        if self.namespace is not None:
            parts += ["namespaces", self.namespace]
        parts.append(self.resource)
        if self.name is not None:
            parts.append(self.name)
        return "/" + "/".join(quote(part, safe="") for part in parts)

    @property
    def rule(self) -> str:
        """The RBAC rule this request needs, as an operator would grant it."""
        what = f"{self.resource} in API group {self.group}" if self.group else self.resource
        where = (
            f"in namespace {self.namespace}"
            if self.namespace is not None
            else "at the cluster scope"
        )
        return f"{self.verb} {what} {where}"

    def __str__(self) -> str:
        if self.name is not None:
            where = f"{self.namespace}/{self.name}" if self.namespace else self.name
            return f"{self.verb} {self.resource.removesuffix('s')} {where}"
        where = f"in namespace {self.namespace}" if self.namespace else "in every namespace"
        return f"{self.verb} {self.resource} {where}"


class Kind(StrEnum):
    """What a failed request means, whatever its status code."""

    UNAUTHORIZED = "unauthorized"  # 401 after a credential refresh: credentials rejected
    FORBIDDEN = "forbidden"  # 403 from the authorizer: an RBAC rule is missing
    DENIED = "denied"  # any other 403: admission (a policy, a quota, a namespace going away)
    NOT_FOUND = "not-found"  # 404
    CONFLICT = "conflict"  # 409: a precondition or resourceVersion did not hold
    GONE = "gone"  # 410: the resourceVersion is older than the server keeps
    THROTTLED = "throttled"  # 429: slow down, see retry_after
    TRANSIENT = "transient"  # 5xx, 408, timeouts, broken connections, garbled answers
    INVALID = "invalid"  # any other 4xx: the server will never accept this request


#: The authorizer's words in its 403 (apiserver's ``responsewriters.forbiddenMessage``,
#: the same since Kubernetes 1.11): ``… is forbidden: User "x" cannot delete resource
#: "pods" in API group "" in the namespace "a"``. Its ``Status`` has nothing else of its
#: own: reason Forbidden and no causes, as admission refusals made with
#: ``admission.NewForbidden`` (a quota) have too.
_AUTHORIZER_WORDS: Final = re.compile(r'User ".*" cannot \S+ (?:resource|path) "')


def kind_of(code: int, status: Mapping[str, object] | None = None) -> Kind:
    """The kind of a failed request from its HTTP status code (0: no answer) and the
    ``Status`` of its body. A 403 is an RBAC refusal only when the ``Status`` is the
    authorizer's: reason Forbidden, no ``details.causes`` (admission adds them, e.g.
    ``NamespaceTerminating`` for a create in a namespace being deleted), in the
    authorizer's words. A 403 without such a body is `Kind.DENIED`."""
    if code == 403:
        return Kind.FORBIDDEN if _authorizer_refused(status or {}) else Kind.DENIED
    kinds = {401: Kind.UNAUTHORIZED, 404: Kind.NOT_FOUND, 409: Kind.CONFLICT}
    kinds |= {410: Kind.GONE, 429: Kind.THROTTLED}
    if code in kinds:
        return kinds[code]
    if code in {0, 408} or code >= 500:
        return Kind.TRANSIENT
    return Kind.INVALID


def _authorizer_refused(status: Mapping[str, object]) -> bool:
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    message = status.get("message")
    return (
        status.get("reason") == "Forbidden"
        and not causes
        and isinstance(message, str)
        and _AUTHORIZER_WORDS.search(message) is not None
    )


class ApiError(ZombiedError):
    """A request failed; ``kind`` says how, ``request`` which one. Its message is the
    one line a command prints (a refusal names the RBAC rule to grant)."""

    def __init__(
        self,
        request: Request,
        code: int,
        reason: str,
        message: str = "",
        *,
        retry_after: float | None = None,
        kind: Kind | None = None,
    ) -> None:
        self.request = request
        self.code = code
        self.kind = kind if kind is not None else kind_of(code)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        super().__init__(str(self))

    @classmethod
    def from_status(
        cls,
        request: Request,
        status: object,
        http_code: int = 0,
        *,
        retry_after: float | None = None,
    ) -> ApiError:
        """The error an answer states: its HTTP code (0 for a watch ``ERROR`` event) and
        the ``Status`` object of its body, whose code counts when there is no other."""
        fields: Mapping[str, object] = (
            status if isinstance(status, Mapping) and status.get("kind") == "Status" else {}
        )
        stated = fields.get("code")
        code = http_code or (stated if isinstance(stated, int) else 0)
        reason = fields.get("reason")
        message = fields.get("message")
        return cls(
            request,
            code,
            reason if isinstance(reason, str) and reason else "Error",
            message if isinstance(message, str) else "",
            retry_after=retry_after,
            kind=kind_of(code, fields),
        )

    @property
    def refused(self) -> bool:
        """Credentials rejected or an RBAC rule missing: the `Permissions` ledger reports
        it, whoever made the request. Other 403s are the caller's to report."""
        return self.kind in (Kind.UNAUTHORIZED, Kind.FORBIDDEN)

    @property
    def log_fields(self) -> dict[str, object]:
        """What a log line of the failure says about it."""
        return {
            "verb": self.request.verb,
            "code": self.code,
            "reason": self.reason,
            "message": self.message[:200] or None,
        }

    @property
    def overloaded(self) -> bool:
        """The server (or the way to it) says: slow down."""
        return self.kind in (Kind.THROTTLED, Kind.TRANSIENT)

    def __str__(self) -> str:
        detail = self.message or self.reason
        if self.kind is Kind.FORBIDDEN:
            return f"missing RBAC permission to {self.request.rule}: {detail}"
        if self.kind is Kind.UNAUTHORIZED:
            return f"credentials rejected (HTTP 401) to {self.request}: {detail}"
        answer = f"HTTP {self.code}" if self.code else "connection failed"
        return f"cannot {self.request} ({answer}): {detail}"


def _transport(request: Request, exc: BaseException) -> ApiError:
    detail = str(exc) or type(exc).__name__
    return ApiError(request, 0, type(exc).__name__, detail[:500])


def _retry_after(value: str | None) -> float | None:
    """The seconds of a ``Retry-After`` header; whoever waits caps them
    (`zombied.ratelimit.retry_delay`)."""
    try:
        return float(value) if value else None
    except ValueError:
        return None  # the HTTP-date form: the API server never sends it


#: Answers that prove the request got past authorization.
_ANSWERED_ON_MERITS: Final = frozenset(
    {Kind.DENIED, Kind.NOT_FOUND, Kind.CONFLICT, Kind.GONE, Kind.INVALID}
)

#: What a request can raise besides an HTTP answer: all of them become ApiError.
_TRANSPORT: Final = (aiohttp.ClientError, TimeoutError, OSError)


# -- who may do what --------------------------------------------------------------------

#: Seconds a refusal counts after it was last seen. Everything zombied keeps doing is
#: retried well within this (a failed delete or watch within 30 s of backoff, the lease
#: every retry period), so a refusal that lasts keeps its record and readiness does not
#: flap; a refusal nothing repeats (the Event of the last reap in a namespace) stops
#: holding readiness a few minutes later instead of for good.
REFUSAL_TTL: Final = 300.0


class Permissions:
    """Which RBAC rules the server refuses right now, and whether it knows who we are.

    `Kube` records every request's outcome here, so a refusal is logged once when it
    starts and once when it ends; a refusal not seen again for ``REFUSAL_TTL`` is
    forgotten. Without ``report`` (one-shot commands) it only counts.
    """

    def __init__(self, *, report: bool = True) -> None:
        self._refused: dict[str, float] = {}  # missing rule -> loop time last refused
        self._rejected: tuple[str, float] | None = None  # the server's message, when
        self._report = report

    def problems(self) -> list[str]:
        """What stops zombied from working, one line each; empty when nothing does."""
        stale = anyio.current_time() - REFUSAL_TTL
        self._refused = {rule: at for rule, at in self._refused.items() if at > stale}
        if self._rejected is not None and self._rejected[1] <= stale:
            self._rejected = None
        found = [f"forbidden, missing RBAC rule: {rule}" for rule in sorted(self._refused)]
        if self._rejected is not None:
            found.insert(0, f"credentials rejected (HTTP 401): {self._rejected[0]}")
        return found

    def refused(self, error: ApiError) -> None:
        """The server rejected our credentials or refused ``error.request`` by RBAC."""
        self.problems()  # forget what expired: a refusal seen again is logged again
        now = anyio.current_time()
        if error.kind is Kind.UNAUTHORIZED:
            if self._rejected is None and self._report:
                log.error(
                    "api.unauthorized",
                    request=str(error.request),
                    message=error.message or None,
                    hint="the credentials were refreshed once and rejected again",
                )
            self._rejected = (error.message or error.reason, now)
            return
        rule = error.request.rule
        if rule not in self._refused and self._report:
            log.error(
                "api.forbidden",
                request=str(error.request),
                missing_rule=rule,
                message=error.message or None,
            )
        self._refused[rule] = now

    def allowed(self, request: Request) -> None:
        """The server accepted ``request`` (or answered it on its merits)."""
        if self._rejected is not None:
            self._rejected = None
            if self._report:
                log.info("api.authorized", request=str(request))
        if self._refused and self._refused.pop(request.rule, None) is not None and self._report:
            log.info("api.permitted", rule=request.rule)


# -- the client -------------------------------------------------------------------------


class Kube:
    """The API server, as zombied talks to it; build it with `open_kube`."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        cluster: Cluster,
        credentials: Credentials,
        *,
        on_failure: Callable[[str, int], None] | None = None,
        report_access: bool = True,
    ) -> None:
        """``on_failure(verb, code)`` counts every failed request (code 0: no answer)."""
        self.credentials = credentials
        self.permissions = Permissions(report=report_access)
        self._session = session
        self._on_failure = on_failure if on_failure is not None else (lambda _verb, _code: None)
        self._base = cluster.server
        # None is aiohttp's own default for each of them.
        self._options: dict[str, Any] = {"server_hostname": cluster.server_name}
        self._options |= _proxy(cluster)
        self._headers = {"User-Agent": user_agent(), "Accept": "application/json"}

    async def request(
        self,
        request: Request,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
        timeout: float,  # noqa: ASYNC109 - every request carries its own deadline
    ) -> Any:
        """Send ``request`` and return the decoded JSON answer; `ApiError` otherwise.
        ``timeout`` bounds all of it, a wait for fresh credentials included."""
        data = msgspec.json.encode(body) if body is not None else None
        try:
            with anyio.fail_after(timeout):
                async with self._send(request, query, data) as response:
                    payload = await response.read()
            return msgspec.json.decode(payload)
        except _TRANSPORT as exc:
            raise self._failed(_transport(request, exc)) from exc
        except msgspec.DecodeError as exc:
            error = ApiError(request, 0, "MalformedAnswer", f"not JSON: {exc}")
            raise self._failed(error) from exc

    @asynccontextmanager
    async def stream(
        self,
        request: Request,
        *,
        query: Mapping[str, str | int],
        timeout: float,  # noqa: ASYNC109 - the deadline of the answer's start
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """Open a streaming answer (a watch) within ``timeout`` and yield its body;
        `ApiError` on failure. Once open there is no read timeout: the caller guards
        the stream against silence."""
        try:
            with anyio.fail_after(timeout) as opening:
                async with self._send(request, query, None) as response:
                    opening.deadline = math.inf
                    yield response.content
        except _TRANSPORT as exc:
            raise self._failed(_transport(request, exc)) from exc

    @asynccontextmanager
    async def _send(
        self, request: Request, query: Mapping[str, str | int] | None, data: bytes | None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        url = URL(self._base + request.path, encoded=True)
        if query:
            url = url.with_query({key: str(value) for key, value in query.items()})
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        token = await self.credentials.header()
        for attempt in (1, 2):
            if token:
                headers["Authorization"] = token
            async with self._session.request(
                request.method, url, data=data, headers=headers, **self._options
            ) as response:
                if (
                    response.status == 401
                    and attempt == 1
                    and self.credentials.refreshable
                    and await self.credentials.refresh(token)
                ):
                    token = await self.credentials.header()
                    log.info("api.credentials_refreshed", request=str(request))
                    continue
                if response.status >= 400:
                    raise await self._failure(request, response)
                self.permissions.allowed(request)
                yield response
                return

    async def _failure(self, request: Request, response: aiohttp.ClientResponse) -> ApiError:
        try:
            body = await response.read()
            status = msgspec.json.decode(body) if body else None
        except (aiohttp.ClientError, msgspec.DecodeError):
            status = None
        error = ApiError.from_status(
            request,
            status,
            response.status,
            retry_after=_retry_after(response.headers.get("Retry-After")),
        )
        if error.refused:
            self.permissions.refused(error)
        elif error.kind in _ANSWERED_ON_MERITS:
            self.permissions.allowed(request)
        return self._failed(error)

    def _failed(self, error: ApiError) -> ApiError:
        self._on_failure(error.request.verb, error.code)
        return error


@asynccontextmanager
async def open_kube(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    pool_size: int = 100,
    on_failure: Callable[[str, int], None] | None = None,
    report_access: bool = True,
) -> AsyncIterator[Kube]:
    """Yield a `Kube` for the cluster: in-cluster without ``kubeconfig`` and ``context``
    when a service account is mounted, else the kubeconfig; `KubeconfigError` if the
    cluster or the first credentials cannot be had."""
    access = await load_access(kubeconfig, context)
    try:
        session = open_session(access.cluster, pool_size=pool_size)
    except (OSError, ssl.SSLError) as exc:  # a CA or client certificate it cannot use
        raise KubeconfigError(f"{access.where}: TLS settings: {exc}") from exc
    credentials = Credentials(access.credentials)
    try:
        await credentials.__aenter__()
    except CredentialError as exc:
        await session.close()
        raise KubeconfigError(f"{access.where}: {exc}") from None
    try:
        async with session:
            yield Kube(
                session,
                access.cluster,
                credentials,
                on_failure=on_failure,
                report_access=report_access,
            )
    finally:
        await credentials.__aexit__(None, None, None)


def _proxy(cluster: Cluster) -> dict[str, Any]:
    """The proxy of every request: the kubeconfig's ``proxy-url``, else the proxy
    variables (read once, with aiohttp's own lookup), as client-go."""
    if cluster.proxy:
        return {"proxy": cluster.proxy}
    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(URL(cluster.server))
    except LookupError:
        return {}  # no proxy set for this scheme, or NO_PROXY excludes the API server
    headers = {"Proxy-Authorization": auth.encode()} if auth is not None else None
    return {"proxy": str(proxy), "proxy_headers": headers}
