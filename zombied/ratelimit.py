"""The reaper's global rate limit: a token bucket with strictly FIFO waiters.

It exists so that a mass node preemption (hundreds of zombies due at once) turns
into a steady stream of DELETEs at ``qps`` with at most ``burst`` back to back,
instead of a spike the API server's priority and fairness would throttle. Waiters
are served in arrival order, so no worker starves. Time is the event loop's clock,
which lets tests run on fake time. It must never sleep when a token is available
and never hold a token for a waiter that was cancelled.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque

__all__ = ["TokenBucket"]

# Float rounding after sleeping exactly the computed refill time must not cost
# another round trip through the loop.
_EPSILON = 1e-9


class TokenBucket:
    """``qps`` tokens per second, holding at most ``burst``; starts full."""

    def __init__(self, qps: float, burst: int) -> None:
        if not (qps > 0 and math.isfinite(qps)):
            raise ValueError(f"qps must be a finite number > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = burst
        self._tokens = float(burst)
        self._stamp: float | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Callers blocked in `acquire`."""
        return len(self._waiters)

    def tokens(self) -> float:
        """Tokens available now (fractional while refilling)."""
        self._refill()
        return self._tokens

    def try_acquire(self) -> bool:
        """Take a token if one is free and nobody is queued before us."""
        self._refill()
        if not self._waiters and self._tokens >= 1 - _EPSILON:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a token, behind every earlier caller still waiting."""
        if self.try_acquire():
            return
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self._waiters.append(turn)
        try:
            if self._waiters[0] is not turn:
                await turn
            while True:
                self._refill()
                if self._tokens >= 1 - _EPSILON:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self.qps)
        finally:
            head = self._waiters[0] is turn
            self._waiters.remove(turn)
            if head and self._waiters and not self._waiters[0].done():
                self._waiters[0].set_result(None)

    def _refill(self) -> None:
        now = asyncio.get_running_loop().time()
        if self._stamp is not None and now > self._stamp:
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
