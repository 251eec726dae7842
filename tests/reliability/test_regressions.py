"""Counterexamples the property tests and the soak found, as explicit histories.

Each test replays one history against the in-process daemon over real HTTP and checks
the same invariants as the property tests.
"""

from __future__ import annotations

from zombied.rules import Rule, RuleSet

from tests.helpers import eventually
from tests.reliability.live import running, settle

NODE_SHUTDOWN = RuleSet((Rule("node-shutdown", 0.0),))


async def test_keep_annotation_added_while_the_delete_is_in_flight() -> None:
    """A pod annotated ``zombied.io/keep`` after zombied decided must survive.

    The DELETE is on the wire (slow API server) when a user annotates the pod. A uid
    precondition alone lets the server delete the now-protected pod; the delete must
    also be conditional on the resourceVersion zombied judged.
    """
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        sim.faults.add_latency("delete", "pods", 0.5)
        name = world.end_pod(0, "shutdown:1.22:terminated")
        assert name is not None
        await eventually(lambda: world.delete_requests, message="a DELETE on the wire")
        world.set_keep(0, keep=True)
        await eventually(lambda: not live.daemon.queue.processing, timeout=5)
        assert world.check_safety() == []
        assert sim.store.get("pods", "team-a", name) is not None
        await settle(live)
        assert world.check_safety() == []


async def test_relabelled_out_of_scope_while_the_delete_is_in_flight() -> None:
    """A pod moved out of the label selector after zombied decided must survive."""
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        sim.faults.add_latency("delete", "pods", 0.5)
        name = world.end_pod(0, "shutdown:1.26:terminated")
        assert name is not None
        await eventually(lambda: world.delete_requests, message="a DELETE on the wire")
        world.relabel(0, precious=True)
        await eventually(lambda: not live.daemon.queue.processing, timeout=5)
        assert world.check_safety() == []
        assert sim.store.get("pods", "team-a", name) is not None
        await settle(live)
        assert world.check_safety() == []


async def test_replaced_under_the_same_name_while_the_delete_is_in_flight() -> None:
    """A StatefulSet pod recreated (new uid) while the zombie's DELETE is on the wire."""
    async with running(NODE_SHUTDOWN, pods=1) as live:
        world, sim = live.world, live.sim
        sim.faults.add_latency("delete", "pods", 0.5)
        name = world.end_pod(0, "shutdown:newest:succeeded")
        assert name is not None
        await eventually(lambda: world.delete_requests, message="a DELETE on the wire")
        world.replace(0, None)
        await eventually(lambda: not live.daemon.queue.processing, timeout=5)
        assert world.check_safety() == []
        replacement = sim.store.get("pods", "team-a", name)
        assert replacement is not None
        assert (replacement.get("status") or {}).get("phase") == "Running"
        await settle(live)
        assert world.check_safety() == []
