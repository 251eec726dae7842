"""The reaper's global rate limit: a token bucket whose rate adapts to pushback.

It exists so that a mass node preemption (hundreds of zombies due at once) turns
into a steady stream of DELETEs at ``qps`` with at most ``burst`` back to back,
instead of a spike the API server's priority and fairness would throttle. Waiters
are served in arrival order, so no worker starves. Time is the event loop's clock,
which lets tests run on fake time. It must never sleep when a token is available
and never hold a token for a waiter that was cancelled.

The rate is additive-increase / multiplicative-decrease (`AdaptiveRate`, the rule
TCP uses against congestion): an answer that says the server is overloaded (429 with
or without ``Retry-After``, any 5xx, a timeout) cuts the rate at once to ``decrease``
times itself (0.7, as CUBIC: a server that sheds a steady fifth of the requests still
gets a useful rate, not the floor), down to a floor; every ``interval`` seconds
without such an answer adds ``increase`` back, up to ``qps``. An answer to a request
sent *before* the last cut does not cut again: it describes the old rate, and the
requests already in flight when the server starts pushing back must not collapse the
rate to its floor in one go. `AdaptiveRate` and `retry_delay` are pure (time comes in
as numbers); only `TokenBucket` touches the event loop.
"""

from __future__ import annotations

import math
import random
from collections import deque

import anyio

__all__ = ["AdaptiveRate", "TokenBucket", "retry_delay"]

# Float rounding after sleeping exactly the computed refill time must not cost
# another round trip through the loop.
_EPSILON = 1e-9

#: The longest ``Retry-After`` honoured as given; a longer one (a misbehaving proxy,
#: a clock-skewed date) is clamped so that a key is never parked for hours.
MAX_RETRY_AFTER = 60.0
#: Extra random wait on top of ``Retry-After``, as a fraction of it: keys throttled in
#: the same second must not all come back in the same second.
RETRY_JITTER = 0.5


def retry_delay(retry_after: float, rng: random.Random | None = None) -> float:
    """How long to park a key the server throttled with ``Retry-After: retry_after``.

    Never less than the server asked for, at most ``(1 + RETRY_JITTER)`` times it, and
    bounded by ``MAX_RETRY_AFTER``.
    """
    base = min(retry_after, MAX_RETRY_AFTER) if retry_after >= 0 else 0.0  # NaN too
    jitter = base * RETRY_JITTER * (rng or random).random()
    return min(MAX_RETRY_AFTER, base + jitter)


class AdaptiveRate:
    """Additive increase, multiplicative decrease of a rate between ``floor`` and ``ceiling``.

    Pure: every method takes the current time (any monotonic clock, in seconds).
    """

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
        # Default floor: a tenth of the ceiling, but at least one request a second
        # (never above the ceiling): a storm still clears while the server pushes back.
        floor = min(ceiling, max(1.0, ceiling / 10)) if floor is None else floor
        # Default step: back from the floor to the ceiling in about five quiet seconds.
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
        """The server pushed back on a request sent at ``sent_at``: cut the rate.

        Returns whether the rate was cut; an answer to a request sent before the last
        cut is not counted again.
        """
        if sent_at < self._cut_at:
            return False
        self._base = max(self.floor, self.rate(now) * self.decrease)
        self._cut_at = now
        self.cuts += 1
        return True


class TokenBucket:
    """``qps`` tokens per second, holding at most ``burst``; starts full.

    With ``adaptive=True`` the rate follows an `AdaptiveRate` with ``qps`` as its
    ceiling: `throttled` cuts it and drops the tokens saved up (what is left of a burst
    stops), quiet time raises it again, and the bucket's size follows the rate (at least
    one token).
    """

    def __init__(self, qps: float, burst: int, *, adaptive: bool = False) -> None:
        if not (qps > 0 and math.isfinite(qps)):
            raise ValueError(f"qps must be a finite number > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = burst
        self.pace = AdaptiveRate(self.qps) if adaptive else None
        self._tokens = float(burst)
        self._stamp: float | None = None
        self._waiters: deque[anyio.Event] = deque()

    @property
    def waiting(self) -> int:
        """Callers blocked in `acquire`."""
        return len(self._waiters)

    def rate(self) -> float:
        """Tokens per second right now (below ``qps`` after pushback)."""
        if self.pace is None:
            return self.qps
        return self.pace.rate(anyio.current_time())

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

    async def acquire(self) -> float:
        """Wait for a token, behind every earlier caller still waiting.

        Returns the loop time the token was taken: pass it to `throttled` if the
        request it paid for is pushed back.
        """
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

        Returns whether the rate was cut (never without ``adaptive``).
        """
        if self.pace is None:
            return False
        self._refill()
        if not self.pace.throttled(anyio.current_time(), sent_at):
            return False
        # The burst stops at once: what is left of it would hit a server that just said
        # it is overloaded. A waiter asleep for a refill time computed at the old rate
        # finds too few tokens when it wakes and sleeps again at the new one.
        self._tokens = min(self._tokens, 1.0)
        return True

    def _burst_now(self) -> float:
        if self.pace is None:
            return float(self.burst)
        now = anyio.current_time()
        return max(1.0, self.burst * self.pace.rate(now) / self.qps)

    def _refill(self) -> None:
        now = anyio.current_time()
        if self._stamp is not None and now > self._stamp:
            # Refill at the lower of the rates at both ends of the gap: a rate that rose
            # in between never pays out more than it allowed.
            rate = self.qps
            if self.pace is not None:
                rate = min(self.pace.rate(self._stamp), self.pace.rate(now))
            self._tokens = min(self._burst_now(), self._tokens + (now - self._stamp) * rate)
        self._stamp = now
