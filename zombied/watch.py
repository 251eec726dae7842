"""List-watch of terminal pods, one loop per scope, feeding the cache and the work queue.

This module owns the reflector: LIST (paginated, raw JSON), then WATCH from the list's
resourceVersion with bookmarks and a server-side timeout, resuming from the last seen
resourceVersion, relisting and reconciling on ``410 Gone``, backing off on errors and
honouring ``Retry-After``. It parses the stream itself: kubernetes_asyncio's ``Watch``
deserialises every object into a ``V1Pod`` (slow, and it raises on hostile input, which
would kill the stream), so a malformed line, an unknown event type or an unparsable pod
here is a logged skip, never a dead watch. A stream that goes silent is cut by an
inactivity guard rescheduled after every event. Each change goes to the `PodCache`,
which judges it and keeps the work queue in step. Only what the API server or the
network can cause is retried; any other exception is a bug and ends the loop. It must
never delete anything and never decide whether a pod is a zombie: `rules` decides
(through the cache), the reaper deletes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import anyio
import msgspec
import orjson
from kubernetes_asyncio import client

from zombied import metrics
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.kube import (
    API_FAILURES,
    TRANSPORT_ERROR,
    ApiStatus,
    api_status,
    raise_for_status,
    rbac_rule,
    read_body,
    status_from_object,
    status_of,
)
from zombied.log import get_logger
from zombied.pod import PodParseError, PodSnapshot, parse_pod, pod_key

__all__ = [
    "CLUSTER_SCOPE",
    "TERMINAL_FIELD_SELECTOR",
    "EventParseError",
    "Scope",
    "ScopeState",
    "WatchEvent",
    "Watcher",
    "list_terminal_pods",
    "parse_event",
    "request_args",
    "scopes_for",
    "snapshot_in_scope",
]

log = get_logger(__name__)

#: Only pods that can be zombies cross the wire: Failed or Succeeded.
TERMINAL_FIELD_SELECTOR: Final = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"

#: Scope label of the cluster-wide watch; never a namespace name (not a DNS label).
CLUSTER_SCOPE: Final = "_cluster"

EVENT_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

# A pod is below 1.5 MiB in etcd; a line far above that is a broken or hostile stream.
_MAX_LINE: Final = 16 * 1024 * 1024
_LIST_PAGE: Final = 500
_LIST_TIMEOUT: Final = 60.0
# The server ends a watch after timeoutSeconds; this margin only catches a server
# (or proxy) that fails to.
_INACTIVITY_MARGIN: Final = 10.0
# How often the inactivity deadline moves while lines keep arriving.
_REARM_S: Final = 1.0


# -- scopes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scope:
    """What one list-watch covers: one namespace, or all of them minus exclusions."""

    namespace: str | None
    exclude: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The ``scope`` metric label and log field."""
        return self.namespace if self.namespace is not None else CLUSTER_SCOPE

    @property
    def field_selector(self) -> str:
        """Terminal phases, minus excluded namespaces for the cluster-wide watch."""
        parts = [TERMINAL_FIELD_SELECTOR]
        if self.namespace is None:
            parts.extend(f"metadata.namespace!={ns}" for ns in self.exclude)
        return ",".join(parts)

    def owns(self, namespace: str) -> bool:
        """Whether a pod in ``namespace`` belongs to this scope."""
        if namespace in self.exclude:
            return False
        return self.namespace is None or namespace == self.namespace


def scopes_for(namespaces: Iterable[str], exclude: Iterable[str]) -> tuple[Scope, ...]:
    """One cluster-wide scope when ``namespaces`` is empty, else one per namespace."""
    excluded = tuple(dict.fromkeys(exclude))
    wanted = tuple(dict.fromkeys(namespaces))
    if not wanted:
        return (Scope(None, excluded),)
    return tuple(Scope(ns, excluded) for ns in wanted if ns not in excluded)


# -- events ---------------------------------------------------------------------------


