"""A delaying work queue with client-go workqueue semantics, for one event loop.

A key is queued at most once, never handed to two workers, and a key re-added while
processing ("dirty") comes back after `WorkQueue.done`. Keys wait in a heap until due.
It owns per-key retry backoff: a worker says `add_rate_limited` or `forget`. Time is
the loop's clock, so tests run on fake time. It holds keys only, never pod data, and
reports depth and wait time through callbacks, never through metrics code.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

import anyio

from zombied.backoff import Backoff

K = TypeVar("K", bound=Hashable)

# Lazily deleted heap entries are compacted once they outnumber live ones this much.
_COMPACT_SLACK: Final = 64


class QueueClosed(Exception):
    """`WorkQueue.get` has nothing more to hand out: the queue was shut down."""


class WorkQueue(Generic[K]):
    """Dedup by key, delay until due, never two workers on one key.

    ``on_depth(n)`` follows the depth; ``on_wait(seconds)`` gets, for each key handed
    out, how long after its due time; ``backoff()`` makes one key's retry backoff.
    """

    def __init__(
        self,
        *,
        on_depth: Callable[[int], None] | None = None,
        on_wait: Callable[[float], None] | None = None,
        backoff: Callable[[], Backoff] = Backoff,
    ) -> None:
        self._on_depth = on_depth
        self._on_wait = on_wait
        self._new_backoff = backoff
        self._failures: dict[K, Backoff] = {}
        self._due: dict[K, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._dirty: dict[K, float] = {}
        self._processing: set[K] = set()
        self._seq = itertools.count()
        self._closed = False
        self._drain = False
        self._waiters: deque[anyio.Event] = deque()
        self._last_depth = 0

    def __len__(self) -> int:
        return self.depth

    def __contains__(self, key: object) -> bool:
        return key in self._due or key in self._dirty

    @property
    def depth(self) -> int:
        """Keys waiting to be handed out (due or not, re-added while processing)."""
        return len(self._due) + len(self._dirty)

    @property
    def processing(self) -> int:
        return len(self._processing)

    @property
    def closed(self) -> bool:
        return self._closed

    def num_requeues(self, key: K) -> int:
        backoff = self._failures.get(key)
        return 0 if backoff is None else backoff.failures

    @property
    def retrying(self) -> int:
        """Keys with failures counted."""
        return len(self._failures)

    def due_at(self, key: K) -> float | None:
        """Loop time at which a waiting ``key`` becomes due."""
        if key in self._due:
            return self._due[key][0]
        return self._dirty.get(key)

    def add(self, key: K, delay: float = 0.0) -> None:
        """Queue ``key`` to be due after ``delay`` seconds; an earlier due time wins."""
        if self._closed and not self._drain:
            return
        due = anyio.current_time() + (delay if delay > 0 else 0.0)
        if key in self._processing:
            self._dirty[key] = min(self._dirty.get(key, math.inf), due)
        else:
            current = self._due.get(key)
            if current is not None and current[0] <= due:
                return
            self._push(key, due)
        self._notify()

    def add_rate_limited(self, key: K) -> None:
        """Count a failure of ``key`` and queue it again after its backoff delay."""
        backoff = self._failures.get(key)
        if backoff is None:
            backoff = self._failures[key] = self._new_backoff()
        self.add(key, backoff.next(anyio.current_time()))

    def forget(self, key: K) -> None:
        """Stop counting failures of ``key``: it succeeded or will never be retried."""
        self._failures.pop(key, None)

    def discard(self, key: K) -> None:
        """Drop ``key`` from waiting, a pending re-add and its failures: the pod is gone."""
        self._failures.pop(key, None)
        removed = self._due.pop(key, None) is not None
        removed = self._dirty.pop(key, None) is not None or removed
        if removed:
            self._maybe_compact()
            self._notify()

    async def get(self) -> K:
        """Wait for a due key and mark it processing; the caller must call `done`.
        `QueueClosed` after a shutdown, once draining has nothing due left."""
        while True:
            if self._closed and not self._drain:
                raise QueueClosed
            now = anyio.current_time()
            key = self._pop_due(now)
            if key is not None:
                if self._due:
                    self._wake_one()  # more may be due: the next idle worker looks
                return key
            if self._closed and not any(
                self._dirty.get(k, math.inf) <= now for k in self._processing
            ):
                # Draining: what is not due stays for the next instance, but a due
                # re-add of a key in flight comes back after done().
                raise QueueClosed
            top = None if self._closed else self._top()
            await self._wait(None if top is None else top[0])

    async def _wait(self, until: float | None) -> None:
        waiter = anyio.Event()
        self._waiters.append(waiter)
        try:
            with anyio.CancelScope(deadline=math.inf if until is None else until):
                await waiter.wait()
        except anyio.get_cancelled_exc_class():
            # A wake-up this worker can no longer act on goes to another one.
            if waiter.is_set():
                self._wake_one()
            raise
        finally:
            if not waiter.is_set():
                self._waiters.remove(waiter)

    def done(self, key: K) -> None:
        """Release ``key`` after processing; a pending re-add is queued now."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        due = self._dirty.pop(key, None)
        if due is not None:
            current = self._due.get(key)
            if current is None or due < current[0]:
                self._push(key, due)
            self._notify()
        elif self._closed:
            self._notify(everyone=True)  # a drain may be waiting for this key alone

    def shut_down(self, *, drain: bool = True) -> None:
        """Stop handing out work: with drain, only what is due; else nothing at all."""
        if self._closed and not self._drain:
            return
        self._closed = True
        self._drain = drain
        self._notify(everyone=True)

    def _push(self, key: K, due: float) -> None:
        seq = next(self._seq)
        self._due[key] = (due, seq)
        heapq.heappush(self._heap, (due, seq, key))
        self._maybe_compact()

    def _top(self) -> tuple[float, int, K] | None:
        while self._heap:
            due, seq, key = self._heap[0]
            if self._due.get(key) == (due, seq):
                return self._heap[0]
            heapq.heappop(self._heap)
        return None

    def _pop_due(self, now: float) -> K | None:
        top = self._top()
        if top is None or top[0] > now:
            return None
        due, _, key = heapq.heappop(self._heap)
        del self._due[key]
        self._processing.add(key)
        self._report_depth()
        if self._on_wait is not None:
            self._on_wait(max(0.0, now - due))
        return key

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * len(self._due) + _COMPACT_SLACK:
            self._heap = [(due, seq, key) for key, (due, seq) in self._due.items()]
            heapq.heapify(self._heap)

    def _notify(self, *, everyone: bool = False) -> None:
        # One key changed: one idle worker looks again, as client-go's ``Cond.Signal``.
        if everyone:
            while self._waiters:
                self._wake_one()
        else:
            self._wake_one()
        self._report_depth()

    def _wake_one(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()

    def _report_depth(self) -> None:
        depth = self.depth
        if depth != self._last_depth:
            self._last_depth = depth
            if self._on_depth is not None:
                self._on_depth(depth)
