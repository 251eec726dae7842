"""List-watch of terminal pods, one loop per scope, feeding the cache.

The reflector: paginated LIST, then WATCH from its resourceVersion with bookmarks and a
server-side timeout; resume from the last resourceVersion, relist and reconcile on
``410 Gone``, back off on errors (a ``Retry-After`` capped as the reaper caps it).
Lines are parsed here (`parse_event`, then `zombied.pod.parse_pod`) so a bad line is a
logged skip, not a dead watch. A stream can die without a word (a middlebox that
forgot the connection): a guard cuts one silent for longer than the server lets a
healthy one be, which is until the watch's own end on a server that sends no
bookmarks (its watches are then kept short), else about a minute. Only `ApiError` is
retried; anything else is a bug and ends the loop. It never deletes and never judges:
the cache does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import msgspec
from aiohttp.http_exceptions import LineTooLong

from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.kube import ApiError, Kind, Kube, Request
from zombied.log import get_logger
from zombied.pod import PodParseError, PodSnapshot, parse_pod
from zombied.ratelimit import retry_delay
from zombied.rules import Selection

log = get_logger(__name__)

#: Only pods that can be zombies cross the wire: Failed or Succeeded.
TERMINAL_FIELD_SELECTOR: Final = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"

#: Scope label of the cluster-wide watch; never a namespace name (not a DNS label).
CLUSTER_SCOPE: Final = "_cluster"

EVENT_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

#: The API server sends a bookmark about once a minute on a watch that allows them (its
#: watch cache's heartbeat; Kubernetes 1.20 sends none). Once a scope's watch has shown
#: one well before its end, a stream silent for this long (plus the margin) is dead.
BOOKMARK_PERIOD: Final = 60.0
#: Until then the server's own end of a watch is its only sign of life: watches ask to
#: end within this, so a dead one is noticed within it plus the margin. It is longer
#: than the bookmark period, so that a periodic bookmark can show itself first.
UNHEARD_TIMEOUT: Final = 90.0

_LIST_PAGE: Final = 500
_LIST_TIMEOUT: Final = 60.0
# Beyond the expected end or bookmark: the server's and the network's delays.
_INACTIVITY_MARGIN: Final = 10.0
# A bookmark this close to the watch's end may be the one servers send just before it
# (two seconds early), which says nothing about bookmarks in between.
_LAST_BOOKMARK_S: Final = 5.0
_LINE_TOO_LONG: Final = "LineTooLong"
# How often at most the inactivity deadline is moved (it reschedules a timer).
_REARM_S: Final = 1.0
#: Failures after which the cache is no longer in step: the server refuses the scope.
_REFUSED: Final = frozenset({Kind.UNAUTHORIZED, Kind.FORBIDDEN, Kind.DENIED})


@dataclass(frozen=True, slots=True)
class Scope:
    """What one list-watch covers: one namespace, or all of the selection's."""

    namespace: str | None
    selection: Selection = field(default_factory=Selection)

    @property
    def label(self) -> str:
        """The ``scope`` metric label and log field."""
        return self.namespace if self.namespace is not None else CLUSTER_SCOPE

    @property
    def query(self) -> dict[str, str]:
        """The selectors of every LIST and WATCH of this scope."""
        parts = [TERMINAL_FIELD_SELECTOR]
        if self.namespace is None:
            parts.extend(f"metadata.namespace!={ns}" for ns in self.selection.exclude_namespaces)
        query = {"fieldSelector": ",".join(parts)}
        if self.selection.label_selector:
            query["labelSelector"] = self.selection.label_selector
        return query

    def owns(self, namespace: str) -> bool:
        listed = self.namespace is None or namespace == self.namespace
        return listed and self.selection.excludes_namespace(namespace) is None


def scopes_for(selection: Selection) -> tuple[Scope, ...]:
    """One cluster-wide scope when no namespace is named, else one per namespace."""
    wanted = tuple(dict.fromkeys(selection.namespaces))
    if not wanted:
        return (Scope(None, selection),)
    return tuple(Scope(ns, selection) for ns in wanted)