class EventParseError(ValueError):
    """A watch line that is not a usable event; the watch skips it and goes on."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream."""

    type: str
    object: Mapping[str, Any]
    resource_version: str | None


def parse_event(line: bytes | str) -> WatchEvent:
    """Parse one watch line; raise `EventParseError` saying why it is unusable."""
    try:
        # orjson: three watch events per reaped pod made json's decoder a tenth of a storm's CPU.
        data = orjson.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventParseError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise EventParseError("event is not an object")
    kind = data.get("type")
    obj = data.get("object")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise EventParseError(f"unknown event type {str(kind)[:64]!r}")
    if not isinstance(obj, dict):
        raise EventParseError(f"{kind} event without an object")
    metadata = obj.get("metadata")
    rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    if not isinstance(rv, str) or not rv:
        rv = None
    if kind == "BOOKMARK" and rv is None:
        raise EventParseError("BOOKMARK event without a resourceVersion")
    return WatchEvent(kind, obj, rv)


class _HeadMetadata(msgspec.Struct):
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None  # noqa: N815 - the API's spelling
    deletionTimestamp: Any = None  # noqa: N815 - any value but null marks a deletion


class _HeadObject(msgspec.Struct):
    metadata: _HeadMetadata | None = None


class _Head(msgspec.Struct):
    type: str
    object: _HeadObject | None = None


# Decodes only the fields above and skips the rest of the object without building it.
_HEAD_DECODER: Final = msgspec.json.Decoder(_Head)


@dataclass(frozen=True, slots=True)
class EventHead:
    """An event that carries nothing to judge: which pod left (or is leaving), at which
    resourceVersion; a BOOKMARK has no pod (empty namespace and name)."""

    type: str
    namespace: str
    name: str
    uid: str | None
    resource_version: str | None


def peek_event(line: bytes | str) -> EventHead | None:
    """The head of an event that needs no pod parsed, else None: parse it in full.

    Two of the three events of every reaped pod are such: the MODIFIED that sets its
    ``deletionTimestamp`` and the DELETED. Reading only their metadata saves building
    two whole pods. Anything unexpected (not JSON, a field of the wrong type, a missing
    name) is None too, so `parse_event` decides what to make of it, as it always did.
    """
    try:
        head = _HEAD_DECODER.decode(line)
    except msgspec.DecodeError:
        return None
    meta = head.object.metadata if head.object is not None else None
    if meta is None:
        return None
    rv = meta.resourceVersion or None
    if head.type == "BOOKMARK":
        return None if rv is None else EventHead("BOOKMARK", "", "", None, rv)
    leaving = head.type == "DELETED" or (
        head.type in ("ADDED", "MODIFIED") and meta.deletionTimestamp is not None
    )
    if not leaving or meta.namespace is None or meta.name is None:
        return None
    return EventHead(head.type, meta.namespace, meta.name, meta.uid or None, rv)


# -- the watch loop -------------------------------------------------------------------


@dataclass(slots=True)
class ScopeState:
    """What health and readiness need to know about one scope's watch loop."""

    label: str
    synced: bool = False
    alive: bool = False
    forbidden: str | None = None
    #: Monotonic time of the last event received or stream (re)opened.
    last_event: float = field(default_factory=time.monotonic)
    #: Monotonic time the loop last did anything (attempt, event, backoff end).
    last_progress: float = field(default_factory=time.monotonic)
    watch_timeout: float = 0.0


class _Gone(Exception):
    """The resourceVersion we hold is too old: relist."""


class _StreamError(Exception):
    """A watch ERROR event with a status other than 410."""

    def __init__(self, status: ApiStatus) -> None:
        super().__init__(f"{status.code} {status.reason}: {status.message}")
        self.status = status


