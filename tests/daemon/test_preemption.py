"""Node preemptions in a simulated cluster, kubelet statuses of every version."""

from __future__ import annotations

import pytest
from zombied.daemon import Daemon

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory
from tests.helpers import eventually


def deleted(sim: Simulator) -> set[tuple[str, str, str]]:
    return {
        (r.obj["metadata"]["namespace"], r.obj["metadata"]["name"], r.obj["metadata"]["uid"])
        for r in sim.deleted
        if not r.dry_run
    }


@pytest.mark.parametrize(
    ("version", "variant"),
    [
        ("1.20", "terminated"),
        ("1.21", "rejected"),
        ("1.22", "terminated"),
        ("1.24", "rejected"),
        ("1.26", "terminated"),
        ("newest", "succeeded"),
    ],
)
async def test_exactly_the_zombies_are_deleted(
    sim: Simulator, config: ConfigFactory, version: str, variant: str
) -> None:
    built = sim.cluster.build(nodes=3, pods=40)
    async with Daemon(config()) as daemon:
        await eventually(daemon.ready)
        result = sim.cluster.preempt(built.nodes[0], version=version, variant=variant)
        zombies = {(ref.namespace, ref.name, ref.uid) for ref in result.zombies}
        assert zombies
        await eventually(lambda: deleted(sim) >= zombies, timeout=20)
        # StatefulSets recreate their pods under the same name once the zombie is gone.
        recreated = sim.cluster.replace_deleted()
        await eventually(
            lambda: (
                daemon.cache.zombies == 0
                and len(daemon.queue) == 0
                and daemon.queue.processing == 0
            )
        )
    assert deleted(sim) == zombies
    for ref in recreated:
        survivor = sim.store.get("pods", ref.namespace, ref.name)
        assert survivor is not None
        assert survivor["metadata"]["uid"] == ref.uid
    running = [p for p in sim.store.list("pods") if p["status"].get("phase") == "Running"]
    assert len(running) >= 40 - len(zombies)
