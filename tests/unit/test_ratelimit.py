"""TokenBucket: rate, burst and FIFO fairness on fake loop time."""

from __future__ import annotations

import asyncio
import math

import anyio
import anyio.lowlevel
import pytest
from zombied.ratelimit import TokenBucket

pytestmark = pytest.mark.looptime


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_burst_is_free_then_qps_and_refills_up_to_burst_only() -> None:
    bucket = TokenBucket(qps=5, burst=10)
    start = now()
    times = []
    for _ in range(20):
        await bucket.acquire()
        times.append(now() - start)
    assert times == [0] * 10 + [pytest.approx(0.2 * i) for i in range(1, 11)]
    assert not bucket.try_acquire()
    await anyio.sleep(100)  # refills 10 tokens, not 500
    start = now()
    for _ in range(11):
        await bucket.acquire()
    assert now() - start == pytest.approx(0.2)
    await anyio.sleep(0.2)
    assert bucket.try_acquire()


async def test_waiters_are_served_in_arrival_order_and_a_cancelled_one_blocks_none() -> None:
    bucket = TokenBucket(qps=10, burst=1)
    await bucket.acquire()
    order: list[tuple[int, float]] = []
    start = now()

    async def waiter(i: int) -> None:
        await bucket.acquire()
        order.append((i, now() - start))

    async with anyio.create_task_group() as tg, anyio.create_task_group() as doomed:
        doomed.start_soon(waiter, -1)
        await anyio.lowlevel.checkpoint()
        for i in range(5):
            tg.start_soon(waiter, i)
            await anyio.lowlevel.checkpoint()
        await anyio.sleep(0.05)
        assert bucket.waiting == 6
        assert not bucket.try_acquire()  # no jumping the queue
        doomed.cancel_scope.cancel()
    assert [i for i, _ in order] == [0, 1, 2, 3, 4]
    assert [t for _, t in order] == [pytest.approx(0.1 * (i + 1)) for i in range(5)]
    assert bucket.waiting == 0


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (math.inf, 1), (math.nan, 1), (1, 0)])
async def test_invalid(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        TokenBucket(qps, burst)


async def test_pushback_slows_the_next_tokens_at_once_and_stops_the_burst() -> None:
    bucket = TokenBucket(qps=10, burst=10)
    sent = await bucket.acquire()
    await bucket.acquire()
    await anyio.sleep(0.01)
    assert bucket.throttled(sent)
    assert not bucket.throttled(sent)  # sent before the cut: it does not cut again
    assert bucket.rate() == pytest.approx(7)
    start = now()
    times = []
    for _ in range(4):
        await bucket.acquire()
        times.append(now() - start)
    # The one token left after the cut, then one per 1/7 s: no saved-up burst.
    assert times == [0] + [pytest.approx(i / 7, abs=1e-5) for i in range(1, 4)]  # µs ticks


async def test_a_waiter_asleep_at_the_old_rate_gets_its_token_at_the_new_one() -> None:
    bucket = TokenBucket(qps=2, burst=1)
    sent = await bucket.acquire()
    start = now()
    got: list[float] = []

    async def waiter() -> None:
        await bucket.acquire()
        got.append(now() - start)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.1)
        bucket.throttled(sent)  # 2 -> 1.4 qps while the waiter sleeps for its 0.5 s
    # 0.2 tokens accrued at 2/s before the cut, the other 0.8 at 1.4/s after it.
    assert got == [pytest.approx(0.1 + 0.8 / 1.4, abs=1e-5)]
