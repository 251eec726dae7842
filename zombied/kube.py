"""Opening an API client and reading what the API server answered.

This module owns the two things every I/O part needs from kubernetes_asyncio: a
configured :class:`ApiClient` (in-cluster service account or kubeconfig) with a
connection pool sized for the watches and delete workers that share it, zombied's own
``User-Agent`` on every request (so audit logs tell its traffic apart), no per-request
proxy and netrc lookups (see `open_api_client`), and
:func:`api_status` / :func:`status_of`, which turn any exception from a request into
the ``Status`` the server sent (or a transport failure). Decisions about what a status
*means* belong to the callers; this module never retries and never logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
import aiohttp.helpers
import kubernetes_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDictProxy
from yarl import URL

from zombied import __version__
from zombied.errors import KubeconfigError, PermissionDenied, ZombiedError
from zombied.http1 import Answer, ConnectionPool

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: Status code used for failures that never reached an HTTP answer.
TRANSPORT_ERROR = 0

#: What the API server or the network can raise from a request: retried by callers.
#: Any other exception from a request is a bug and must crash, never be retried.
API_FAILURES = (ApiException, aiohttp.ClientError, TimeoutError, ConnectionError)

#: Go's names for the CPU architectures, as kubectl's User-Agent spells them.
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
#: kubernetes_asyncio's own read buffer for its session: watch events of large objects
#: exceed aiohttp's default (etcd's request limit is 1.5 MiB).
_READ_BUFSIZE = 2**21


def user_agent() -> str:
    """``zombied/0.2.0 (linux/amd64) kubernetes_asyncio/36.1.0``, in kubectl's format."""
    machine = platform.machine().lower()
    arch = _GOARCH.get(machine, machine or "unknown")
    return (
        f"zombied/{__version__} ({sys.platform}/{arch}) "
        f"kubernetes_asyncio/{kubernetes_asyncio.__version__}"
    )


@dataclass(frozen=True, slots=True)
class ApiStatus:
    """The outcome of a failed request, as the API server's ``Status`` object says."""

    code: int
    reason: str
    message: str
    retry_after: float | None = None

    @property
    def transient(self) -> bool:
        """Worth retrying with backoff: throttling, server errors, transport failures."""
        return self.code in (TRANSPORT_ERROR, 429) or self.code >= 500


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
    """Connections an ApiClient needs so that no request waits for a socket.

    Every watch holds a connection for minutes; each delete worker needs one for its
    DELETE and one for the Event after it; the lease and a spare take the rest.
    """
    return watches + 2 * workers + 4


@asynccontextmanager
async def open_api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    pool_size: int = 100,
) -> AsyncIterator[client.ApiClient]:
    """Yield an ApiClient for the cluster and close it on exit.

    With neither ``kubeconfig`` nor ``context`` and a mounted service account, the
    in-cluster configuration is used; otherwise the kubeconfig (``$KUBECONFIG`` or
    ``~/.kube/config`` by default). Any failure to load raises :class:`KubeconfigError`
    with a one-line message.
    """
    configuration = client.Configuration()
    use_in_cluster = kubeconfig is None and context is None and in_cluster()
    path = None if use_in_cluster else _kubeconfig_path(kubeconfig)
    try:
        if path is None:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except Exception as exc:  # yaml, key and config errors alike: a config problem, not a crash
        detail = " ".join(str(exc).split()) or type(exc).__name__
        option = "--context" if context and "context" in detail.lower() else "--kubeconfig"
        raise KubeconfigError(f"{option}: cannot load cluster credentials: {detail}") from exc
    configuration.connection_pool_maxsize = pool_size
    _resolve_env_proxy(configuration)
    api = KubeClient(configuration, pool_size=pool_size)
    api.user_agent = user_agent()
    _stop_env_lookups(api)
    try:
        yield api
    finally:
        await api.close()


