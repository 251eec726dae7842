"""The ``Authorization`` header of every request, kept fresh, and where it comes from.

Tokens expire: an exec plugin (gke-gcloud-auth-plugin, ``aws eks get-token``,
kubelogin) says when in ``expirationTimestamp``; the kubelet rotates a projected
service-account token in its file. `Credentials` holds the current header and refreshes
it single-flight: one refresh at a time, in a task of its own, and everyone who needs a
new token waits for that one (each within its own deadline) instead of starting
another. A refresh that falls due while the token is still valid runs behind the
requests, which go on with the valid token; only an expired token or a 401 makes a
request wait. A plugin run has a deadline; when it fails, the old token stays, one log
line says why in the plugin's own words, and the source is left alone for
``REFRESH_PAUSE``. The plugin is run here rather than through kubernetes_asyncio,
whose runner has no deadline and logs failures through its own logger. Which source a
kubeconfig user names is decided by `source_for_user`; ``auth-provider`` users are
refused, as nothing would refresh their tokens.
"""

from __future__ import annotations

import base64
import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Final, Protocol, Self

import anyio
import anyio.abc
import msgspec

from zombied.errors import ZombiedError
from zombied.log import get_logger

log = get_logger(__name__)

#: How often a token file is re-read (the kubelet rotates it in place), as client-go.
TOKEN_FILE_PERIOD: Final = 60.0
#: How long before its expirationTimestamp an exec plugin's token is replaced: room for a
#: run that times out and one retry before the old token stops working.
EXPIRY_MARGIN: Final = 60.0
#: The longest an exec plugin may run. A healthy one answers in a few seconds (a cold
#: interpreter and one call to its identity provider); one that hangs (on a prompt, on a
#: network that is gone) is killed in time for a retry within ``EXPIRY_MARGIN``.
PLUGIN_TIMEOUT: Final = 20.0
#: After a refresh that brought no new token (it failed, or the source had nothing
#: newer) the source is left alone this long: requests rejected together, or a plugin
#: that keeps failing, do not make it run once per request.
REFRESH_PAUSE: Final = 10.0
#: How much of a plugin's error output is kept: its start says what failed, its end
#: usually what to do ("Please run: gcloud auth login"); with the words around it, it
#: fits the one line of an error.
_HINT_HEAD: Final = 100
_HINT_TAIL: Final = 200
_EXEC_API_VERSIONS: Final = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)


