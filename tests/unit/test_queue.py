"""WorkQueue: client-go workqueue semantics on the event loop's (fake) clock."""

from __future__ import annotations

import asyncio
import tracemalloc

import anyio
import pytest
from zombied.backoff import Backoff
from zombied.queue import QueueClosed, WorkQueue

pytestmark = pytest.mark.looptime


def now() -> float:
    return asyncio.get_running_loop().time()


async def get_now(queue: WorkQueue[str]) -> str:
    """Take a key that must already be due: fails instead of waiting."""
    with anyio.fail_after(0):
        return await queue.get()


async def nothing_within(queue: WorkQueue[str], seconds: float = 100) -> None:
    with pytest.raises(TimeoutError), anyio.fail_after(seconds):
        await queue.get()


async def test_a_key_is_queued_once_and_handed_out_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.done("nope")  # unknown: ignored
    for _ in range(5):
        queue.add("a")
    queue.done("a")  # not processing yet: stays queued
    assert len(queue) == 1
    assert await get_now(queue) == "a"
    assert (queue.depth, queue.processing) == (0, 1)
    queue.done("a")
    assert queue.processing == 0
    await nothing_within(queue)


async def test_keys_come_in_due_order_and_the_earliest_due_time_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    start = now()
    queue.add("late", 20)
    queue.add("early", 60)
    queue.add("early", 10)  # earlier: moves the key
    queue.add("early", 40)  # later: the earlier due time stays
    queue.add("now")
    queue.add("also-now")
    assert (queue.due_at("late"), queue.due_at("early")) == (start + 20, start + 10)
    got = [await queue.get() for _ in range(4)]
    assert got == ["now", "also-now", "early", "late"]
    assert now() - start == pytest.approx(20)
    for key in got:
        queue.done(key)
    await nothing_within(queue)  # the superseded entries must not resurface


async def test_a_key_added_while_processing_comes_back_after_done_with_its_delay() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await get_now(queue) == "a"
    queue.add("a", 10)
    queue.add("a", 20)
    assert (queue.depth, "a" in queue) == (1, True)
    await nothing_within(queue, 5)  # still processing: never handed out twice
    start = now()
    queue.done("a")
    assert await queue.get() == "a"
    assert now() - start == pytest.approx(5)  # 10 s after it was added


async def test_discard_removes_waiting_and_dirty() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("gone", 5)
    queue.add("kept", 10)
    queue.discard("gone")
    queue.discard("never-added")
    assert (len(queue), "gone" in queue, queue.due_at("gone")) == (1, False, None)
    start = now()
    assert await queue.get() == "kept"
    assert now() - start == pytest.approx(10)
    queue.add("kept")  # dirty
    queue.discard("kept")
    assert queue.processing == 1
    queue.done("kept")
    assert len(queue) == 0
    queue.add("gone", 50)  # a discarded key comes back with its new delay
    start = now()
    assert await queue.get() == "gone"
    assert now() - start == pytest.approx(50)


async def test_waiter_wakes_for_an_earlier_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    start = now()
    queue.add("late", 100)
    got: list[tuple[str, float]] = []

    async def worker() -> None:
        key = await queue.get()
        got.append((key, now() - start))

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        await anyio.sleep(1)
        queue.add("early", 5)
    assert got == [("early", pytest.approx(6))]


async def test_a_cancelled_get_loses_nothing_and_its_wake_up_goes_to_another() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", 10)
    with anyio.move_on_after(5):
        await queue.get()
    assert (len(queue), queue.processing) == (1, 0)
    first = asyncio.create_task(queue.get())
    await anyio.sleep(1)
    second = asyncio.create_task(queue.get())
    await anyio.sleep(1)
    queue.add("a")  # due now: wakes the first waiter, which is cancelled before it runs
    first.cancel()
    with anyio.fail_after(5):
        assert await second == "a"
    assert first.cancelled()


async def test_every_due_key_reaches_an_idle_worker() -> None:
    # Each change wakes one worker: the one that takes a key wakes the next while
    # more are due, and one re-arms its timer for keys not due yet.
    queue: WorkQueue[str] = WorkQueue()
    start = now()
    got: dict[str, float] = {}

    async def worker() -> None:
        while True:
            key = await queue.get()
            got[key] = now() - start
            await anyio.sleep(10)
            queue.done(key)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(worker)
        await anyio.sleep(1)
        for key in ("a", "b", "c"):
            queue.add(key)
        queue.add("later", 5)
        await anyio.sleep(30)
        tg.cancel_scope.cancel()
    assert got == {key: pytest.approx(1) for key in "abc"} | {"later": pytest.approx(11)}