def _resolve_env_proxy(configuration: client.Configuration) -> None:
    """Apply ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` once, as aiohttp would per request.

    A ``proxy-url`` from the kubeconfig wins, as in client-go. The lookup is aiohttp's
    own (``NO_PROXY``, credentials in the URL or in netrc for the proxy host), done
    once at start instead of once per request.
    """
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
    """Give ``api`` a session with ``trust_env=False``, on the same connection pool.

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True`` and offers no
    option against it; aiohttp then reads netrc and the proxy variables for every
    request, each time through a thread pool, which was a third of the CPU of a reap.
    (A netrc entry for the API server's host even fails every request: its Basic
    auth collides with the bearer token header.) The proxy variables are applied once
    by `_resolve_env_proxy` instead. The swap uses aiohttp's public ``connector`` and
    ``detach``; should kubernetes_asyncio ever stop exposing ``rest_client.pool_manager``
    as a session, its own stays in place and only the per-request cost comes back.
    """
    rest = getattr(api, "rest_client", None)
    session = getattr(rest, "pool_manager", None)
    if not isinstance(session, aiohttp.ClientSession) or session.connector is None:
        return
    connector = session.connector
    session.detach()
    rest.pool_manager = aiohttp.ClientSession(  # type: ignore[union-attr]
        connector=connector, trust_env=False, read_bufsize=_READ_BUFSIZE
    )


def _kubeconfig_path(kubeconfig: str | None) -> str:
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    path = path or str(Path("~/.kube/config").expanduser())
    if not Path(path).is_file():
        raise KubeconfigError(f"--kubeconfig: no kubeconfig file at {path}")
    return path


def api_status(exc: BaseException) -> ApiStatus | None:
    """What the server said, for an exception raised by a request; None if not an API error.

    ``ApiException`` carries the HTTP status and usually a ``Status`` body; timeouts and
    connection failures become :data:`TRANSPORT_ERROR`.
    """
    if isinstance(exc, ApiException):
        code = int(exc.status or TRANSPORT_ERROR)
        reason = str(exc.reason or "")
        message = ""
        try:
            body = json.loads(exc.body) if exc.body else {}
        except (TypeError, ValueError):
            body = {}
        if isinstance(body, dict) and body.get("kind") == "Status":
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        return ApiStatus(code, reason, message, retry_after)
    if isinstance(exc, (aiohttp.ClientError, TimeoutError, ConnectionError)):
        return ApiStatus(TRANSPORT_ERROR, type(exc).__name__, str(exc))
    return None


def status_of(exc: BaseException) -> ApiStatus:
    """Like `api_status`, but any other exception counts as a transport failure."""
    return api_status(exc) or ApiStatus(TRANSPORT_ERROR, type(exc).__name__, str(exc))


def rbac_rule(verb: str, resource: str, namespace: str | None, *, group: str = "") -> str:
    """The RBAC rule a 401/403 says is missing, as an operator would grant it."""
    what = f"{resource} in API group {group}" if group else resource
    where = f"in namespace {namespace}" if namespace is not None else "at the cluster scope"
    return f"{verb} {what} {where}"


def request_error(
    exc: BaseException, what: str, *, verb: str, resource: str, namespace: str | None
) -> ZombiedError:
    """The one-line error a command reports for a failed request (``what``: "list pods …").

    A 401/403 names the RBAC rule to grant; anything else says what the server answered.
    """
    status = status_of(exc)
    detail = status.message or status.reason or "no answer"
    if status.code in (401, 403):
        rule = rbac_rule(verb, resource, namespace)
        return PermissionDenied(f"missing RBAC permission to {rule}: {detail}")
    code = f"HTTP {status.code}" if status.code else "connection failed"
    return ZombiedError(f"cannot {what} ({code}): {detail}")


