"""AdaptiveRate and retry_delay: the pure rules of pacing under pushback."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zombied.ratelimit import MAX_RETRY_AFTER, RETRY_JITTER, AdaptiveRate, retry_delay


def test_pushback_cuts_once_per_burst_and_quiet_time_adds_back() -> None:
    pace = AdaptiveRate(20, floor=1, decrease=0.5, increase=2, interval=1)
    assert pace.rate(0.0) == 20
    assert pace.throttled(now=0.0, sent_at=0.0)
    # Answers to requests sent before the cut do not cut again.
    assert not any(pace.throttled(now=t, sent_at=-0.05) for t in (0.01, 0.02, 0.03))
    assert (pace.rate(0.03), pace.cuts) == (10, 1)
    assert pace.throttled(now=0.5, sent_at=0.2)  # sent after the cut: cuts at once
    assert pace.rate(0.5) == 5
    # One step per quiet interval, up to the ceiling.
    assert [pace.rate(t) for t in (1.0, 1.5, 3.0, 5.0, 500.0)] == [5, 7, 9, 13, 20]


def test_default_floor_and_step_scale_with_the_ceiling() -> None:
    assert (AdaptiveRate(50).floor, AdaptiveRate(50).increase, AdaptiveRate(50).decrease) == (
        5,
        10,
        0.7,
    )
    # At least one request a second, but never above a tiny ceiling.
    assert (AdaptiveRate(5).floor, AdaptiveRate(0.5).floor) == (1, 0.5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ceiling": 0},
        {"ceiling": math.inf},
        {"ceiling": 5, "floor": 6},
        {"ceiling": 5, "decrease": 1},
        {"ceiling": 5, "decrease": 0},
        {"ceiling": 5, "increase": 0},
        {"ceiling": 5, "interval": 0},
    ],
)
def test_invalid(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        AdaptiveRate(**kwargs)


@given(st.lists(st.tuples(st.floats(0, 5), st.booleans()), max_size=60))
def test_rate_stays_between_floor_and_ceiling(steps: list[tuple[float, bool]]) -> None:
    pace = AdaptiveRate(30)
    now = 0.0
    for gap, pushback in steps:
        now += gap
        if pushback:
            pace.throttled(now, sent_at=now - gap / 2)
        assert pace.floor <= pace.rate(now) <= pace.ceiling


@pytest.mark.parametrize(
    ("retry_after", "delay"),
    [(3600.0, MAX_RETRY_AFTER), (math.inf, MAX_RETRY_AFTER), (0.0, 0), (-1.0, 0), (math.nan, 0)],
)
def test_retry_delay_is_capped_and_never_negative(retry_after: float, delay: float) -> None:
    assert retry_delay(retry_after, random.Random(1)) == delay


def test_retry_delay_honours_retry_after_with_bounded_jitter() -> None:
    rng = random.Random(7)
    delays = [retry_delay(1.0, rng) for _ in range(200)]
    assert all(1.0 <= d <= 1.0 + RETRY_JITTER for d in delays)
    assert len({round(d, 3) for d in delays}) > 100  # spread, not lock-step
