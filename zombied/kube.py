"""Talking to the API server: one client, one owner of credentials, one failure type.

`open_kube` loads the configuration with kubernetes_asyncio (in-cluster or kubeconfig)
and yields a `Kube`, which sends every request through kubernetes_asyncio's aiohttp
session with a bearer token from `Credentials`; tokens expire, so they are re-read
before expiry and once after a 401. Every failure (error answer, watch ``Status``,
broken connection, timeout, garbled body) is one `ApiError` with a `Kind`; what a kind
means for the work is the caller's decision. `Permissions` logs each missing RBAC rule
once and tells ``/readyz`` what is refused. Never retries beyond the one request after
a credential refresh, and never decides anything about pods.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import aiohttp.helpers
import anyio
import kubernetes_asyncio
import msgspec
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config.config_exception import ConfigException
from yarl import URL

from zombied import __version__
from zombied.errors import KubeconfigError, ZombiedError
from zombied.log import get_logger

log = get_logger(__name__)

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: How often a token file is re-read (the kubelet rotates it in place), as client-go.
TOKEN_FILE_PERIOD: Final = 60.0
#: The HTTP method of each writing verb; get, list and watch are GETs.
_WRITE_METHODS: Final = {"create": "POST", "update": "PUT", "delete": "DELETE"}
#: How long before its expirationTimestamp an exec plugin's token is replaced.
EXPIRY_MARGIN: Final = 30.0

#: Go's names for the CPU architectures, as kubectl's User-Agent spells them.
_GOARCH: Final = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
#: A pod in a watch event can exceed aiohttp's default read buffer (etcd allows 1.5 MiB).
_READ_BUFSIZE: Final = 2**21


def user_agent() -> str:
    """``zombied/0.2.0 (linux/amd64) kubernetes_asyncio/36.1.0``, in kubectl's format."""
    machine = platform.machine().lower()
    arch = _GOARCH.get(machine, machine or "unknown")
    return (
        f"zombied/{__version__} ({sys.platform}/{arch}) "
        f"kubernetes_asyncio/{kubernetes_asyncio.__version__}"
    )


def in_cluster() -> bool:
    """True when running in a pod with a service account token mounted."""
    return "KUBERNETES_SERVICE_HOST" in os.environ and (SERVICE_ACCOUNT_DIR / "token").exists()


def own_namespace() -> str | None:
    """The namespace of the pod we run in, from the service account, if any."""
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def pool_size(*, watches: int, workers: int) -> int:
    """Connections the session needs so that no request waits for a socket: one per
    watch and per delete worker, plus the Event writer, the lease and a spare."""
    return watches + workers + 4


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
    FORBIDDEN = "forbidden"  # 403: an RBAC rule is missing
    NOT_FOUND = "not-found"  # 404
    CONFLICT = "conflict"  # 409: a precondition or resourceVersion did not hold
    GONE = "gone"  # 410: the resourceVersion is older than the server keeps
    THROTTLED = "throttled"  # 429: slow down, see retry_after
    TRANSIENT = "transient"  # 5xx, 408, timeouts, broken connections, garbled answers
    INVALID = "invalid"  # any other 4xx: the server will never accept this request


def kind_of(code: int) -> Kind:
    """The kind of an HTTP status code of a failed request (0: no answer)."""
    kinds = {401: Kind.UNAUTHORIZED, 403: Kind.FORBIDDEN, 404: Kind.NOT_FOUND}
    kinds |= {409: Kind.CONFLICT, 410: Kind.GONE, 429: Kind.THROTTLED}
    if code in kinds:
        return kinds[code]
    if code in {0, 408} or code >= 500:
        return Kind.TRANSIENT
    return Kind.INVALID


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
    ) -> None:
        self.request = request
        self.code = code
        self.kind = kind_of(code)
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
        fields: Mapping[str, object] = status if isinstance(status, Mapping) else {}
        stated = fields.get("code") if fields.get("kind") == "Status" else None
        code = http_code or (stated if isinstance(stated, int) else 0)
        reason = fields.get("reason")
        message = fields.get("message")
        return cls(
            request,
            code,
            reason if isinstance(reason, str) and reason else "Error",
            message if isinstance(message, str) else "",
            retry_after=retry_after,
        )

    @property
    def refused(self) -> bool:
        """401 or 403: the `Permissions` ledger reports it, whoever made the request."""
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
    try:
        seconds = float(value) if value else -1.0
    except ValueError:
        return None  # the HTTP-date form: the API server never sends it
    return seconds if seconds >= 0 else None


#: Refusals that prove the request got past authorization.
_ANSWERED_ON_MERITS: Final = frozenset({Kind.NOT_FOUND, Kind.CONFLICT, Kind.GONE, Kind.INVALID})

#: What a request can raise besides an HTTP answer: all of them become ApiError.
_TRANSPORT: Final = (aiohttp.ClientError, TimeoutError, OSError)


