"""Counterexamples the property tests and the soak found, as explicit histories.

Each test replays one history against the in-process daemon over real HTTP and checks
the same invariants as the property tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.kube import open_api_client
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet
from zombied.watch import Scope, Watcher

from kubesim import Simulator
from tests.helpers import eventually
from tests.reliability.live import Live, running, settle

NODE_SHUTDOWN = RuleSet((Rule("node-shutdown", 0.0),))


async def change_while_delete_in_flight(
    live: Live, variant: str, change: Callable[[], object]
) -> str:
    """End pod 0 as ``variant`` and ``change`` it while zombied's DELETE is on the wire.

    Returns the pod's name once zombied has finished with it and nothing unsafe happened.
    """
    world, sim = live.world, live.sim
    sim.faults.add_latency("delete", "pods", 0.5)
    name = world.end_pod(0, variant)
    assert name is not None
    await eventually(lambda: world.delete_requests, message="a DELETE on the wire")
    change()
    await eventually(lambda: not live.daemon.queue.processing, timeout=5)
    assert world.check_safety() == []
    return name


async def test_keep_annotation_added_while_the_delete_is_in_flight() -> None:
    """A pod annotated ``zombied.io/keep`` after zombied decided must survive.

    The DELETE is on the wire (slow API server) when a user annotates the pod. A uid
    precondition alone lets the server delete the now-protected pod; the delete must
    also be conditional on the resourceVersion zombied judged.
    """
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        name = await change_while_delete_in_flight(
            live, "shutdown:1.22:terminated", lambda: world.set_keep(0, keep=True)
        )
        assert sim.store.get("pods", "team-a", name) is not None
        await settle(live)
        assert world.check_safety() == []


async def test_relabelled_out_of_scope_while_the_delete_is_in_flight() -> None:
    """A pod moved out of the label selector after zombied decided must survive."""
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        name = await change_while_delete_in_flight(
            live, "shutdown:1.26:terminated", lambda: world.relabel(0, precious=True)
        )
        assert sim.store.get("pods", "team-a", name) is not None
        await settle(live)
        assert world.check_safety() == []


async def test_replaced_under_the_same_name_while_the_delete_is_in_flight() -> None:
    """A StatefulSet pod recreated (new uid) while the zombie's DELETE is on the wire."""
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        name = await change_while_delete_in_flight(
            live, "shutdown:newest:succeeded", lambda: world.replace(0, None)
        )
        replacement = sim.store.get("pods", "team-a", name)
        assert replacement is not None
        assert (replacement.get("status") or {}).get("phase") == "Running"
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
    """Connections that drop now and then must not make the watch blind for longer and longer.

    Each cut of an established stream is one failure, not one more in a series: without
    a reset on success, ten cuts within a minute push the wait before the next watch
    towards the 30 s cap, and zombies go unseen that long.
    """
    backoff = Backoff(initial=0.01, cap=30.0, jitter=0.0)
    cache = PodCache(NODE_SHUTDOWN, WorkQueue())
    async with open_api_client(str(kubeconfig), None, pool_size=2) as api:
        watcher = Watcher(api, Scope(None), cache, timeout_min=30, timeout_max=30, backoff=backoff)
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run)
            for _ in range(10):
                await eventually(lambda: sim.store.watcher_count() == 1, timeout=5)
                sim.faults.cut_watches()
                await eventually(lambda: sim.store.watcher_count() == 0)
            await eventually(lambda: sim.store.watcher_count() == 1, timeout=5)
            assert backoff.failures <= 1
            tg.cancel_scope.cancel()
