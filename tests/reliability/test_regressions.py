"""Counterexamples the property tests and the soak found, as explicit histories.

Each test replays one history against the in-process daemon (or its watch alone) over
real HTTP and checks the same invariants as the property tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.conftest import watching
from tests.helpers import eventually
from tests.reliability.live import running, settle
from tests.reliability.world import World

NODE_SHUTDOWN = RuleSet((Rule("node-shutdown", 0.0),))


CHANGES: dict[str, Callable[[World], object]] = {
    # A uid precondition alone lets the server delete a pod protected since it was
    # judged: the delete must also be conditional on the resourceVersion judged.
    "annotated-keep": lambda world: world.set_keep(0, keep=True),
    "relabelled-out-of-scope": lambda world: world.relabel(0, precious=True),
    # A StatefulSet pod recreated under the same name (new uid).
    "replaced-under-the-same-name": lambda world: world.replace(0, None),
}


@pytest.mark.parametrize(
    ("ending", "change"),
    [
        pytest.param(ending, change, id=change)
        for ending, change in (
            ("shutdown:1.22:terminated", "annotated-keep"),
            ("shutdown:1.26:terminated", "relabelled-out-of-scope"),
            ("shutdown:newest:succeeded", "replaced-under-the-same-name"),
        )
    ],
)
async def test_a_pod_changed_while_its_delete_is_in_flight_survives(
    ending: str, change: str
) -> None:
    """The DELETE is on the wire (slow API server) when the pod changes under it."""
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        sim.faults.add_latency("delete", "pods", 0.5)
        name = world.end_pod(0, ending)
        await eventually(lambda: world.delete_requests, message="a DELETE on the wire")
        CHANGES[change](world)
        await eventually(lambda: not live.daemon.queue.processing, timeout=5)
        assert sim.store.get("pods", "team-a", name) is not None
        await settle(live)
        assert world.check_safety() == []


async def test_no_backoff_state_kept_for_a_pod_deleted_by_someone_else() -> None:
    """Per-pod retry state must go with the pod, or a long run leaks one entry per pod.

    The delete fails (503), the key waits in backoff, then someone else deletes the pod:
    the key never comes back to a worker, so its backoff must be dropped anyway.
    """
    async with running(NODE_SHUTDOWN, pods=3) as live:
        world, sim = live.world, live.sim
        queue = live.daemon.queue
        sim.faults.add_error("delete", "pods", status=503)
        for _ in range(3):
            world.end_pod(0, "shutdown:1.22:terminated")
        await eventually(lambda: len(world.delete_requests) >= 2, message="failed DELETEs")
        for _ in range(3):
            world.delete_by_other(0)
        sim.faults.clear()
        await settle(live)
        # A later failure of another pod gives the reaper a chance to tidy up.
        rule = sim.faults.add_error("delete", "pods", status=503, count=1)
        world.create_pod(0, 0)
        world.end_pod(0, "shutdown:1.26:terminated")
        await eventually(lambda: rule.fired, message="the second pod's failed DELETE")
        await settle(live)
        # Every key the queue keeps retry state for belongs to a pod that still exists.
        await eventually(
            lambda: (
                queue.retrying == sum(1 for key in world.present_keys() if queue.num_requeues(key))
            ),
            timeout=5,
            message="no retry state for pods that are gone",
        )
        assert world.check_safety() == []


async def test_a_watch_cut_after_it_was_established_does_not_grow_the_backoff(
    sim: Simulator, kubeconfig: Path
) -> None:
    """Each cut of an established stream is one failure, not one more in a series: without
    a reset on success, ten cuts push the wait before the next watch towards the 30 s cap."""
    backoff = Backoff(initial=0.01, cap=30.0, jitter=0.0)
    cache = PodCache(NODE_SHUTDOWN, WorkQueue())
    options = {"timeout_min": 30, "timeout_max": 30, "backoff": backoff, "pool_size": 2}
    async with watching(kubeconfig, cache, **options):
        for _ in range(10):
            await eventually(lambda: sim.store.watcher_count() == 1, timeout=5)
            sim.faults.cut_watches()
            await eventually(lambda: sim.store.watcher_count() == 0)
        await eventually(lambda: sim.store.watcher_count() == 1, timeout=5)
        assert backoff.failures <= 1
