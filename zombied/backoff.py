"""Exponential backoff with jitter for reconnecting to a failing API server.

As client-go's reflector: ``initial`` grown by ``factor`` per consecutive failure up to
``cap`` (jitter included: the cap is a promise), reset once the last failure is older
than ``reset_after``. It only computes delays, never sleeps, and reads no clock: the
caller says when each failure happened, on the loop's clock.
"""

from __future__ import annotations

import math
import random


class Backoff:
    """Delays for consecutive failures; call `next` on each failure, `reset` on success."""

    def __init__(  # noqa: PLR0917
        self,
        initial: float = 0.8,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        if not (initial > 0 and cap >= initial and factor >= 1 and jitter >= 0):
            raise ValueError(
                "backoff needs initial > 0, cap >= initial, factor >= 1 and jitter >= 0"
            )
        if not reset_after > 0:
            raise ValueError(f"reset_after must be > 0, got {reset_after}")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng if rng is not None else random.Random()
        self._failures = 0
        self._last: float | None = None

    @property
    def failures(self) -> int:
        return self._failures

    def next(self, now: float) -> float:
        """Record a failure at ``now``; return the delay."""
        if self._last is not None and now - self._last > self.reset_after:
            self._failures = 0
        self._last = now
        # The exponent is clamped so that a long outage never overflows a float.
        exponent = min(self._failures, 1024)
        self._failures += 1
        try:
            base = min(self.cap, self.initial * self.factor**exponent)
        except OverflowError:
            base = self.cap
        delay = base * (1.0 + self.jitter * self._rng.random())
        return min(self.cap, delay) if math.isfinite(delay) else self.cap

    def reset(self) -> None:
        self._failures = 0
        self._last = None
