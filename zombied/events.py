"""``Reaped`` Events: the audit trail of a reap, written behind the deletes.

`EventRecorder.record` only appends to a bounded queue (1,000, as client-go) and never
blocks; one sender writes it out on its own token bucket, which pushback slows down.
A full queue drops and counts the newest Event; the log line and metrics still record
every reap. There is no aggregation: every reap is of a different pod, and the Event
is there to say which.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, Self

import anyio
import anyio.abc

from zombied import report
from zombied.kube import ApiError, Kube, Request
from zombied.log import get_logger
from zombied.pod import PodSnapshot
from zombied.ratelimit import TokenBucket

log = get_logger(__name__)

COMPONENT: Final = "zombied"
#: Event writes per second and back to back, beside and never counted in ``--qps``.
EVENT_QPS: Final = 5.0
EVENT_BURST: Final = 10
#: Seconds the recorder keeps writing at exit when nobody drained it first.
FLUSH_TIMEOUT: Final = 2.0
_EVENT_TIMEOUT: Final = 10.0


def event_body(
    pod: PodSnapshot, rule: str, *, identity: str, when: datetime, name_suffix: int
) -> dict[str, Any]:
    """The ``Reaped`` Event for ``pod``, deleted at ``when`` because ``rule`` matched."""
    stamp = report.stamp(when)
    detail = f": {pod.message}" if pod.message else ""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name}.{name_suffix:x}", "namespace": pod.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "resourceVersion": pod.resource_version,
        },
        "reason": "Reaped",
        "message": (
            f"Deleted zombie pod (rule {rule}) left {pod.phase or 'terminal'} "
            f"on node {pod.node or 'unknown'} by reason {pod.reason or 'unknown'}{detail}"
        )[:1024],
        "type": "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    """Writes ``Reaped`` Events in the background; use as ``async with``.
    ``on_dropped(why, count)`` counts Events not written."""

    def __init__(
        self,
        kube: Kube,
        *,
        identity: str = COMPONENT,
        qps: float = EVENT_QPS,
        capacity: int = 1000,
        flush_timeout: float = FLUSH_TIMEOUT,
        on_dropped: Callable[[str, int], None] | None = None,
    ) -> None:
        self._kube = kube
        self.identity = identity
        self.bucket = TokenBucket(qps, EVENT_BURST)
        self.capacity = capacity
        self.flush_timeout = flush_timeout
        self._on_dropped = on_dropped if on_dropped is not None else (lambda _why, _count: None)
        self._queue: deque[tuple[PodSnapshot, str, datetime]] = deque()
        self._queued_uids: set[str] = set()
        self._ready = anyio.Event()
        self._idle = anyio.Event()
        self._closed = False
        self._tg: anyio.abc.TaskGroup | None = None
        # The sender's own scope: the task group's covers the host task's code too.
        self._sender = anyio.CancelScope()
        self._sending = 0

    def __len__(self) -> int:
        return len(self._queue)

    def record(self, pod: PodSnapshot, rule: str) -> bool:
        """Queue the ``Reaped`` Event of ``pod``; never waits. False if not queued."""
        if pod.uid in self._queued_uids:
            return False  # one Event per object: this one is already on its way
        if self._closed or len(self._queue) >= self.capacity:
            self._on_dropped("queue_full", 1)
            return False
        self._queue.append((pod, rule, datetime.now(UTC)))
        self._queued_uids.add(pod.uid)
        self._ready.set()
        return True

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109 - the drain's own budget
        """Write what is queued within ``timeout`` seconds, count what is left as dropped."""
        if self._closed:
            return
        self._closed = True
        self._ready.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
            await self._idle.wait()
        self._sender.cancel()
        left = len(self._queue) + self._sending
        if left:
            self._on_dropped("shutdown", left)
            log.warning("event.dropped", count=left, why="shutdown")
            self._queue.clear()
            self._queued_uids.clear()

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._send_all)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        tg = self._tg
        assert tg is not None  # entered
        if exc_info[0] is not None:
            self._closed = True
            tg.cancel_scope.cancel()
        else:
            await self.drain(self.flush_timeout)
        try:
            return await tg.__aexit__(*exc_info)
        finally:
            self._tg = None

    async def _send_all(self) -> None:
        try:
            with self._sender:
                while True:
                    if not self._queue:
                        if self._closed:
                            return
                        self._ready = anyio.Event()
                        await self._ready.wait()
                        continue
                    sent_at = await self.bucket.acquire()
                    pod, rule, when = self._queue.popleft()
                    self._queued_uids.discard(pod.uid)
                    self._sending = 1
                    await self._send(pod, rule, when, sent_at)
                    self._sending = 0
        finally:
            self._idle.set()

    async def _send(self, pod: PodSnapshot, rule: str, when: datetime, sent_at: float) -> None:
        body = event_body(pod, rule, identity=self.identity, when=when, name_suffix=time.time_ns())
        request = Request("create", "events", pod.namespace)
        try:
            await self._kube.request(request, body=body, timeout=_EVENT_TIMEOUT)
        except ApiError as exc:  # an audit Event is best effort; a bug still raises
            self._on_dropped("failed", 1)
            if exc.overloaded:
                self.bucket.throttled(sent_at)
            if not exc.refused:
                log.warning("event.failed", namespace=pod.namespace, pod=pod.name, **exc.log_fields)
