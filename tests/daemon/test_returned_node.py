"""A Spot node lost both ways: graceful shutdown, and back under the same name."""

from __future__ import annotations

import pytest
from zombied.daemon import Daemon
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory
from tests.helpers import eventually

BOTH = RuleSet((Rule("node-shutdown", 0.0), Rule("admission-rejected", 0.0)))


def deleted(sim: Simulator) -> set[str]:
    return {r.obj["metadata"]["uid"] for r in sim.deleted if not r.dry_run}


@pytest.mark.parametrize("version", ["1.20", "1.25", "1.27", "newest"])
async def test_both_kinds_of_zombie_and_nothing_else(
    sim: Simulator, config: ConfigFactory, version: str
) -> None:
    built = sim.cluster.build(nodes=4, pods=48)
    team_a = [p["metadata"]["name"] for p in sim.store.list("pods", "team-a")]
    crashed = next(name for name in team_a if name.startswith("report-"))
    async with Daemon(config(rules=BOTH)) as daemon:
        await eventually(daemon.ready)
        sim.cluster.fail("team-a", crashed)  # a crashed Job pod: no rule's business
        shut = sim.cluster.preempt(built.nodes[0], version=version)
        back = sim.cluster.return_node(
            built.nodes[1],
            version=version,
            reasons=("NodeAffinity", "OutOfcpu", "UnexpectedAdmissionError", "TaintToleration"),
        )
        zombies = {ref.uid for ref in (*shut.zombies, *back.zombies)}
        assert {ref.uid for ref in back.zombies}
        await eventually(lambda: deleted(sim) >= zombies, timeout=20)
        sim.cluster.replace_deleted()
        await eventually(lambda: daemon.cache.zombies == 0 and len(daemon.queue) == 0)
    assert deleted(sim) == zombies
    crashed_pod = sim.store.get("pods", "team-a", crashed)
    assert crashed_pod is not None
    assert crashed_pod["status"]["phase"] == "Failed"
    # A replacement the shutdown put on the node that later came back was rejected
    # there too: a zombie like the others. Every other replacement still runs.
    for ref in (*shut.replacements, *back.replacements):
        if ref.uid not in zombies:
            replacement = sim.store.get("pods", ref.namespace, ref.name)
            assert replacement is not None
            assert replacement["metadata"]["uid"] == ref.uid