# -- who may do what --------------------------------------------------------------------


class Permissions:
    """Which RBAC rules the server refuses right now, and whether it knows who we are.

    `Kube` records every request's outcome here, so a refusal is logged once when it
    starts and once when it ends; without ``report`` (one-shot commands) it only counts.
    """

    def __init__(self, *, report: bool = True) -> None:
        self._refused: dict[str, str] = {}  # missing rule -> the server's message
        self._rejected: str | None = None
        self._report = report

    def problems(self) -> list[str]:
        """What stops zombied from working, one line each; empty when nothing does."""
        found = [f"forbidden, missing RBAC rule: {rule}" for rule in sorted(self._refused)]
        if self._rejected is not None:
            found.insert(0, f"credentials rejected (HTTP 401): {self._rejected}")
        return found

    def refused(self, error: ApiError) -> None:
        """The server answered 401 or 403 to ``error.request``."""
        if error.kind is Kind.UNAUTHORIZED:
            if self._rejected is None and self._report:
                log.error(
                    "api.unauthorized",
                    request=str(error.request),
                    message=error.message or None,
                    hint="the credentials were refreshed once and rejected again",
                )
            self._rejected = error.message or error.reason
            return
        rule = error.request.rule
        if rule not in self._refused and self._report:
            log.error(
                "api.forbidden",
                request=str(error.request),
                missing_rule=rule,
                message=error.message or None,
            )
        self._refused[rule] = error.message

    def allowed(self, request: Request) -> None:
        """The server accepted ``request`` (or answered it on its merits)."""
        if self._rejected is not None:
            self._rejected = None
            if self._report:
                log.info("api.authorized", request=str(request))
        if self._refused and self._refused.pop(request.rule, None) is not None and self._report:
            log.info("api.permitted", rule=request.rule)


# -- credentials ------------------------------------------------------------------------


