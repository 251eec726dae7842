"""No task, socket or file handle survives a watch reconnect: 1,000 of them, counted
(after a warm-up that fills the connection pool), and no ``ResourceWarning`` fires."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import anyio
import psutil
import pytest
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.kube import open_kube
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet
from zombied.watch import Scope, Watcher

from kubesim import Simulator
from tests.helpers import eventually

RECONNECTS = 1_000
WARM_UP = 20


def watch_requests(sim: Simulator) -> int:
    return sum(1 for record in sim.requests if record.verb == "watch")


# The watch's lines are covered elsewhere; tracing a thousand reconnects only slows them.
@pytest.mark.no_cover
async def test_a_thousand_watch_reconnects_leak_nothing(sim: Simulator, kubeconfig: Path) -> None:
    process = psutil.Process()
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RuleSet((Rule("node-shutdown", 0.0),)), queue)
    async with open_kube(str(kubeconfig), pool_size=4) as kube:
        watcher = Watcher(
            kube,
            Scope(None),
            cache,
            timeout_min=30,
            timeout_max=30,
            # A cut stream is a transport error: keep the backoff tiny to get 1,000 quickly.
            backoff=Backoff(initial=0.001, cap=0.002, jitter=0.0),
        )
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run)
            fds = tasks = 0
            names: list[str] = []
            for n in range(RECONNECTS + WARM_UP):
                await eventually(
                    lambda: sim.store.watcher_count() == 1,
                    timeout=10,
                    interval=0.001,
                    message="the watch to be open again",
                )
                if n == WARM_UP:
                    # Measured in the same phase as at the end: one watch open.
                    gc.collect()
                    fds, tasks = process.num_fds(), len(asyncio.all_tasks())
                    names = sorted(task.get_name() for task in asyncio.all_tasks())
                sim.faults.cut_watches()
                await eventually(lambda: sim.store.watcher_count() == 0, interval=0.001)
            await eventually(lambda: sim.store.watcher_count() == 1, timeout=10, interval=0.001)
            gc.collect()
            end_fds, end_tasks = process.num_fds(), len(asyncio.all_tasks())
            assert watch_requests(sim) >= RECONNECTS + WARM_UP
            end_names = sorted(task.get_name() for task in asyncio.all_tasks())
            assert end_tasks <= tasks, f"tasks {names} -> {end_names}"
            # A reconnect may be mid-flight: allow one socket pair of slack, never growth.
            assert end_fds <= fds + 2, f"open fds {fds} -> {end_fds}"
            tg.cancel_scope.cancel()
    gc.collect()
    print(
        f"\nresources: {watch_requests(sim)} watch requests, fds {fds} -> {end_fds}, "
        f"tasks {tasks} -> {end_tasks}"
    )