class EventParseError(ValueError):
    """A watch line that is not a usable event; the watch skips it and goes on."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: Mapping[str, Any]
    resource_version: str | None


def parse_event(line: bytes | str) -> WatchEvent:
    """Parse one watch line; raise `EventParseError` saying why it is unusable."""
    try:
        data = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
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


def snapshot_in_scope(obj: object, scope: Scope) -> PodSnapshot | None:
    """Parse a pod; None (logged) when unparsable, None (silently) when out of scope."""
    try:
        snapshot = parse_pod(obj, label_keys=scope.selection.label_keys)
    except PodParseError as exc:
        log.warning("watch.skipped", scope=scope.label, why="unparsable pod", detail=exc.reason)
        return None
    return snapshot if scope.owns(snapshot.namespace) else None


async def list_terminal_pods(
    kube: Kube,
    scope: Scope,
    *,
    page_size: int = _LIST_PAGE,
    on_page: Callable[[], None] | None = None,
) -> tuple[list[PodSnapshot], str]:
    """LIST the terminal pods of ``scope`` page by page: (snapshots, resourceVersion)."""
    request = Request("list", "pods", scope.namespace)
    snapshots: list[PodSnapshot] = []
    token = ""
    while True:
        query: dict[str, str | int] = {**scope.query, "limit": page_size}
        if token:
            query["continue"] = token
        page = await kube.request(request, query=query, timeout=_LIST_TIMEOUT)
        metadata = page.get("metadata") if isinstance(page, dict) else None
        items = page.get("items") if isinstance(page, dict) else None
        if not isinstance(metadata, dict) or not isinstance(items, list | None):
            raise ApiError(request, 0, "MalformedAnswer", "LIST answer is not a pod list")
        for item in items or ():
            snapshot = snapshot_in_scope(item, scope)
            if snapshot is not None:
                snapshots.append(snapshot)
        if on_page is not None:
            on_page()
        token = str(metadata.get("continue") or "")
        if not token:
            resource_version = str(metadata.get("resourceVersion") or "")
            if not resource_version:
                raise ApiError(request, 0, "MalformedAnswer", "LIST without a resourceVersion")
            return snapshots, resource_version


@dataclass(slots=True)
class ScopeState:
    """What health and readiness need to know about one scope's watch loop; times are
    the loop's: the last event or (re)connect, the last progress of any kind."""

    synced: bool = False
    alive: bool = False
    last_event: float = field(default_factory=anyio.current_time)
    last_progress: float = field(default_factory=anyio.current_time)
    watch_timeout: float = 0.0


