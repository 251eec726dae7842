"""Reaped Events: written behind the deletes, on their own budget, drops counted."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
from zombied.events import EventRecorder
from zombied.kube import open_kube
from zombied.pod import parse_pod
from zombied.reaper import Reaper

from kubesim import Simulator
from tests.daemon.conftest import captured_logs
from tests.daemon.pods import zombie
from tests.helpers import eventually


class Drops(Counter[str]):
    """The ``on_dropped`` callback of a recorder: Events not written, by why."""

    def __call__(self, why: str, count: int) -> None:
        self[why] += count


async def test_one_event_per_pod_and_a_full_queue_drops_and_counts(
    sim: Simulator, kubeconfig: Path
) -> None:
    pods = [parse_pod(sim.store.create("pods", zombie(f"z-{i}"))) for i in range(5)]
    drops = Drops()
    async with (
        open_kube(str(kubeconfig)) as api,
        EventRecorder(api, capacity=2, on_dropped=drops) as events,
    ):
        # No await in between: the sender cannot take anything off the queue.
        queued = [events.record(snapshot, "node-shutdown") for snapshot in (pods[0], *pods)]
    # A second Event of a pod is not queued, and no drop: the first is on its way.
    assert queued == [True, False, True, False, False, False]
    assert drops == {"queue_full": 3}
    assert len(sim.store.list("events", "team-a")) == 2


async def test_a_hanging_events_api_never_holds_up_a_delete(
    sim: Simulator, kubeconfig: Path
) -> None:
    pods = [parse_pod(sim.store.create("pods", zombie(f"z-{i}"))) for i in range(10)]
    sim.faults.add_latency("create", "events", seconds=3600)
    drops = Drops()
    async with (
        open_kube(str(kubeconfig)) as api,
        EventRecorder(api, flush_timeout=0.2, on_dropped=drops) as events,
    ):
        reaper = Reaper(api, qps=100, burst=10, events=events)
        with anyio.fail_after(30):  # a generous bound: the Event would hang for an hour
            for snapshot in pods:
                assert (await reaper.delete(snapshot, "node-shutdown")).outcome == "deleted"
        assert all(sim.store.get("pods", "team-a", p.name) is None for p in pods)
        assert sim.store.list("events", "team-a") == []
    # The first Event was cut off in flight, the other nine were still queued.
    assert drops == {"shutdown": 10}


async def test_a_throttled_event_is_dropped_counted_and_slows_the_events(
    sim: Simulator, kubeconfig: Path
) -> None:
    pods = [parse_pod(sim.store.create("pods", zombie(f"z-{i}"))) for i in range(2)]
    sim.faults.add_error("create", "events", status=429, retry_after=1, count=1)
    drops = Drops()
    with captured_logs() as logs:
        async with (
            open_kube(str(kubeconfig)) as api,
            EventRecorder(api, qps=20, on_dropped=drops) as events,
        ):
            for snapshot in pods:
                events.record(snapshot, "node-shutdown")
            await eventually(lambda: len(sim.store.list("events", "team-a")) == 1)
            assert events.bucket.rate() < 20
    assert drops == {"failed": 1}
    (failed,) = [entry for entry in logs if entry["event"] == "event.failed"]
    assert failed["code"] == 429
