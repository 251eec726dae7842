"""Chaos soak: nodes preempted non-stop while the API server and the leader misbehave.

Two ``zombied run --leader-elect`` processes run against the in-process simulator for
``SOAK_S`` seconds (60 by default). A cluster driver preempts nodes and ends, replaces,
annotates, relabels and deletes single pods; a chaos driver cuts watches, injects 5xx
and 429 bursts, latency, compactions and API server restarts, and kills the leader
(SIGKILL: the lease is not released; or SIGTERM: a drain, which must exit 0). Safety is
checked all along; once the faults stop, every due zombie must be gone within a bound.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.test_cli import Running, zombied_run
from tests.helpers import eventually
from tests.reliability.world import (
    ENDINGS,
    EXCLUDED_NAMESPACES,
    LABEL_SELECTOR,
    LIVENESS_BOUND,
    SHUTDOWNS,
    World,
)

SECONDS = float(os.environ.get("SOAK_S") or 60)
SEED = int(os.environ.get("SOAK_SEED") or 0)
RULES = RuleSet((Rule("node-shutdown", 0.0), Rule("evicted", 0.0)), frozenset({"Job"}))
LEASE_DURATION = 3.0
ARGS = (
    "--leader-elect",
    "--lease-namespace=default",
    f"--lease-duration={LEASE_DURATION}",
    "--renew-deadline=2",
    "--retry-period=0.4",
    "--rules=" + ",".join(f"{rule.name}={rule.min_age}" for rule in RULES.rules),
    "--exclude-owner-kinds=" + ",".join(sorted(RULES.exclude_owner_kinds)),
    "--exclude-namespaces=" + ",".join(EXCLUDED_NAMESPACES),
    f"--label-selector={LABEL_SELECTOR}",
    "--qps=200",
    "--burst=100",
    "--drain-timeout=5",
)
POPULATION = 60
#: Like kube-controller-manager's --terminated-pod-gc-threshold (12,500), scaled down.
TERMINAL_GC_THRESHOLD = 300


@dataclass
class SoakResult:
    api_restarts: int = 0
    leader_kills: int = 0
    bad_exits: list[int] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1


class ProcessReplica:
    """One ``zombied run --leader-elect`` process, restarted after each kill."""

    def __init__(self, name: str, kubeconfig: Path, sim: Simulator) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.sim = sim
        self.running: Running | None = None
        self.ready = False
        #: Exit codes of runs ended with SIGTERM (must all be 0).
        self.drain_exits: list[int] = []
        self._drained = False
        self.done = anyio.Event()
        self.done.set()

    @property
    def leading(self) -> bool:
        lease = self.sim.store.get("leases", "default", "zombied") or {}
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        return self.ready and holder.startswith(f"{self.name}-")

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self.done, self.ready, self._drained = anyio.Event(), False, False
        try:
            async with zombied_run(self.kubeconfig, *ARGS, env={"POD_NAME": self.name}) as run:
                self.running = run
                process = run.process
                # Under chaos the first LIST may fail again and again: a slow start.
                started = lambda: run.events("watch.synced") or process.returncode is not None  # noqa: E731
                await eventually(started, timeout=600, interval=0.05)
                self.ready = process.returncode is None
                task_status.started()
                code = await process.wait()
                if self._drained:
                    self.drain_exits.append(code)
        finally:
            self.ready = False
            self.done.set()

    def kill(self, *, drain: bool) -> None:
        """SIGTERM (drain, exit 0 expected) or SIGKILL (a crash: the lease is not released)."""
        if not self.ready or self.running is None:
            return
        self._drained = drain
        self.ready = False
        self.running.process.send_signal(signal.SIGTERM if drain else signal.SIGKILL)

    async def restart(self, tg: anyio.abc.TaskGroup, delay: float) -> None:
        await self.done.wait()
        await anyio.sleep(delay)
        await tg.start(self.run)


def phases(world: World) -> list[str]:
    return [str((pod.get("status") or {}).get("phase")) for pod in world.sim.store.list("pods")]


async def cluster_driver(world: World, rng: random.Random) -> None:
    """Preempt a node about every 0.5 s; single pods end, get replaced, annotated..."""
    while True:
        await anyio.sleep(rng.uniform(0.02, 0.1))  # pacing, not synchronisation
        roll = rng.random()
        index = rng.randrange(1 << 16)
        if roll < 0.1:
            world.preempt(index, *rng.choice(SHUTDOWNS), remove_node=True)
        elif roll < 0.35:
            world.end_pod(index, rng.choice(ENDINGS))
        elif roll < 0.45:
            world.replace(index, rng.choice([None, None, *ENDINGS]))
        elif roll < 0.55:
            world.set_keep(index, rng.random() < 0.7)
        elif roll < 0.65:
            world.relabel(index, rng.random() < 0.5)
        elif roll < 0.7:
            world.delete_by_other(index)
        elif roll < 0.8:
            world.delete_by_other(index, terminal=True)  # users clean up old pods
        now = phases(world)
        if now.count("Failed") + now.count("Succeeded") > TERMINAL_GC_THRESHOLD:
            world.delete_by_other(index, terminal=True)  # the PodGC, scaled down
        if now.count("Running") < POPULATION:
            world.create_pod(index, index >> 4, precious=rng.random() < 0.1)


async def remove_later(sim: Simulator, rule: Any, delay: float) -> None:
    await anyio.sleep(delay)
    sim.faults.remove(rule)


async def chaos_driver(
    sim: Simulator,
    replicas: list[ProcessReplica],
    tg: anyio.abc.TaskGroup,
    rng: random.Random,
    result: SoakResult,
) -> None:
    faults = sim.faults
    while True:
        await anyio.sleep(rng.uniform(0.3, 1.5))  # pacing, not synchronisation
        roll = rng.random()
        if roll < 0.2:
            faults.cut_watches()
            result.count("cut")
        elif roll < 0.35:
            # An outage of a second or two, not a number of failures: a client that
            # backs off must not be able to stretch it.
            rule = faults.add_error(
                rng.choice(["*", "delete", "list", "watch"]),
                "pods",
                status=rng.choice([500, 502, 503, 504]),
                fraction=rng.choice([0.3, 0.7, 1.0]),
            )
            tg.start_soon(remove_later, sim, rule, rng.uniform(0.2, 3.0))
            result.count("5xx")
        elif roll < 0.45:
            rule = faults.add_error(
                rng.choice(["*", "delete"]),
                "*",
                status=429,
                retry_after=rng.choice([0.2, 0.5, 1.0]),
                fraction=rng.choice([0.5, 1.0]),
            )
            tg.start_soon(remove_later, sim, rule, rng.uniform(0.2, 2.0))
            result.count("429")
        elif roll < 0.55:
            rule = faults.add_latency("*", "*", rng.choice([0.01, 0.05, 0.2]))
            tg.start_soon(remove_later, sim, rule, rng.uniform(0.5, 3.0))
            result.count("latency")
        elif roll < 0.65:
            sim.compact()
            if rng.random() < 0.5:
                faults.cut_watches()
            result.count("compaction")
        elif roll < 0.75:
            await sim.restart(down_for=rng.choice([0.0, 0.0, 0.2, 1.0]))
            result.api_restarts += 1
        elif roll < 0.85:
            leaders = [r for r in replicas if r.leading] or [r for r in replicas if r.ready]
            if leaders:
                victim = rng.choice(leaders)
                victim.kill(drain=rng.random() < 0.5)
                result.leader_kills += 1
                tg.start_soon(victim.restart, tg, rng.uniform(0.5, 4.0))
        else:
            faults.cut_watches_after(rng.randint(1, 20))
            result.count("cut-after")


async def safety_checker(world: World) -> None:
    while True:
        await anyio.sleep(0.2)
        world.check_safety()


async def settle(sim: Simulator, world: World, replicas: list[ProcessReplica]) -> list[str]:
    """Stop the faults; wait for every replica to be up and the due zombies to be gone."""
    sim.faults.clear()
    # Killed replicas come back within a few seconds (their restart is scheduled).
    with contextlib.suppress(AssertionError):
        await eventually(lambda: all(r.ready for r in replicas), timeout=30, interval=0.1)
    with contextlib.suppress(AssertionError):
        bound = LIVENESS_BOUND + 2 * LEASE_DURATION + 20
        await eventually(lambda: not world.pending_zombies(), timeout=bound, interval=0.1)
    return world.pending_zombies()


async def run_soak(seconds: float, seed: int, tmp: Path) -> tuple[SoakResult, World]:
    rng = random.Random(seed)
    result = SoakResult()
    sim = Simulator(bookmark_interval=0.5, seed=seed, history_window=5_000)
    world = World(sim, RULES, seed=seed)
    async with sim, anyio.create_task_group() as tg:
        world.start(nodes=6, pods=POPULATION)
        kubeconfig = sim.write_kubeconfig(tmp / "kubeconfig")
        replicas = [ProcessReplica(f"zombied-{i}", kubeconfig, sim) for i in range(2)]
        for replica in replicas:
            await tg.start(replica.run)
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as drivers:
                drivers.start_soon(cluster_driver, world, rng)
                drivers.start_soon(chaos_driver, sim, replicas, tg, rng, result)
                drivers.start_soon(safety_checker, world)
        result.left = await settle(sim, world, replicas)
        for replica in replicas:
            replica.kill(drain=True)
        with anyio.move_on_after(30):
            for replica in replicas:
                await replica.done.wait()
        result.bad_exits = [code for r in replicas for code in r.drain_exits if code != 0]
        tg.cancel_scope.cancel()  # latency removals still sleeping
    world.check_safety()
    if world.violations or result.left or result.bad_exits:
        for replica in replicas:
            tail = replica.running.logs[-20:] if replica.running else []
            print(f"--- {replica.name} log tail ---", *tail, sep="\n", file=sys.stderr)
    return result, world


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 300)
async def test_chaos_soak() -> None:
    with tempfile.TemporaryDirectory(prefix="zombied-soak-") as tmp:
        result, world = await run_soak(SECONDS, SEED, Path(tmp))
    print(
        f"\nsoak {SECONDS:.0f}s seed={SEED}: zombies={world.figures.zombies} "
        f"reaped={world.figures.reaped} restarts=api:{result.api_restarts},"
        f"leader:{result.leader_kills} faults={result.faults}"
    )
    assert world.violations == []
    assert result.left == []
    assert result.bad_exits == []
    assert world.figures.zombies > 0
    assert world.figures.reaped > 0