class Watcher:
    """The list-watch loop of one scope; run it in a task group until cancelled.

    ``on_synced(label, synced)`` says whether the cache is in step with the server:
    after a LIST or whenever a watch opens, and no longer while the scope is refused;
    ``on_restart(label, relist)`` counts each new watch, and whether a 410 relisted.
    """

    def __init__(
        self,
        kube: Kube,
        scope: Scope,
        cache: PodCache,
        *,
        timeout_min: float = 300.0,
        timeout_max: float = 600.0,
        page_size: int = _LIST_PAGE,
        inactivity_margin: float = _INACTIVITY_MARGIN,
        backoff: Backoff | None = None,
        on_synced: Callable[[str, bool], None] | None = None,
        on_restart: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.scope = scope
        self.cache = cache
        self.timeout_min = timeout_min
        self.timeout_max = max(timeout_min, timeout_max)
        self.page_size = page_size
        self.inactivity_margin = inactivity_margin
        self.state = ScopeState(watch_timeout=self.timeout_max)
        self._kube = kube
        self._backoff = backoff if backoff is not None else Backoff()
        self._rng = random.Random()
        self._on_synced = on_synced if on_synced is not None else (lambda _label, _synced: None)
        self._on_restart = on_restart if on_restart is not None else (lambda _label, _relist: None)
        #: The last resourceVersion seen (LIST, event or bookmark).
        self.resource_version: str | None = None
        #: Whether the server sends bookmarks between a watch's start and its end.
        self.heartbeat = False
        self._log = log.bind(scope=scope.label)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self.state.alive = True
        self._on_synced(self.scope.label, False)
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
            except ApiError as exc:
                if exc.kind is Kind.GONE:
                    need_list = True
                    self._log.info("watch.relist", resource_version=self.resource_version)
                else:
                    # An unreadable resourceVersion (400) will not get better, and a line
                    # too long for the stream comes again: only a LIST gets past them.
                    relist = exc.kind is Kind.INVALID or exc.reason == _LINE_TOO_LONG
                    need_list = need_list or relist
                    await self._failed(exc)
                self._on_restart(self.scope.label, exc.kind is Kind.GONE)
            else:
                self._on_restart(self.scope.label, False)

    async def _failed(self, exc: ApiError) -> None:
        if exc.kind in _REFUSED:  # the cache misses the changes from now on
            self._on_synced(self.scope.label, False)
        delay = self._backoff.next(anyio.current_time())
        if exc.kind is Kind.THROTTLED and exc.retry_after is not None:
            delay = retry_delay(exc.retry_after, self._rng)
        if not exc.refused:
            self._log.warning("watch.error", **exc.log_fields, retry_in_s=round(delay, 3))
        await anyio.sleep(delay)

    def _progress(self) -> None:
        self.state.last_progress = anyio.current_time()

    def _saw_event(self) -> None:
        now = anyio.current_time()
        self.state.last_event = now
        self.state.last_progress = now

    async def _list(self) -> None:
        snapshots, resource_version = await list_terminal_pods(
            self._kube, self.scope, page_size=self.page_size, on_page=self._progress
        )
        forgotten = self.cache.reconcile(self.scope.owns, snapshots)
        self.resource_version = resource_version
        self._saw_event()
        self._backoff.reset()
        if not self.state.synced:
            self._log.info("watch.synced", pods=len(snapshots), resource_version=resource_version)
        self.state.synced = True
        self._on_synced(self.scope.label, True)
        if forgotten:
            self._log.info("watch.reconciled", forgotten=forgotten)

    async def _watch(self) -> None:
        timeout = self._rng.uniform(self.timeout_min, self.timeout_max)
        if not self.heartbeat:
            timeout = min(timeout, UNHEARD_TIMEOUT)
        self.state.watch_timeout = timeout
        request = Request("watch", "pods", self.scope.namespace)
        query: dict[str, str | int] = {
            **self.scope.query,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": max(1, round(timeout)),
        }
        if self.resource_version is not None:
            query["resourceVersion"] = self.resource_version
        async with self._kube.stream(request, query=query, timeout=_LIST_TIMEOUT) as lines:
            self._saw_event()
            # A drop of an established stream is a new first failure, not the next one.
            self._backoff.reset()
            # Resuming from a resourceVersion the server still has misses nothing.
            self._on_synced(self.scope.label, True)
            armed = anyio.current_time()
            ends = armed + timeout  # the server ends the watch by then
            with anyio.CancelScope(deadline=self._silent_after(armed, ends)) as guard:
                while True:
                    try:
                        line = await lines.readline()
                    except (ValueError, LineTooLong) as exc:  # a line longer than the buffer
                        raise ApiError(request, 0, _LINE_TOO_LONG, str(exc)) from exc
                    if not line:
                        break  # the server ended the watch
                    now = anyio.current_time()
                    if line.strip() and self._handle(request, line) == "BOOKMARK":
                        self.heartbeat = self.heartbeat or ends - now > _LAST_BOOKMARK_S
                    if now - armed >= _REARM_S:
                        armed = now
                        guard.deadline = self._silent_after(now, ends)
            if guard.cancelled_caught:
                # Learn again, from watches the server ends itself, what silence means.
                self.heartbeat = False
                silent = anyio.current_time() - self.state.last_event
                self._log.warning("watch.inactive", silent_s=round(silent, 1))

    def _silent_after(self, now: float, ends: float) -> float:
        """When a stream that has said nothing since ``now`` is taken for dead: once the
        server should have ended it, or sent its next bookmark if it sends them (and at
        once, beyond the margin, if it talks on past its end)."""
        bookmark = now + BOOKMARK_PERIOD if self.heartbeat else math.inf
        return min(bookmark, max(ends, now)) + self.inactivity_margin

    def _handle(self, request: Request, line: bytes) -> str | None:
        """Apply one watch line to the cache; its event type, None if unusable."""
        try:
            event = parse_event(line)
        except EventParseError as exc:
            self._log.warning("watch.skipped", why=str(exc)[:200])
            return None
        if event.type == "ERROR":
            raise ApiError.from_status(request, event.object)
        self._saw_event()
        if event.resource_version is not None:
            self.resource_version = event.resource_version
        if event.type == "BOOKMARK":
            return event.type
        snapshot = snapshot_in_scope(event.object, self.scope)
        if snapshot is None:
            return event.type
        if event.type == "DELETED":
            self.cache.remove(snapshot.key, snapshot.uid)
            return event.type
        if not snapshot.terminal:
            # The server filters on phase: this pod has no usable status. It leaves the cache.
            self._log.warning(
                "watch.skipped",
                why="pod not terminal",
                namespace=snapshot.namespace,
                pod=snapshot.name,
                phase=snapshot.phase[:40],
            )
        self.cache.upsert(snapshot)
        return event.type
