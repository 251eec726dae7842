"""Backoff: exponential growth, jitter, cap and reset, on an injected clock."""

from __future__ import annotations

import random

import pytest
from zombied.backoff import Backoff


def test_grows_exponentially_without_jitter() -> None:
    backoff = Backoff(initial=0.8, cap=30.0, factor=2.0, jitter=0.0)
    delays = [backoff.next(now=float(i)) for i in range(8)]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    assert backoff.failures == 8


def test_jitter_stays_within_bounds_and_cap() -> None:
    backoff = Backoff(rng=random.Random(1))
    for attempt in range(200):
        base = min(30.0, 0.8 * 2.0**attempt)
        delay = backoff.next(now=float(attempt))
        assert base <= delay <= min(30.0, 2 * base)
    first = {Backoff(rng=random.Random(seed)).next(now=0.0) for seed in range(20)}
    assert len(first) == 20  # clients spread, not in lock-step


def test_reset_after_a_healthy_stretch_or_on_request() -> None:
    backoff = Backoff(jitter=0.0, reset_after=60.0)
    for i in range(5):
        backoff.next(now=float(i))
    assert backoff.next(now=4.0 + 60.0) == 12.8 * 2  # exactly reset_after: still failing
    assert backoff.next(now=200.0) == 0.8
    assert backoff.failures == 1
    backoff.next(now=201.0)
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next(now=202.0) == 0.8


def test_long_outage_does_not_overflow() -> None:
    backoff = Backoff(factor=10.0, jitter=0.5, rng=random.Random(0))
    for i in range(5000):
        assert backoff.next(now=float(i)) <= 30.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0},
        {"initial": -1},
        {"initial": 5, "cap": 1},
        {"factor": 0.5},
        {"jitter": -0.1},
        {"reset_after": 0},
    ],
)
def test_invalid(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must|needs"):
        Backoff(**kwargs)