class CredentialError(ZombiedError):
    """A source could not give a token; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class Token:
    """An ``Authorization`` value, when to replace it and when it stops working (loop time)."""

    header: str | None
    refresh_at: float = math.inf
    expires_at: float = math.inf


class Source(Protocol):
    """Where tokens come from: `fetch` gives one now, or `CredentialError`;
    ``refreshable`` says whether asking again can give another (worth it after a 401),
    ``failure_event`` is the log event of a failed refresh."""

    refreshable: ClassVar[bool]
    failure_event: ClassVar[str]

    async def fetch(self) -> Token: ...


@dataclass(frozen=True, slots=True)
class Fixed:
    """A token, basic auth or nothing, written in the kubeconfig: never refreshed."""

    refreshable: ClassVar[bool] = False
    failure_event: ClassVar[str] = "api.credentials_failed"
    header: str | None = None

    async def fetch(self) -> Token:
        return Token(self.header)


@dataclass(frozen=True, slots=True)
class TokenFile:
    """A bearer token in a file, re-read every ``TOKEN_FILE_PERIOD``."""

    refreshable: ClassVar[bool] = True
    failure_event: ClassVar[str] = "api.token_unreadable"
    path: Path

    async def fetch(self) -> Token:
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialError(f"cannot read token file {self.path}: {exc}") from exc
        if not token:
            raise CredentialError(f"token file {self.path} is empty")
        return Token(f"Bearer {token}", anyio.current_time() + TOKEN_FILE_PERIOD)


@dataclass(frozen=True, slots=True)
class ExecPlugin:
    """A kubeconfig ``exec`` plugin, run for each token with a deadline."""

    refreshable: ClassVar[bool] = True
    failure_event: ClassVar[str] = "api.exec_plugin_failed"
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_version: str = _EXEC_API_VERSIONS[0]
    install_hint: str = ""
    timeout: float = PLUGIN_TIMEOUT

    @property
    def name(self) -> str:
        return Path(self.command).name

    async def fetch(self) -> Token:
        # A controller has no terminal: a plugin that would prompt must fail instead.
        info = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": msgspec.json.encode(info).decode()}
        try:
            with anyio.fail_after(self.timeout):
                done = await anyio.run_process(
                    [self.command, *self.args], stdin=subprocess.DEVNULL, env=env, check=False
                )
        except TimeoutError:
            raise CredentialError(
                f"exec plugin {self.name} did not answer within {self.timeout:g}s"
            ) from None
        except OSError as exc:
            hint = f"; {self.install_hint}" if self.install_hint else ""
            raise CredentialError(f"cannot run exec plugin {self.command}: {exc}{hint}") from exc
        if done.returncode != 0:
            said = _what_it_said(done.stderr.decode(errors="replace")) or "no error output"
            raise CredentialError(
                f"exec plugin {self.name} failed (exit {done.returncode}): {said}"
            )
        return self._token(done.stdout)

    def _token(self, output: bytes) -> Token:
        try:
            answer = msgspec.json.decode(output)
        except msgspec.DecodeError as exc:
            raise CredentialError(f"exec plugin {self.name} printed no JSON: {exc}") from None
        status = answer.get("status") if isinstance(answer, dict) else None
        if not isinstance(status, dict) or answer.get("kind") != "ExecCredential":
            raise CredentialError(f"exec plugin {self.name} printed no ExecCredential")
        if answer.get("apiVersion") != self.api_version:
            raise CredentialError(
                f"exec plugin {self.name} answered in {answer.get('apiVersion')!r}, "
                f"not the {self.api_version!r} the kubeconfig asks for"
            )
        token = status.get("token")
        if not isinstance(token, str) or not token:
            what = "a client certificate" if "clientCertificateData" in status else "no token"
            raise CredentialError(
                f"exec plugin {self.name} returned {what}; zombied needs a bearer token"
            )
        expires = _expiry(status.get("expirationTimestamp"), self.name)
        if expires is None:
            return Token(f"Bearer {token}")
        # A token shorter-lived than twice the margin is replaced half-way through its life.
        margin = min(EXPIRY_MARGIN, (expires - anyio.current_time()) / 2)
        return Token(f"Bearer {token}", expires - margin, expires)


def _expiry(stamp: object, plugin: str) -> float | None:
    """The loop time an RFC 3339 ``expirationTimestamp`` stands for."""
    if stamp is None:
        return None
    try:
        moment = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        raise CredentialError(f"exec plugin {plugin}: bad expirationTimestamp {stamp!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return anyio.current_time() + (moment - datetime.now(UTC)).total_seconds()


def _what_it_said(text: str) -> str:
    """A plugin's error output on one line; a long one keeps its start and its end, where
    plugins put what failed and what to do about it."""
    flat = " ".join(text.split())
    if len(flat) <= _HINT_HEAD + _HINT_TAIL:
        return flat
    return f"{flat[:_HINT_HEAD]} … {flat[-_HINT_TAIL:]}"


def source_for_user(user: Mapping[str, Any]) -> Source:
    """The token source of a kubeconfig ``user`` entry (its paths absolute): an exec
    plugin, else a token file, else a token or basic auth, as zombied always picked
    them; `CredentialError` for what zombied cannot keep fresh."""
    if "auth-provider" in user:
        provider = user["auth-provider"]
        name = provider.get("name") if isinstance(provider, Mapping) else None
        raise CredentialError(
            f"user authenticates with auth-provider {name!r}, whose tokens zombied cannot "
            "refresh; use its exec plugin instead (kubelogin for oidc, "
            "gke-gcloud-auth-plugin for gcp, kubelogin for azure)"
        )
    spec = user.get("exec")
    if spec is not None:
        return _exec_plugin(spec)
    token_file = user.get("tokenFile")
    if token_file:
        return TokenFile(Path(str(token_file)))
    if user.get("token"):
        return Fixed(f"Bearer {user['token']}")
    if user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        return Fixed(f"Basic {base64.b64encode(pair).decode()}")
    return Fixed()


def _exec_plugin(spec: object) -> ExecPlugin:
    if not isinstance(spec, Mapping) or not spec.get("command"):
        raise CredentialError("user's exec entry has no command")
    version = spec.get("apiVersion")
    if version not in _EXEC_API_VERSIONS:
        raise CredentialError(
            f"user's exec plugin asks for apiVersion {version!r}; zombied speaks "
            + " and ".join(_EXEC_API_VERSIONS)
        )
    if spec.get("interactiveMode") == "Always":
        raise CredentialError(
            "user's exec plugin needs a terminal (interactiveMode: Always); a controller has none"
        )
    args = spec.get("args") or ()
    env = spec.get("env") or ()
    if not isinstance(args, Sequence) or not isinstance(env, Sequence):
        raise CredentialError("user's exec plugin: args and env must be lists")
    return ExecPlugin(
        str(spec["command"]),
        tuple(str(arg) for arg in args),
        {str(item["name"]): str(item["value"]) for item in env if isinstance(item, Mapping)},
        str(version),
        str(spec.get("installHint") or ""),
    )


class Credentials:
    """The header of every request, refreshed from ``source``; use as ``async with``
    (the first token is fetched on entry: `CredentialError` if there is none)."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._token = Token(None, -math.inf, -math.inf)
        self._refreshing: anyio.Event | None = None
        self._left_alone_until = -math.inf
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def refreshable(self) -> bool:
        """Whether a 401 is worth a refresh: the source can give a newer token."""
        return self._source.refreshable

    async def __aenter__(self) -> Self:
        self._token = await self._source.fetch()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            # Without the body's exception: it goes on as itself, not in a group.
            await tg.__aexit__(None, None, None)

    async def header(self) -> str | None:
        """The ``Authorization`` value to send now. A due refresh starts behind this
        request; only an expired token waits for it."""
        token = self._token
        now = anyio.current_time()
        if now < token.refresh_at:
            return token.header
        waiting = self._start_refresh()
        if now < token.expires_at or waiting is None:
            return token.header
        await waiting.wait()
        return self._token.header

    async def refresh(self, stale: str | None) -> bool:
        """The server rejected ``stale``: get another token unless someone already did,
        sharing the refresh under way; True if the header changed."""
        if self._token.header == stale:
            waiting = self._start_refresh()
            if waiting is not None:
                await waiting.wait()
        return self._token.header != stale

    def _start_refresh(self) -> anyio.Event | None:
        """The refresh under way, or a new one; None while the source is left alone."""
        if self._refreshing is None and anyio.current_time() >= self._left_alone_until:
            assert self._tg is not None, "Credentials used outside its async with"
            self._refreshing = anyio.Event()
            self._tg.start_soon(self._refresh, self._refreshing)
        return self._refreshing

    async def _refresh(self, done: anyio.Event) -> None:
        old = self._token.header
        try:
            self._token = await self._source.fetch()
        except CredentialError as exc:
            log.warning(self._source.failure_event, error=str(exc))
        finally:
            if self._token.header == old:  # failed, or nothing newer to be had yet
                self._left_alone_until = anyio.current_time() + REFRESH_PAUSE
            self._refreshing = None
            done.set()