class KubeClient(client.ApiClient):
    """kubernetes_asyncio's ApiClient, plus the lean connection pool `send` uses."""

    def __init__(self, configuration: client.Configuration, *, pool_size: int) -> None:
        super().__init__(configuration)
        #: None when a proxy stands between zombied and the server: `send` uses aiohttp.
        self.lean: ConnectionPool | None = None
        # A host that is no http(s) URL keeps aiohttp, which reports it on first use.
        if not configuration.proxy:
            with contextlib.suppress(ValueError):
                self.lean = ConnectionPool(
                    URL(configuration.host or ""),
                    ssl_context=ssl_context(configuration),
                    server_hostname=configuration.tls_server_name,
                    size=pool_size,
                )

    async def close(self) -> None:
        """Close the lean pool, then kubernetes_asyncio's session."""
        if self.lean is not None:
            await self.lean.close()
        await super().close()


def ssl_context(configuration: client.Configuration) -> ssl.SSLContext:
    """The TLS settings kubernetes_asyncio's own session uses, for the lean pool."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


async def send(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: bytes,
    deadline: float,
) -> Answer:
    """Send one request with a JSON body and return the whole answer, any status.

    What ``ApiClient.call_api`` does for such a request (the same credentials, refreshed
    by the kubeconfig's exec plugin when due, the same TLS and ``User-Agent``), on the
    lean pool of `KubeClient` (`zombied.http1`): call_api's parameter walking and
    aiohttp's general request path were most of the CPU of a delete in a storm. Through
    a proxy, or on a plain ApiClient, it goes through aiohttp on the client's own
    session. ``path`` is quoted here; ``deadline`` bounds the whole exchange in seconds.
    """
    configuration = api.configuration
    headers: dict[str, str] = {
        **api.default_headers,
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    if api.cookie:
        headers["Cookie"] = api.cookie
    bearer = (await configuration.auth_settings()).get("BearerToken")
    if bearer and bearer["value"]:
        headers[bearer["key"]] = bearer["value"]
    target = quote(path)
    lean = api.lean if isinstance(api, KubeClient) else None
    if lean is not None:
        return await lean.request(method, target, headers, body, deadline=deadline)
    rest = api.rest_client
    options: dict[str, Any] = {}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    session: aiohttp.ClientSession = rest.pool_manager
    async with session.request(
        method,
        URL(f"{configuration.host}{target}", encoded=True),
        data=body,
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=deadline),
        **options,
    ) as response:
        return Answer(
            response.status, response.reason or "", response.headers, await response.read()
        )


def raise_for_answer(answer: Answer) -> None:
    """Turn a non-2xx `Answer` into the ApiException the generated client would raise."""
    if answer.status >= 300:
        raise api_exception(answer, answer.body)


async def raise_for_status(response: aiohttp.ClientResponse) -> None:
    """Turn a raw non-2xx answer into the ApiException the generated client would raise."""
    if response.status < 300:
        return
    try:
        body = await response.read()
    except aiohttp.ClientError:
        body = b""
    raise api_exception(response, body)


async def read_body(response: aiohttp.ClientResponse) -> bytes:
    """The whole body of a raw answer, released afterwards; non-2xx raised as ApiException."""
    async with response:
        await raise_for_status(response)
        return await response.read()


class _Response(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def headers(self) -> CIMultiDictProxy[str]: ...


def api_exception(response: _Response, body: bytes) -> ApiException:
    """The ApiException for a raw answer whose body was already read."""
    exc = ApiException(status=response.status, reason=response.reason)
    exc.body = body
    exc.headers = response.headers
    return exc


def status_from_object(obj: object) -> ApiStatus | None:
    """A ``Status`` object found in a watch ``ERROR`` event (or anywhere else) as ApiStatus."""
    if not isinstance(obj, dict) or obj.get("kind") != "Status":
        return None
    code = obj.get("code")
    return ApiStatus(
        code=code if isinstance(code, int) else TRANSPORT_ERROR,
        reason=str(obj.get("reason") or ""),
        message=str(obj.get("message") or ""),
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # HTTP-date form: the API server never sends it; fall back to backoff
    return seconds if seconds >= 0 else None
