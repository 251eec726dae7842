"""Random cluster histories against zombied: search for a wrong delete or a missed zombie.

A hypothesis state machine drives a `World` (pods created, ending every way, replaced,
deleted by others, annotated, relabelled; nodes preempted; watches cut, history
compacted, the API server restarted, error bursts, slow deletes) while the real daemon
runs in-process. After every step nothing was deleted that the oracle did not select,
each by the uid zombied decided on; at every ``settle`` and at the end, with faults
stopped, every due zombie is gone and no key of a gone pod is queued. The steps run on
the simulator's loop through a blocking portal; a failure's ``@reproduce_failure``
replays on the ``ClusterHistory`` class.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import anyio.from_thread
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from zombied.daemon import Daemon
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.conftest import make_config
from tests.helpers import eventually
from tests.reliability.profiles import budget, profile_name
from tests.reliability.world import (
    ENDINGS,
    EXCLUDED_NAMESPACES,
    LABEL_SELECTOR,
    LIVENESS_BOUND,
    NAMESPACES,
    OWNER_KINDS,
    SHUTDOWNS,
    World,
)


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


indexes = st.integers(min_value=0, max_value=63)
endings = st.sampled_from(ENDINGS)


@st.composite
def rule_sets(draw: st.DrawFn) -> RuleSet:
    """node-shutdown always on; the other rules sometimes; min ages 0 or 1 s.

    A min age of a whole second outlasts the kubelet's truncation of timestamps to the
    second, so a delete before due is always visible to the oracle.
    """
    ages = st.sampled_from([0.0, 0.0, 1.0])
    rules = [Rule("node-shutdown", draw(ages))]
    if draw(st.booleans()):
        rules.append(Rule("evicted", draw(ages)))
    if draw(st.booleans()):
        rules.append(Rule("failed", draw(ages)))
    excluded = frozenset({"Job"}) if draw(st.booleans()) else frozenset()
    return RuleSet(tuple(rules), excluded)


class ClusterHistory(RuleBasedStateMachine):
    portal: ClassVar[anyio.from_thread.BlockingPortal]

    def __init__(self) -> None:
        super().__init__()
        self.live: Live | None = None
        self._cm: Any = None

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        assert self.live is not None
        return self.portal.call(functools.partial(getattr(self.live.world, name), *args, **kwargs))

    @initialize(rules=rule_sets(), seed=st.integers(0, 2**16), pods=st.integers(4, 12))
    def start(self, rules: RuleSet, seed: int, pods: int) -> None:
        self._cm = self.portal.wrap_async_context_manager(running(rules, seed=seed, pods=pods))
        self.live = self._cm.__enter__()

    # -- the cluster ----------------------------------------------------------------

    @rule(ns=indexes, owner=indexes, precious=st.booleans())
    def create_pod(self, ns: int, owner: int, precious: bool) -> None:
        self._call("create_pod", ns % len(NAMESPACES), owner % len(OWNER_KINDS), precious=precious)

    # A pod that ended a while ago is due at once, whatever its rule's minimum age:
    # the history moves through time without the test waiting on a clock.
    @rule(
        index=indexes,
        ending=endings,
        ago=st.sampled_from([0.0, 0.0, 1.0]),
        protect=st.sampled_from([None, None, "keep", "precious"]),
    )
    def end_pod(self, index: int, ending: str, ago: float, protect: str | None) -> None:
        self._call("end_pod", index, ending, ago=ago, protect=protect)

    @rule(node=indexes, how=st.sampled_from(SHUTDOWNS))
    def preempt(self, node: int, how: tuple[str, str]) -> None:
        self._call("preempt", node, *how)

    @rule(index=indexes, ending=st.none() | endings)
    def replace(self, index: int, ending: str | None) -> None:
        self._call("replace", index, ending)

    @rule(index=indexes)
    def delete_by_other(self, index: int) -> None:
        self._call("delete_by_other", index)

    @rule(index=indexes, keep=st.booleans())
    def set_keep(self, index: int, keep: bool) -> None:
        self._call("set_keep", index, keep)

    @rule(index=indexes, precious=st.booleans())
    def relabel(self, index: int, precious: bool) -> None:
        self._call("relabel", index, precious)

    # -- the API server -------------------------------------------------------------

    def _on_sim(self, change: Callable[[Simulator], object]) -> None:
        assert self.live is not None
        self.portal.call(change, self.live.sim)

    @rule()
    def cut_watches(self) -> None:
        self._on_sim(lambda sim: sim.faults.cut_watches())

    @rule(cut=st.booleans())
    def compact(self, cut: bool) -> None:
        def compact(sim: Simulator) -> None:
            sim.compact()
            if cut:
                sim.faults.cut_watches()

        self._on_sim(compact)

    @rule(down_for=st.sampled_from([0.0, 0.0, 0.2]))
    def restart_api_server(self, down_for: float) -> None:
        self._on_sim(lambda sim: sim.restart(down_for))

    @rule(
        verb=st.sampled_from(["delete", "list", "watch", "*"]),
        status=st.sampled_from([500, 503, 429]),
        count=st.integers(1, 3),
        retry_after=st.sampled_from([0.05, 0.3]),
    )
    def error_burst(self, verb: str, status: int, count: int, retry_after: float) -> None:
        throttled = retry_after if status == 429 else None
        self._on_sim(
            lambda sim: sim.faults.add_error(
                verb, "pods", status=status, count=count, retry_after=throttled
            )
        )

    @rule(seconds=st.sampled_from([0.02, 0.1]))
    def slow_deletes(self, seconds: float) -> None:
        self._on_sim(lambda sim: sim.faults.add_latency("delete", "pods", seconds))

    @precondition(lambda self: self.live is not None)
    @rule()
    def settle(self) -> None:
        self._settle()

    def _settle(self) -> None:
        assert self.live is not None
        self.portal.call(settle, self.live)

    # -- the promises ---------------------------------------------------------------

    @invariant()
    def nothing_wrong_deleted(self) -> None:
        if self.live is None:
            return
        violations = self._call("check_safety")
        assert not violations, "\n".join(violations)

    def teardown(self) -> None:
        if self._cm is None:
            return
        try:
            self._settle()
            self.nothing_wrong_deleted()
        finally:
            self._cm.__exit__(None, None, None)
            self._cm = None
            self.live = None


@pytest.fixture(scope="module")
def portal() -> Iterator[anyio.from_thread.BlockingPortal]:
    with anyio.from_thread.start_blocking_portal("asyncio") as blocking_portal:
        yield blocking_portal


@pytest.mark.timeout(1800 if profile_name() == "nightly" else 600)
def test_random_cluster_histories(portal: anyio.from_thread.BlockingPortal) -> None:
    ClusterHistory.portal = portal
    run_state_machine_as_test(ClusterHistory, settings=budget())