class Watcher:
    """The list-watch loop of one scope; run it in a task group until cancelled."""

    def __init__(
        self,
        api: client.ApiClient,
        scope: Scope,
        cache: PodCache,
        *,
        label_selector: str = "",
        timeout_min: float = 300.0,
        timeout_max: float = 600.0,
        page_size: int = _LIST_PAGE,
        inactivity_margin: float = _INACTIVITY_MARGIN,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.scope = scope
        self.cache = cache
        self.label_selector = label_selector
        self.timeout_min = timeout_min
        self.timeout_max = max(timeout_min, timeout_max)
        self.page_size = page_size
        self.inactivity_margin = inactivity_margin
        self.state = ScopeState(scope.label, watch_timeout=self.timeout_max)
        self._core = client.CoreV1Api(api)
        self._backoff = backoff if backoff is not None else Backoff()
        self._rng = rng if rng is not None else random.Random()
        self._resource_version: str | None = None
        self._log = log.bind(scope=scope.label)
        metrics.scope_started(scope.label)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (LIST, event or bookmark)."""
        return self._resource_version

    def silent_for(self, now: float | None = None) -> float:
        """Seconds since the loop last made progress (for the health check)."""
        return (time.monotonic() if now is None else now) - self.state.last_progress

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """List, then watch forever; relist on 410; back off on errors."""
        self.state.alive = True
        task_status.started()
        try:
            await self._loop()
        finally:
            self.state.alive = False

    async def _loop(self) -> None:
        need_list = True
        while True:
            self._progress()
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch()
            except (_Gone, _StreamError, *API_FAILURES) as exc:
                # Only what the API or the network can cause is retried; anything else
                # is a bug and ends the loop (and the process) with its traceback.
                status = api_status(exc)
                # 410 Gone mid-stream, at watch start or for an expired LIST continue
                # token: history was compacted past our resourceVersion, and only a
                # relist can tell which pods changed or vanished meanwhile.
                gone = isinstance(exc, _Gone) or (status is not None and status.code == 410)
                if gone:
                    need_list = True
                    self._log.info("watch.relist", resource_version=self._resource_version)
                else:
                    await self._failed(exc, "list" if need_list else "watch")
                metrics.watch_restarted(self.scope.label, relist=gone)
            else:
                metrics.watch_restarted(self.scope.label)

    async def _failed(self, exc: Exception, verb: str) -> None:
        status = exc.status if isinstance(exc, _StreamError) else status_of(exc)
        metrics.api_failed(verb, status.code)
        if status.code in (401, 403):
            rule = rbac_rule(verb, "pods", self.scope.namespace)
            if self.state.forbidden is None:
                self._log.error(
                    "watch.forbidden",
                    verb=verb,
                    resource="pods",
                    namespace=self.scope.namespace,
                    missing_rule=rule,
                    code=status.code,
                    message=status.message,
                )
            self.state.forbidden = rule
            metrics.scope_synced(self.scope.label, synced=False)
        delay = self._backoff.next()
        if status.code == 429 and status.retry_after is not None:
            delay = status.retry_after
        if status.code not in (401, 403):
            self._log.warning(
                "watch.error",
                verb=verb,
                code=status.code,
                reason=status.reason,
                message=status.message[:200],
                retry_in_s=round(delay, 3),
            )
        await anyio.sleep(delay)

    def _progress(self) -> None:
        self.state.last_progress = time.monotonic()

    def _saw_event(self) -> None:
        now = time.monotonic()
        self.state.last_event = now
        self.state.last_progress = now

    # -- LIST -------------------------------------------------------------------------

    async def _list(self) -> None:
        snapshots, resource_version = await list_terminal_pods(
            self._core,
            self.scope,
            label_selector=self.label_selector,
            page_size=self.page_size,
            on_page=self._progress,
        )
        forgotten = self.cache.reconcile(self.scope.owns, snapshots)
        self._resource_version = resource_version
        self._saw_event()
        self._backoff.reset()
        if self.state.forbidden is not None:
            self._log.info("watch.permitted", rule=self.state.forbidden)
        self.state.forbidden = None
        if not self.state.synced:
            self._log.info("watch.synced", pods=len(snapshots), resource_version=resource_version)
        self.state.synced = True
        metrics.scope_synced(self.scope.label, synced=True)
        if forgotten:
            self._log.info("watch.reconciled", forgotten=forgotten)

    # -- WATCH ------------------------------------------------------------------------

    async def _watch(self) -> None:
        timeout = self._rng.uniform(self.timeout_min, self.timeout_max)
        self.state.watch_timeout = timeout
        args = request_args(self.scope, self.label_selector)
        response = await _call(
            self._core,
            self.scope,
            watch=True,
            resource_version=self._resource_version,
            # Spelled as the API documents it; the client would send "True".
            allow_watch_bookmarks="true",
            timeout_seconds=max(1, round(timeout)),
            _preload_content=False,
            # No sock_read: aiohttp would move its timer on every chunk, thousands a
            # second in a storm; the inactivity guard below catches a silent stream.
            _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=_LIST_TIMEOUT),
            **args,
        )
        async with response:
            await raise_for_status(response)
            self._saw_event()
            # An established stream is a success: a drop later is a new first failure,
            # else a connection that flaps now and then makes the watch blind for up to
            # the backoff cap after each drop.
            self._backoff.reset()
            inactivity = timeout + self.inactivity_margin
            armed = time.monotonic()
            with anyio.CancelScope(deadline=anyio.current_time() + inactivity) as guard:
                lines = _LineSplitter()
                async for chunk in response.content.iter_any():
                    complete = lines.feed(chunk)
                    for line in complete:
                        if line.strip():
                            self._handle(line)
                    # Moving the deadline reschedules a timer: at most once a second, not
                    # per chunk (a storm brings thousands a second). The guard may then
                    # fire up to a second early, against a margin of several seconds.
                    if complete and (now := time.monotonic()) - armed >= _REARM_S:
                        armed = now
                        guard.deadline = anyio.current_time() + inactivity
                rest = lines.rest()
                if rest.strip():
                    self._handle(rest)
            if guard.cancelled_caught:
                self._log.warning("watch.inactive", silent_s=round(inactivity, 1))

    def _handle(self, line: bytes) -> None:
        head = peek_event(line)
        if head is not None:
            self._accept(head.resource_version)
            if head.type != "BOOKMARK":
                self._leaving(head.namespace, head.name, head.uid)
            return
        try:
            event = parse_event(line)
        except EventParseError as exc:
            self._log.warning("watch.skipped", why=str(exc)[:200])
            return
        if event.type == "ERROR":
            status = status_from_object(event.object)
            if status is not None and status.code == 410:
                raise _Gone
            raise _StreamError(status or ApiStatus(TRANSPORT_ERROR, "ERROR", "malformed status"))
        self._accept(event.resource_version)
        if event.type == "BOOKMARK":
            return
        if event.type == "DELETED" or _being_deleted(event.object):
            self._forget(event.object)
            return
        snapshot = snapshot_in_scope(event.object, self.scope)
        if snapshot is None:
            return
        if not snapshot.terminal:
            # The server filters on phase, so this is a pod without a usable status:
            # never a zombie, but worth a line, since it also leaves the cache.
            self._log.warning(
                "watch.skipped",
                why="pod not terminal",
                namespace=snapshot.namespace,
                pod=snapshot.name,
                phase=snapshot.phase[:40],
            )
        self.cache.upsert(snapshot)

    def _accept(self, resource_version: str | None) -> None:
        """An event arrived: the stream is alive, and resumes after its version."""
        self._saw_event()
        if resource_version is not None:
            self._resource_version = resource_version

    def _leaving(self, namespace: str, name: str, uid: str | None) -> None:
        # The pod is gone or on its way out (our DELETE or anyone's): nothing to judge.
        # It leaves the cache now rather than at DELETED.
        self.cache.remove(pod_key(namespace, name), uid)

    def _forget(self, obj: Mapping[str, Any]) -> None:
        """`_leaving` for the pod a fully parsed event names (namespace, name and uid)."""
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            namespace, name, uid = (metadata.get(k) for k in ("namespace", "name", "uid"))
            if isinstance(namespace, str) and isinstance(name, str):
                self._leaving(namespace, name, uid if isinstance(uid, str) and uid else None)
                return
        self._log.warning("watch.skipped", why="pod without namespace/name")


class _LineSplitter:
    """Splits a byte stream into lines in time linear in the bytes received.

    Each chunk is scanned once; the pieces of an unfinished line are kept apart and
    joined once, when its newline arrives, so a line trickling in byte by byte costs no
    more than one arriving whole.
    """

    def __init__(self, max_line: int = _MAX_LINE) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        self._max_line = max_line

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes (without their newline)."""
        lines = chunk.split(b"\n")
        if len(lines) > 1 and self._pieces:
            self._pieces.append(lines[0])
            lines[0] = b"".join(self._pieces)
            self._pieces.clear()
            self._size = 0
        tail = lines.pop()
        if tail:
            self._pieces.append(tail)
            self._size += len(tail)
            if self._size > self._max_line:
                raise aiohttp.ClientPayloadError("watch line too long")
        return lines

    def rest(self) -> bytes:
        """What came after the last newline (a final line without one)."""
        rest = b"".join(self._pieces)
        self._pieces.clear()
        self._size = 0
        return rest


def request_args(scope: Scope, label_selector: str) -> dict[str, Any]:
    """The selectors sent with every LIST and WATCH of ``scope``."""
    args: dict[str, Any] = {"field_selector": scope.field_selector}
    if label_selector:
        args["label_selector"] = label_selector
    return args


def _call(core: Any, scope: Scope, **kwargs: Any) -> Any:
    if scope.namespace is None:
        return core.list_pod_for_all_namespaces(**kwargs)
    return core.list_namespaced_pod(scope.namespace, **kwargs)


def _being_deleted(obj: Mapping[str, Any]) -> bool:
    metadata = obj.get("metadata")
    return isinstance(metadata, dict) and metadata.get("deletionTimestamp") is not None


def snapshot_in_scope(obj: object, scope: Scope) -> PodSnapshot | None:
    """Parse a pod; None (logged) when unparsable, None (silently) when out of scope."""
    try:
        snapshot = parse_pod(obj)
    except PodParseError as exc:
        log.warning("watch.skipped", scope=scope.label, why="unparsable pod", detail=exc.reason)
        return None
    if not scope.owns(snapshot.namespace):
        return None
    return snapshot


async def list_terminal_pods(
    core: Any,
    scope: Scope,
    *,
    label_selector: str = "",
    page_size: int = _LIST_PAGE,
    on_page: Callable[[], None] | None = None,
) -> tuple[list[PodSnapshot], str]:
    """LIST the terminal pods of ``scope`` page by page: (snapshots, resourceVersion)."""
    snapshots: list[PodSnapshot] = []
    token: str | None = None
    resource_version = ""
    while True:
        args = request_args(scope, label_selector)
        args["limit"] = page_size
        if token:
            args["_continue"] = token
        response = await _call(
            core,
            scope,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=_LIST_TIMEOUT),
            **args,
        )
        body = await read_body(response)
        try:
            page = orjson.loads(body)  # as fast as the watch's decoding
            items = page.get("items") or []
            metadata = page.get("metadata") or {}
            resource_version = str(metadata.get("resourceVersion") or "")
            token = metadata.get("continue") or None
            iter(items)
        except (ValueError, AttributeError, TypeError) as exc:
            raise aiohttp.ClientPayloadError(f"malformed LIST answer: {exc}") from None
        for item in items:
            snapshot = snapshot_in_scope(item, scope)
            if snapshot is not None:
                snapshots.append(snapshot)
        if on_page is not None:
            on_page()
        if not token:
            break
    if not resource_version:
        raise aiohttp.ClientPayloadError("LIST answer without a resourceVersion")
    return snapshots, resource_version
