"""The reaper's global rate limit: a token bucket whose rate adapts to pushback.

A mass preemption becomes a steady stream of DELETEs at ``qps`` with at most ``burst``
back to back, waiters served in arrival order. The rate is additive-increase /
multiplicative-decrease (`AdaptiveRate`): an overloaded answer (429, 5xx, timeout) cuts
it, quiet time raises it back to ``qps``; answers to requests sent before the last cut
do not cut again. `AdaptiveRate` and `retry_delay` are pure; only `TokenBucket` uses
the event loop.
"""

from __future__ import annotations

import math
import random
from collections import deque

import anyio

# Float rounding after sleeping exactly the refill time must not cost another round.
_EPSILON = 1e-9

#: The longest ``Retry-After`` honoured: a key is never parked for hours.
MAX_RETRY_AFTER = 60.0
#: Extra random wait on top of ``Retry-After``, as a fraction of it, so that keys
#: throttled together do not come back together.
RETRY_JITTER = 0.5


def retry_delay(retry_after: float, rng: random.Random | None = None) -> float:
    """How long to park a key the server throttled with ``Retry-After: retry_after``:
    at least that, at most ``1 + RETRY_JITTER`` times it, never over ``MAX_RETRY_AFTER``."""
    base = min(retry_after, MAX_RETRY_AFTER) if retry_after >= 0 else 0.0  # NaN too
    jitter = base * RETRY_JITTER * (rng or random).random()
    return min(MAX_RETRY_AFTER, base + jitter)


class AdaptiveRate:
    """Additive increase, multiplicative decrease of a rate between ``floor`` and
    ``ceiling``; pure: every method takes the current time (any monotonic clock)."""

    def __init__(
        self,
        ceiling: float,
        *,
        floor: float | None = None,
        decrease: float = 0.7,
        increase: float | None = None,
        interval: float = 1.0,
    ) -> None:
        if not (ceiling > 0 and math.isfinite(ceiling)):
            raise ValueError(f"ceiling must be a finite number > 0, got {ceiling}")
        # By default a tenth of the ceiling, at least 1/s; back to the ceiling in ~5 s.
        floor = min(ceiling, max(1.0, ceiling / 10)) if floor is None else floor
        increase = max(1.0, ceiling / 5) if increase is None else increase
        if not 0 < floor <= ceiling:
            raise ValueError(f"floor must be > 0 and <= ceiling {ceiling}, got {floor}")
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be between 0 and 1, got {decrease}")
        if not (increase > 0 and interval > 0):
            raise ValueError("increase and interval must be > 0")
        self.ceiling = float(ceiling)
        self.floor = float(floor)
        self.decrease = decrease
        self.increase = float(increase)
        self.interval = float(interval)
        self._base = self.ceiling
        self._cut_at = -math.inf
        self.cuts = 0

    def rate(self, now: float) -> float:
        """The rate at ``now``: the last cut plus one ``increase`` per whole quiet interval."""
        if self._base >= self.ceiling:
            return self.ceiling
        steps = math.floor(max(0.0, now - self._cut_at) / self.interval + _EPSILON)
        return min(self.ceiling, self._base + steps * self.increase)

    def throttled(self, now: float, sent_at: float) -> bool:
        """The server pushed back on a request sent at ``sent_at``: cut the rate, unless
        it was sent before the last cut. Returns whether the rate was cut."""
        if sent_at < self._cut_at:
            return False
        self._base = max(self.floor, self.rate(now) * self.decrease)
        self._cut_at = now
        self.cuts += 1
        return True


class TokenBucket:
    """``qps`` tokens per second, holding at most ``burst``; starts full.

    The rate follows an `AdaptiveRate` with ``qps`` as its ceiling: `throttled` cuts it
    and stops what is left of a burst; the bucket's size follows the rate.
    """

    def __init__(self, qps: float, burst: int) -> None:
        if not (qps > 0 and math.isfinite(qps)):
            raise ValueError(f"qps must be a finite number > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = burst
        self.pace = AdaptiveRate(self.qps)
        self._tokens = float(burst)
        self._stamp: float | None = None
        self._waiters: deque[anyio.Event] = deque()

    @property
    def waiting(self) -> int:
        """Callers blocked in `acquire`."""
        return len(self._waiters)

    def rate(self) -> float:
        """Tokens per second right now (below ``qps`` after pushback)."""
        return self.pace.rate(anyio.current_time())

    def try_acquire(self) -> bool:
        """Take a token if one is free and nobody is queued before us."""
        self._refill()
        if not self._waiters and self._tokens >= 1 - _EPSILON:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> float:
        """Wait for a token, behind every earlier caller; return the loop time it was taken
        (for `throttled`, if the request it paid for is pushed back)."""
        if self.try_acquire():
            return anyio.current_time()
        turn = anyio.Event()
        self._waiters.append(turn)
        try:
            if self._waiters[0] is not turn:
                await turn.wait()
            while True:
                self._refill()
                if self._tokens >= 1 - _EPSILON:
                    self._tokens -= 1
                    return anyio.current_time()
                await anyio.sleep((1 - self._tokens) / self.rate())
        finally:
            head = self._waiters[0] is turn
            self._waiters.remove(turn)
            if head and self._waiters:
                self._waiters[0].set()

    def throttled(self, sent_at: float) -> bool:
        """The server pushed back on the request paid for at ``sent_at``: slow down now.
        Returns whether the rate was cut."""
        self._refill()
        if not self.pace.throttled(anyio.current_time(), sent_at):
            return False
        # A waiter asleep at the old rate finds too few tokens and sleeps again.
        self._tokens = min(self._tokens, 1.0)
        return True

    def _refill(self) -> None:
        now = anyio.current_time()
        if self._stamp is not None and now > self._stamp:
            # The lower of the rates at both ends of the gap: never more than allowed.
            rate = min(self.pace.rate(self._stamp), self.pace.rate(now))
            burst = max(1.0, self.burst * self.pace.rate(now) / self.qps)
            self._tokens = min(burst, self._tokens + (now - self._stamp) * rate)
        self._stamp = now
