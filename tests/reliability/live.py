"""zombied in-process against a `World` (`running`), and `settle`: stop every fault and
wait until every due zombie is deleted and no key of a gone pod is queued."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zombied.daemon import Daemon
from zombied.rules import RuleSet

from kubesim import Simulator
from tests.daemon.conftest import make_config
from tests.helpers import eventually
from tests.reliability.world import EXCLUDED_NAMESPACES, LABEL_SELECTOR, World

#: Once faults stop, every due zombie must be gone within this many seconds: the
#: watch backoff cap (30 s) is the longest zombied may legitimately wait.
LIVENESS_BOUND = 45.0


@dataclass
class Live:
    world: World
    daemon: Daemon

    @property
    def sim(self) -> Simulator:
        return self.world.sim

    def queued_gone(self) -> list[str]:
        """Invariant (4): keys queued (or cached) for pods that are gone."""
        queue, cache = self.daemon.queue, self.daemon.cache
        queued = [key for key in self.world.keys if key in queue or key in cache]
        return self.world.gone_keys(queued)

    def stuck(self) -> dict[str, list[str]]:
        """What keeps the system from being settled; empty when settled."""
        problems = {
            "due zombies not deleted": self.world.pending_zombies(),
            "queued keys of pods that are gone": self.queued_gone(),
        }
        return {what: keys for what, keys in problems.items() if keys}


def config_for(kubeconfig: Path, rules: RuleSet, **changes: Any) -> Any:
    """The daemon's configuration in these tests: the World's selector and exclusions."""
    settings: dict[str, Any] = {
        "rules": rules,
        "label_selector": LABEL_SELECTOR,
        "exclude_namespaces": EXCLUDED_NAMESPACES,
        "max_in_flight": 4,
    }
    settings.update(changes)
    return make_config(kubeconfig, **settings)


@asynccontextmanager
async def running(rules: RuleSet, *, seed: int = 0, pods: int = 12) -> AsyncIterator[Live]:
    """A simulator, a `World` with a few nodes and Running pods, and zombied watching it."""
    sim = Simulator(bookmark_interval=0.2, seed=seed)
    world = World(sim, rules, seed=seed)
    with tempfile.TemporaryDirectory(prefix="zombied-reliability-") as tmp:
        async with sim:
            world.start(pods=pods)
            kubeconfig = sim.write_kubeconfig(Path(tmp) / "kubeconfig")
            async with Daemon(config_for(kubeconfig, rules)) as daemon:
                live = Live(world, daemon)
                await eventually(daemon.ready, timeout=10, message="zombied ready")
                yield live
                # Leave no fault behind that would slow the drain.
                sim.faults.clear()


async def settle(live: Live, timeout: float = LIVENESS_BOUND) -> None:  # noqa: ASYNC109
    """Stop every fault and wait until invariants (3) and (4) hold."""
    live.sim.faults.clear()

    def settled() -> bool:
        stuck = live.stuck()
        assert not stuck, stuck  # what was still stuck, in the timeout's message
        return True

    await eventually(
        settled,
        timeout=timeout,
        interval=0.02,
        message="zombied to delete every due zombie and forget every gone pod",
    )
