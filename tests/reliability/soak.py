"""Chaos soak: nodes preempted non-stop while the API server and the leader misbehave.

Two zombied replicas with leader election run in-process against the simulator. A
cluster driver preempts a node every fraction of a second (controllers replace the
pods) and ends, replaces, annotates, relabels and deletes single pods; a chaos driver
cuts watches, injects 5xx and 429 bursts (with Retry-After), latency, compactions and
API server restarts, and kills and restarts the leader (abruptly, or with a drain as on
SIGTERM). Safety is checked continuously; at the end the faults stop and every due
zombie must be gone within a bound. The run ends with ONE summary line.

``python -m tests.reliability.soak --seconds N`` runs it (``SOAK_S`` is the default for
``--seconds``, else 600); ``test_soak.py`` runs it under pytest (``SOAK_S``, else 60 s).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import random
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from zombied.daemon import Daemon
from zombied.rules import Rule, RuleSet
from zombied.sim import Simulator

from tests.helpers import eventually
from tests.reliability.live import LIVENESS_BOUND, config_for
from tests.reliability.world import ENDINGS, SHUTDOWNS, World

RULES = RuleSet((Rule("node-shutdown", 0.0), Rule("evicted", 0.0)), frozenset({"Job"}))
LEASE = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.4}
POPULATION = 60


@dataclass
class SoakResult:
    seconds: float
    zombies: int = 0
    reaped: int = 0
    missed: int = 0
    stale: int = 0
    wrong: int = 0
    api_restarts: int = 0
    leader_kills: int = 0
    rss_start: int = 0
    rss_end: int = 0
    #: Growth of memory allocated by zombied's own modules (``--trace-memory`` only).
    zombied_heap_growth: int | None = None
    faults: dict[str, int] = field(default_factory=dict)
    actions: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1

    def line(self) -> str:
        faults = ",".join(f"{k}={v}" for k, v in sorted(self.faults.items()))
        heap = ""
        if self.zombied_heap_growth is not None:
            heap = f" zombied_heap_kib={self.zombied_heap_growth / 1024:+.0f}"
        return (
            f"soak {self.seconds:.0f}s: zombies={self.zombies} reaped={self.reaped} "
            f"missed={self.missed} wrong={self.wrong} stale_keys={self.stale} "
            f"restarts=api:{self.api_restarts},leader:{self.leader_kills} "
            f"rss_mib={self.rss_start / 2**20:.1f}->{self.rss_end / 2**20:.1f}{heap} "
            f"faults[{faults}]"
        )


class Replica:
    """One zombied replica that can be killed (cancelled or drained) and started again."""

    def __init__(self, name: str, kubeconfig: Path) -> None:
        self.name = name
        self.config = config_for(kubeconfig, RULES, leader_elect=True, **LEASE)
        self.daemon: Daemon | None = None
        self._scope = anyio.CancelScope()
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._done.set()

    @property
    def running(self) -> bool:
        return self.daemon is not None

    @property
    def leading(self) -> bool:
        return self.daemon is not None and self.daemon.leadership.leading

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._stop, self._done = anyio.Event(), anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with Daemon(self.config, identity=self.name) as daemon:
                    self.daemon = daemon
                    task_status.started()
                    await self._stop.wait()
        finally:
            self.daemon = None
            self._done.set()

    def kill(self, *, drain: bool) -> None:
        """Stop the replica: with ``drain`` as on SIGTERM, else abruptly."""
        self.daemon = None
        if drain:
            self._stop.set()
        else:
            self._scope.cancel()

    async def restart(self, tg: anyio.abc.TaskGroup, delay: float) -> None:
        """Start again ``delay`` seconds after the previous run ended."""
        await self._done.wait()
        await anyio.sleep(delay)
        await tg.start(self.run)

    async def stopped(self) -> None:
        await self._done.wait()


async def run_soak(
    seconds: float, *, seed: int = 0, quiet: bool = False, trace_memory: bool = False
) -> SoakResult:
    """Run the soak for ``seconds`` of chaos; return the figures.

    The replicas share the process with the simulator, whose request log, history and
    deleted objects grow by design: ``trace_memory`` also measures the growth of what
    zombied's own modules allocated (slower).
    """
    rng = random.Random(seed)
    result = SoakResult(seconds)
    process = psutil.Process()
    sim = Simulator(bookmark_interval=0.5, seed=seed, history_window=5_000)
    world = World(sim, RULES, seed=seed)
    with tempfile.TemporaryDirectory(prefix="zombied-soak-") as tmp:
        async with sim, anyio.create_task_group() as tg:
            world.start(nodes=6, pods=POPULATION)
            kubeconfig = sim.write_kubeconfig(Path(tmp) / "kubeconfig")
            replicas = [Replica(f"zombied-{i}", kubeconfig) for i in range(2)]
            for replica in replicas:
                await tg.start(replica.run)
            if trace_memory:
                tracemalloc.start()
            gc.collect()
            result.rss_start = process.memory_info().rss
            start_heap = tracemalloc.take_snapshot() if trace_memory else None
            with anyio.move_on_after(seconds):
                async with anyio.create_task_group() as drivers:
                    drivers.start_soon(_cluster_driver, world, rng)
                    drivers.start_soon(_chaos_driver, sim, replicas, tg, rng, result)
                    drivers.start_soon(_safety_checker, world)
            await _settle(sim, world, replicas, tg, result)
            gc.collect()
            result.rss_end = process.memory_info().rss
            if start_heap is not None:
                result.zombied_heap_growth = _own_growth(start_heap, tracemalloc.take_snapshot())
                tracemalloc.stop()
            for replica in replicas:
                replica.kill(drain=True)
            for replica in replicas:
                await replica.stopped()
            tg.cancel_scope.cancel()  # latency removals still sleeping
        world.check_safety()
    result.zombies = world.figures.zombies
    result.reaped = world.figures.reaped
    result.wrong = world.figures.wrong
    result.violations = list(world.violations)
    result.actions = dict(world.figures.actions)
    if not quiet:
        for violation in result.violations[:20]:
            print(f"WRONG: {violation}", file=sys.stderr)
        for key in result.left[:20]:
            print(f"MISSED: {key}", file=sys.stderr)
    return result


async def _cluster_driver(world: World, rng: random.Random) -> None:
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
        running = sum(
            1
            for p in world.sim.store.list("pods")
            if (p.get("status") or {}).get("phase") == "Running"
        )
        if running < POPULATION:
            world.create_pod(index, index >> 4, precious=rng.random() < 0.1)


async def _chaos_driver(
    sim: Simulator,
    replicas: list[Replica],
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
            status = rng.choice([500, 502, 503, 504])
            faults.add_error(
                rng.choice(["*", "delete", "list", "watch"]),
                "pods",
                status=status,
                fraction=rng.choice([0.3, 0.7, 1.0]),
                count=rng.randint(1, 8),
            )
            result.count("5xx")
        elif roll < 0.45:
            faults.add_error(
                rng.choice(["*", "delete"]),
                "*",
                status=429,
                retry_after=rng.choice([0.2, 0.5, 1.0]),
                count=rng.randint(1, 10),
            )
            result.count("429")
        elif roll < 0.55:
            rule = faults.add_latency("*", "*", rng.choice([0.01, 0.05, 0.2]))
            tg.start_soon(_remove_later, faults, rule, rng.uniform(0.5, 3.0))
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
            leaders = [r for r in replicas if r.leading] or [r for r in replicas if r.running]
            if leaders:
                victim = rng.choice(leaders)
                victim.kill(drain=rng.random() < 0.5)
                result.leader_kills += 1
                tg.start_soon(victim.restart, tg, rng.uniform(0.5, 4.0))
        else:
            faults.cut_watches_after(rng.randint(1, 20))
            result.count("cut-after")


async def _remove_later(faults: object, rule: object, delay: float) -> None:
    await anyio.sleep(delay)
    faults.remove(rule)  # type: ignore[attr-defined]


async def _safety_checker(world: World) -> None:
    while True:
        await anyio.sleep(0.2)
        world.check_safety()


async def _settle(
    sim: Simulator,
    world: World,
    replicas: list[Replica],
    tg: anyio.abc.TaskGroup,
    result: SoakResult,
) -> None:
    """Stop the faults; bring every replica up; wait for the due zombies to be gone."""
    sim.faults.clear()
    deadline = time.monotonic() + LIVENESS_BOUND + 2 * LEASE["lease_duration"] + 20
    # Killed replicas come back within a few seconds (their restart is scheduled).
    with contextlib.suppress(AssertionError):
        await eventually(lambda: all(r.running for r in replicas), timeout=30, interval=0.1)

    def stuck() -> list[str]:
        left = world.pending_zombies()
        for replica in replicas:
            if replica.daemon is not None:
                queue, cache = replica.daemon.queue, replica.daemon.cache
                left += [
                    f"stale key {key}"
                    for key in world.gone_keys(k for k in world.keys if k in queue or k in cache)
                ]
        return left

    with contextlib.suppress(AssertionError):
        await eventually(lambda: not stuck(), timeout=deadline - time.monotonic(), interval=0.1)
    left = stuck()
    result.left = left
    result.missed = sum(1 for key in left if not key.startswith("stale key"))
    result.stale = len(left) - result.missed


def _own_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> int:
    """Bytes more held by allocations made in zombied's modules (not the simulator's)."""
    own = f"{os.sep}zombied{os.sep}"
    sim = f"{own}sim{os.sep}"
    return sum(
        stat.size_diff
        for stat in after.compare_to(before, "filename")
        if own in str(stat.traceback[0].filename) and sim not in str(stat.traceback[0].filename)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("SOAK_S") or 600), help="chaos time"
    )
    parser.add_argument("--seed", type=int, default=int(time.time()), help="randomness seed")
    parser.add_argument(
        "--trace-memory", action="store_true", help="also measure zombied's own heap growth"
    )
    args = parser.parse_args(argv)
    run = functools.partial(run_soak, args.seconds, seed=args.seed, trace_memory=args.trace_memory)
    result = anyio.run(run, backend="asyncio")
    print(result.line() + f" seed={args.seed}")
    return 0 if result.missed == 0 and result.wrong == 0 and result.stale == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