class Credentials:
    """The ``Authorization`` header of every request, re-read before it goes stale.

    From an exec plugin (re-run ``EXPIRY_MARGIN`` before its expiry, else after a 401),
    a token file (re-read every ``TOKEN_FILE_PERIOD``), or fixed (never refreshed).
    """

    def __init__(
        self,
        header: str | None = None,
        *,
        token_file: Path | None = None,
        exec_loader: Any = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._header = header
        self._token_file = token_file
        self._exec_loader = exec_loader
        self._now = now
        self._lock = anyio.Lock()
        self._refresh_at = self._next_refresh()

    @property
    def refreshable(self) -> bool:
        """Whether a 401 is worth a refresh: the source can give a newer token."""
        return self._token_file is not None or self._exec_loader is not None

    async def header(self) -> str | None:
        """The ``Authorization`` value to send now, refreshed first when it is due."""
        if self._now() >= self._refresh_at:
            await self.refresh(self._header)
        return self._header

    async def refresh(self, stale: str | None) -> bool:
        """Get a new token unless someone already replaced ``stale``; True if it changed.
        Requests rejected together with one token so refresh it once, not once each."""
        async with self._lock:
            if self._header != stale:
                return True
            if self._token_file is not None:
                self._header = _read_token_file(self._token_file, self._header)
            elif self._exec_loader is not None:
                self._header = await _run_exec_plugin(self._exec_loader)
            self._refresh_at = self._next_refresh()
            return self._header != stale

    def _next_refresh(self) -> float:
        if self._token_file is not None:
            return self._now() + TOKEN_FILE_PERIOD
        expiry = vars(self._exec_loader).get("exec_plugin_expiry") if self._exec_loader else None
        if isinstance(expiry, datetime):
            left = (expiry - datetime.now(UTC)).total_seconds() - EXPIRY_MARGIN
            return self._now() + max(left, 1.0)
        return float("inf")


def _read_token_file(path: Path, old: str | None) -> str | None:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        log.warning("api.token_unreadable", path=str(path), error=str(exc))
        return old  # the old token may still be good; the server will say if not
    return f"Bearer {token}" if token else old


async def _run_exec_plugin(loader: Any) -> str | None:
    # Dropping the loader's cached expiry makes it run the plugin now.
    vars(loader).pop("exec_plugin_expiry", None)
    try:
        await loader.load_from_exec_plugin()
    except (ConfigException, OSError) as exc:  # the plugin failed: keep the old token
        log.warning("api.exec_plugin_failed", error=" ".join(str(exc).split())[:300])
    token = getattr(loader, "token", None)
    return token if isinstance(token, str) else None


# -- the client -------------------------------------------------------------------------


class Kube:
    """The API server, as zombied talks to it; build it with `open_kube`."""

    def __init__(
        self,
        api: client.ApiClient,
        credentials: Credentials,
        *,
        on_failure: Callable[[str, int], None] | None = None,
        report_access: bool = True,
    ) -> None:
        """``on_failure(verb, code)`` counts every failed request (code 0: no answer)."""
        self.api = api
        self.credentials = credentials
        self.permissions = Permissions(report=report_access)
        self._on_failure = on_failure if on_failure is not None else (lambda _verb, _code: None)
        configuration = api.configuration
        self._base = str(configuration.host).rstrip("/")
        self._session: aiohttp.ClientSession = api.rest_client.pool_manager
        # None is aiohttp's own default for each of them.
        self._options: dict[str, Any] = {
            "proxy": configuration.proxy or None,
            "proxy_headers": configuration.proxy_headers or None,
            "server_hostname": configuration.tls_server_name or None,
        }
        self._headers = {"User-Agent": user_agent(), "Accept": "application/json"}

    async def request(
        self,
        request: Request,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
        timeout: float,  # noqa: ASYNC109 - every request carries its own deadline
    ) -> Any:
        """Send ``request`` and return the decoded JSON answer; `ApiError` otherwise."""
        data = msgspec.json.encode(body) if body is not None else None
        deadline = aiohttp.ClientTimeout(total=timeout)
        try:
            async with self._send(request, query, data, deadline) as response:
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
        connect_timeout: float,
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """Open a streaming answer (a watch) and yield its body; `ApiError` on failure.
        There is no read timeout: the caller guards the stream against silence."""
        deadline = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        try:
            async with self._send(request, query, None, deadline) as response:
                yield response.content
        except _TRANSPORT as exc:
            raise self._failed(_transport(request, exc)) from exc

    @asynccontextmanager
    async def _send(
        self,
        request: Request,
        query: Mapping[str, str | int] | None,
        data: bytes | None,
        deadline: aiohttp.ClientTimeout,
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
                request.method, url, data=data, headers=headers, timeout=deadline, **self._options
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
    when a service account is mounted, else the kubeconfig; `KubeconfigError` if not."""
    configuration = client.Configuration()
    use_in_cluster = kubeconfig is None and context is None and in_cluster()
    try:
        if use_in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            credentials = Credentials(
                configuration.api_key.get("BearerToken"),
                token_file=SERVICE_ACCOUNT_DIR / "token",
            )
        else:
            path = _kubeconfig_path(kubeconfig)
            loader = await config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
            credentials = _kubeconfig_credentials(loader, configuration, path)
    except Exception as exc:  # yaml, key and config errors alike: a config problem, not a crash
        detail = " ".join(str(exc).split()) or type(exc).__name__
        option = "--context" if context and "context" in detail.lower() else "--kubeconfig"
        raise KubeconfigError(f"{option}: cannot load cluster credentials: {detail}") from exc
    # Credentials owns the token: kubernetes_asyncio's hook would be a second owner.
    configuration.refresh_api_key_hook = None
    configuration.connection_pool_maxsize = pool_size
    _resolve_env_proxy(configuration)
    api = client.ApiClient(configuration)
    _stop_env_lookups(api)
    kube = Kube(api, credentials, on_failure=on_failure, report_access=report_access)
    try:
        yield kube
    finally:
        with anyio.CancelScope(shield=True):
            await api.close()


def _kubeconfig_credentials(loader: Any, configuration: Any, path: str) -> Credentials:
    header = configuration.api_key.get("BearerToken")
    # The user entry of the context in use; kubernetes_asyncio keeps it on the loader.
    user = getattr(loader, "_user", None)
    if user is not None and "exec" in user:
        return Credentials(header, exec_loader=loader)
    token_file = user.safe_get("tokenFile") if user is not None else None
    if isinstance(token_file, str) and token_file:
        return Credentials(header, token_file=Path(path).parent / Path(token_file).expanduser())
    return Credentials(header)


def _resolve_env_proxy(configuration: client.Configuration) -> None:
    """Apply the proxy variables once, with aiohttp's own lookup; a kubeconfig
    ``proxy-url`` wins, as in client-go."""
    if configuration.proxy or not configuration.host:
        return
    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(URL(configuration.host))
    except LookupError:
        return  # no proxy set for this scheme, or NO_PROXY excludes the API server
    configuration.proxy = str(proxy)
    if auth is not None:
        configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}


def _stop_env_lookups(api: client.ApiClient) -> None:
    """Give ``api`` a session with ``trust_env=False`` on the same connection pool.

    With kubernetes_asyncio's ``trust_env=True`` aiohttp reads netrc and the proxy
    variables on every request (a netrc entry for the API server even replaces the
    bearer token with Basic auth); `_resolve_env_proxy` applies the proxy once instead.
    """
    rest = api.rest_client
    session = rest.pool_manager
    connector = session.connector
    session.detach()
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=_READ_BUFSIZE
    )


def _kubeconfig_path(kubeconfig: str | None) -> str:
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    path = path or str(Path("~/.kube/config").expanduser())
    if not Path(path).is_file():
        raise KubeconfigError(f"--kubeconfig: no kubeconfig file at {path}")
    return path