async def test_callbacks_report_depth_and_wait() -> None:
    depths: list[int] = []
    waits: list[float] = []
    queue: WorkQueue[str] = WorkQueue(on_depth=depths.append, on_wait=waits.append)
    queue.add("a", 10)
    queue.add("b")
    queue.add("b")  # no change, no report
    assert depths == [1, 2]
    await anyio.sleep(3)
    assert await get_now(queue) == "b"
    assert waits == [pytest.approx(3)]
    assert await queue.get() == "a"
    assert waits[-1] == pytest.approx(0)
    assert depths == [1, 2, 1, 0]
    queue.add("a")  # dirty counts as waiting
    assert depths[-1] == 1
    queue.done("a")
    queue.done("b")
    assert depths[-1] == 1


async def test_shutdown_without_drain_wakes_every_waiter_and_cannot_be_undone() -> None:
    escalated: WorkQueue[str] = WorkQueue()
    escalated.add("a")
    escalated.shut_down(drain=True)
    escalated.shut_down(drain=False)  # drops the due key
    with pytest.raises(QueueClosed):
        await escalated.get()
    queue: WorkQueue[str] = WorkQueue()
    queue.add("due-later", 100)
    closed = 0

    async def worker() -> None:
        nonlocal closed
        with pytest.raises(QueueClosed):
            await queue.get()
        closed += 1

    start = now()
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(worker)
        await anyio.sleep(1)
        queue.shut_down(drain=False)
    assert (closed, queue.closed) == (3, True)
    assert now() - start == pytest.approx(1)
    queue.add("x")  # ignored once closed
    queue.shut_down(drain=True)  # cannot un-escalate
    with pytest.raises(QueueClosed):
        await queue.get()


async def test_drain_hands_out_what_is_due_then_closes() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.add("later", 10)
    assert await get_now(queue) == "a"
    queue.add("a")  # re-added while processing, due now: waited for
    queue.shut_down(drain=True)
    start = now()
    assert await get_now(queue) == "b"
    queue.done("b")
    got: list[str] = []

    async def worker() -> None:
        got.append(await queue.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        await anyio.sleep(1)
        assert got == []
        queue.done("a")
    assert got == ["a"]
    queue.add("a", 30)  # a retry later: not due during the drain
    queue.done("a")
    with pytest.raises(QueueClosed):
        await queue.get()
    assert now() - start == pytest.approx(1)
    assert len(queue) == 2  # not due: left for the next instance


async def test_discarded_keys_leave_no_memory_behind() -> None:
    queue: WorkQueue[int] = WorkQueue()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            queue.add(i, 10 + i)
            queue.add(i, 5)  # moved earlier: the old due time is dropped lazily
            queue.add_rate_limited(i)
            queue.discard(i)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert (len(queue), queue.retrying) == (0, 0)
    # Kept garbage would be about 100 bytes per key: 2 MB here.
    assert grown < 200_000
    queue.add(7, 1)
    assert await queue.get() == 7


def fixed_backoff() -> Backoff:
    return Backoff(initial=1.0, cap=8.0, factor=2.0, jitter=0.0)


async def test_failures_back_off_per_key_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue(backoff=fixed_backoff)
    waits = []
    for _ in range(5):
        start = now()
        queue.add_rate_limited("flaky")
        assert await queue.get() == "flaky"
        waits.append(now() - start)
        queue.add_rate_limited("other")  # its own backoff: at its first delay
        assert queue.due_at("other") == pytest.approx(now() + 1)
        queue.discard("other")  # gone: its failures are forgotten with it
        queue.done("flaky")
    assert waits == pytest.approx([1, 2, 4, 8, 8])
    assert (queue.num_requeues("flaky"), queue.num_requeues("other")) == (5, 0)
    queue.forget("flaky")  # it finally worked
    assert (queue.num_requeues("flaky"), queue.retrying) == (0, 0)
    start = now()
    queue.add_rate_limited("flaky")
    assert await queue.get() == "flaky"
    assert now() - start == pytest.approx(1)
    queue.add_rate_limited("flaky")  # failed while processing: back after done
    queue.add_rate_limited("flaky")  # an earlier due time always wins
    start = now()
    queue.done("flaky")
    assert await queue.get() == "flaky"
    assert now() - start == pytest.approx(2)
