"""WATCH streams of the simulated API server.

This module owns one open watch from start to end: the 410/504 checks of the
starting resourceVersion, the synthetic ADDED events of ``resourceVersion`` ""/"0"
or the history replay after N, live events filtered by selector (objects leaving
the selection arrive as DELETED, entering as ADDED), streaming lists (initial
events, then a BOOKMARK marking their end), periodic BOOKMARKs (only on a watch
from a resourceVersion, as on a 1.20 server), ``timeoutSeconds``, the 410
ERROR event when history is compacted under it, and cuts (fault injection,
restart). Event lines come pre-encoded from the store's changes, so fan-out to many
watchers costs a byte join, not a JSON encode. It never changes the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from aiohttp import web

from kubesim.selectors import Selector
from kubesim.status import status_object
from kubesim.store import ResourceType, Store, Subscription, encode, event_line

if TYPE_CHECKING:
    from kubesim.faults import Faults

#: Flush the batch to the socket once this many bytes are queued.
BATCH_BYTES = 256 * 1024
#: Without ``timeoutSeconds`` the apiserver picks 30-60 minutes; one hour here.
DEFAULT_TIMEOUT = 3600.0


@dataclass(slots=True)
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    selector: Selector
    resource_version: str
    timeout: float
    bookmarks: bool
    #: ``sendInitialEvents`` of a streaming list; None when not asked (or not served).
    send_initial_events: bool | None


class WatchStream:
    """One open watch; :meth:`cut` ends it abruptly from outside."""

    def __init__(
        self,
        store: Store,
        faults: Faults | None,
        request: WatchRequest,
        *,
        bookmark_interval: float,
    ) -> None:
        self._store = store
        self._faults = faults
        self._req = request
        self._bookmark_interval = bookmark_interval
        self._scope: anyio.CancelScope | None = None
        self.cut_requested = False
        self.client_gone = False
        self.bytes = 0

    def cut(self) -> None:
        self.cut_requested = True
        if self._scope is not None:
            self._scope.cancel()

    def _bookmark(self, rv: int, *, initial_end: bool = False) -> bytes:
        meta: dict[str, object] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": self._req.rt.kind, "apiVersion": self._req.rt.api_version, "metadata": meta}
        return event_line("BOOKMARK", encode(obj))

    def _count_events(self, n: int) -> bool:
        """Tell fault injection about ``n`` events written; True means cut now."""
        if self._faults is None:
            return False
        return any(self._faults.on_watch_event() for _ in range(n))

    async def run(self, http_request: web.Request, response: web.StreamResponse) -> None:
        """Stream events until timeout, cut, expiry or client disconnect."""
        req = self._req
        store = self._store
        sub = store.subscribe(req.rt.name, req.namespace)
        try:
            # Snapshot and subscription happen in the same loop step: no change is
            # lost or doubled between the initial events and the live ones.
            initial = self._initial_lines()
            position = store.resource_version
            await response.prepare(http_request)
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.cut_requested:
                    scope.cancel()
                with anyio.move_on_after(req.timeout):
                    try:
                        async with anyio.create_task_group() as tg:
                            if self._faults is not None:
                                tg.start_soon(self._watch_cuts, self._faults.cut_generation)
                            await self._stream(response, sub, initial, position)
                            tg.cancel_scope.cancel()
                    except* ConnectionError:
                        # The client went away mid-stream: nothing left to tell it.
                        self.client_gone = True
        finally:
            store.unsubscribe(sub)
            self._scope = None
        if self.client_gone:
            return
        if self.cut_requested:
            transport = http_request.transport
            if transport is not None:
                transport.abort()
            return
        await response.write_eof()

    async def _watch_cuts(self, generation: int) -> None:
        assert self._faults is not None
        await self._faults.wait_cut(generation)
        self.cut()

    def _initial_lines(self) -> list[bytes]:
        req = self._req
        store = self._store
        selector = None if req.selector.empty else req.selector
        lines: list[bytes] = []
        from_now = req.resource_version in ("", "0")
        if req.send_initial_events or (req.send_initial_events is None and from_now):
            lines.extend(
                event_line("ADDED", stored.raw)
                for stored in store.iter_stored(req.rt.name, req.namespace)
                if selector is None or selector.matches_index(stored.fields, stored.labels)
            )
            if req.send_initial_events and req.bookmarks:
                lines.append(self._bookmark(store.resource_version, initial_end=True))
            return lines
        if from_now:
            return lines
        start = int(req.resource_version)
        for change in store.changes_since(req.rt.name, start):
            if req.namespace is not None and change.key[0] != req.namespace:
                continue
            type_ = change.event_type(selector)
            if type_ is not None:
                lines.append(change.line(type_))
        return lines

    async def _write(self, response: web.StreamResponse, lines: list[bytes]) -> bool:
        """Write ``lines``; True when fault injection says to cut afterwards."""
        if not lines:
            return False
        data = b"".join(lines)
        await response.write(data)
        self.bytes += len(data)
        return self._count_events(len(lines))

    async def _stream(
        self, response: web.StreamResponse, sub: Subscription, initial: list[bytes], position: int
    ) -> None:
        req = self._req
        selector = None if req.selector.empty else req.selector
        if await self._write(response, initial):
            self.cut()
            await anyio.sleep_forever()
        # A watch without a resourceVersion is served from etcd on 1.20 and gets no
        # bookmarks there: the harder case for a client, so none here either.
        from_cache = req.resource_version != "" or req.send_initial_events is not None
        start = int(req.resource_version) if req.resource_version.isdigit() else 0
        interval = self._bookmark_interval if req.bookmarks and from_cache else None
        next_bookmark = anyio.current_time() + interval if interval else None
        while True:
            if sub.expired is not None:
                error = status_object(410, "Expired", sub.expired)
                await self._write(response, [event_line("ERROR", encode(error))])
                return
            if sub.pending:
                batch: list[bytes] = []
                size = 0
                while sub.pending and size < BATCH_BYTES:
                    change = sub.pending.popleft()
                    if change.rv <= start:  # a watch from beyond the present, not there yet
                        continue
                    type_ = change.event_type(selector)
                    if type_ is not None:
                        line = change.line(type_)
                        batch.append(line)
                        size += len(line)
                    position = change.rv
                if await self._write(response, batch):
                    self.cut()
                    await anyio.sleep_forever()
                continue
            sub.wake = anyio.Event()
            if next_bookmark is None:
                await sub.wake.wait()
                continue
            with anyio.move_on_after(max(0.0, next_bookmark - anyio.current_time())):
                await sub.wake.wait()
            if anyio.current_time() >= next_bookmark and not sub.pending:
                assert interval is not None
                position = max(position, self._store.resource_version)
                await self._write(response, [self._bookmark(position)])
                next_bookmark = anyio.current_time() + interval


def parse_watch_flag(value: str | None) -> bool:
    """The apiserver's bool query conversion: anything but "0"/"false" is true."""
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")
