"""Spot nodes lost both ways in a simulated cluster: graceful shutdown, and back under the
same name, with the kubelet statuses of every version."""

from __future__ import annotations

import pytest
from zombied.daemon import Daemon
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory
from tests.helpers import eventually

BOTH = RuleSet((Rule("node-shutdown", 0.0), Rule("admission-rejected", 0.0)))
REJECTIONS = ("NodeAffinity", "OutOfcpu", "UnexpectedAdmissionError", "TaintToleration")


def deleted(sim: Simulator) -> set[str]:
    return {r.obj["metadata"]["uid"] for r in sim.deleted if not r.dry_run}


@pytest.mark.parametrize(
    ("version", "variant", "returned"),
    [
        ("1.20", "terminated", True),
        ("1.21", "rejected", False),
        ("1.22", "terminated", False),
        ("1.24", "rejected", False),
        ("1.25", "terminated", True),
        ("1.26", "terminated", False),
        ("1.27", "terminated", True),
        ("newest", "succeeded", True),
    ],
)
async def test_exactly_the_zombies_are_deleted(
    sim: Simulator, config: ConfigFactory, version: str, variant: str, returned: bool
) -> None:
    built = sim.cluster.build(nodes=4, pods=48)
    team_a = [p["metadata"]["name"] for p in sim.store.list("pods", "team-a")]
    crashed = next(name for name in team_a if name.startswith("report-"))
    async with Daemon(config(rules=BOTH)) as daemon:
        await eventually(daemon.ready)
        sim.cluster.fail("team-a", crashed)  # a crashed Job pod: no rule's business
        results = [sim.cluster.preempt(built.nodes[0], version=version, variant=variant)]
        if returned:
            results.append(sim.cluster.return_node(built.nodes[1], version, REJECTIONS))
            assert results[1].zombies
        zombies = {ref.uid for result in results for ref in result.zombies}
        await eventually(lambda: deleted(sim) >= zombies, timeout=20)
        # StatefulSets recreate their pods under the same name once the zombie is gone.
        recreated = sim.cluster.replace_deleted()
        await eventually(
            lambda: daemon.cache.zombies == 0 and len(daemon.queue) == daemon.queue.processing == 0
        )
    assert deleted(sim) == zombies
    crashed_pod = sim.store.get("pods", "team-a", crashed)
    assert crashed_pod is not None
    assert crashed_pod["status"]["phase"] == "Failed"
    # Every replacement and recreated pod still runs, unless it was rejected on the node
    # that came back: a zombie like the others.
    survivors = [*recreated, *(ref for result in results for ref in result.replacements)]
    for ref in survivors:
        if ref.uid not in zombies:
            survivor = sim.store.get("pods", ref.namespace, ref.name)
            assert survivor is not None
            assert survivor["metadata"]["uid"] == ref.uid
