"""Chaos soak: nodes preempted non-stop while the API server and the leader misbehave.

Two ``zombied run --leader-elect`` processes run against the in-process simulator. A
cluster driver preempts a node every fraction of a second (controllers replace the
pods) and ends, replaces, annotates, relabels and deletes single pods; a chaos driver
cuts watches, injects 5xx and 429 bursts (with Retry-After), latency, compactions and
API server restarts, and kills and restarts the leader (SIGKILL: the lease is not
released; or SIGTERM: a drain, which must exit 0). Safety is checked continuously; at
the end the faults stop and every due zombie must be gone within a bound. The run ends
with ONE summary line. Leaders come and go, so memory over time is measured on a third
process, an observer in ``--dry-run`` that decides like the others and is never killed:
its RSS at start and end (terminal pods nobody deletes stay cached, so a little growth
is expected while they pile up; users here clean some up, as they do).

``python -m tests.reliability.soak --seconds N`` runs it (``SOAK_S`` is the default for
``--seconds``, else 600); ``test_soak.py`` runs it under pytest (``SOAK_S``, else 60 s).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.helpers import eventually
from tests.reliability.live import LIVENESS_BOUND
from tests.reliability.world import (
    ENDINGS,
    EXCLUDED_NAMESPACES,
    LABEL_SELECTOR,
    SHUTDOWNS,
    World,
)

RULES = RuleSet((Rule("node-shutdown", 0.0), Rule("evicted", 0.0)), frozenset({"Job"}))
LEASE = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.4}
POPULATION = 60
#: Like kube-controller-manager's --terminated-pod-gc-threshold (12,500), scaled down:
#: the terminal pods zombied must remember stop growing, so its memory must too.
TERMINAL_GC_THRESHOLD = 300


@dataclass
class SoakResult:
    seconds: float
    zombies: int = 0
    reaped: int = 0
    missed: int = 0
    wrong: int = 0
    api_restarts: int = 0
    leader_kills: int = 0
    rss_start: int = 0
    rss_end: int = 0
    rss_uptime: float = 0.0
    leader_rss: int = 0
    rss_mid: int = 0
    terminal_pods: int = 0
    slow_starts: int = 0
    bad_exits: list[int] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    actions: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missed or self.wrong or self.violations or self.bad_exits)

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1

    def line(self) -> str:
        faults = ",".join(f"{k}={v}" for k, v in sorted(self.faults.items()))
        return (
            f"soak {self.seconds:.0f}s: zombies={self.zombies} reaped={self.reaped} "
            f"missed={self.missed} wrong={self.wrong} bad_exits={len(self.bad_exits)} "
            f"slow_starts={self.slow_starts} "
            f"restarts=api:{self.api_restarts},leader:{self.leader_kills} "
            f"rss_mib={self.rss_start / 2**20:.1f}->{self.rss_mid / 2**20:.1f}"
            f"->{self.rss_end / 2**20:.1f}(observer: start,half-time,end over "
            f"{self.rss_uptime:.0f}s;leaders<={self.leader_rss / 2**20:.1f}) "
            f"terminal_pods_left={self.terminal_pods} "
            f"faults[{faults}]"
        )


class ProcessReplica:
    """One ``python -m zombied run --leader-elect`` process; killed with SIGKILL or SIGTERM."""

    def __init__(
        self, name: str, kubeconfig: Path, sim: Simulator, log_dir: Path, *, observer: bool = False
    ) -> None:
        self.name = name
        self.sim = sim
        self.log = log_dir / f"{name}.log"
        self.command = [
            sys.executable,
            "-m",
            "zombied",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--leader-elect",
            "--lease-namespace",
            "default",
            "--lease-duration",
            str(LEASE["lease_duration"]),
            "--renew-deadline",
            str(LEASE["renew_deadline"]),
            "--retry-period",
            str(LEASE["retry_period"]),
            "--rules",
            ",".join(f"{rule.name}={rule.min_age}" for rule in RULES.rules),
            "--exclude-owner-kinds",
            ",".join(sorted(RULES.exclude_owner_kinds)),
            "--exclude-namespaces",
            ",".join(EXCLUDED_NAMESPACES),
            "--label-selector",
            LABEL_SELECTOR,
            "--qps",
            "200",
            "--burst",
            "100",
            "--drain-timeout",
            "5",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ]
        if observer:
            # Decides like the others, deletes nothing: one process that lives through the
            # whole soak, so its memory shows growth over time.
            leader = self.command.index("--leader-elect")
            del self.command[leader : leader + 9]
            self.command += ["--dry-run", "client"]
        self.process: anyio.abc.Process | None = None
        self.ready = False
        self.started_at = 0.0
        self.rss_start = 0
        #: Exit codes of runs ended with SIGTERM (must all be 0).
        self.drain_exits: list[int] = []
        #: Log tails of starts that took more than a minute to list.
        self.stalls: list[str] = []
        self._drained = False
        self._done = anyio.Event()
        self._done.set()

    @property
    def running(self) -> bool:
        return self.process is not None and self.ready

    @property
    def leading(self) -> bool:
        lease = self.sim.store.get("leases", "default", "zombied") or {}
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        return self.running and holder.startswith(f"{self.name}-")

    def rss(self) -> int:
        if self.process is None:
            return 0
        try:
            return int(psutil.Process(self.process.pid).memory_info().rss)
        except psutil.Error:
            return 0

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._done, self.ready, self._drained = anyio.Event(), False, False
        env = {**os.environ, "POD_NAME": self.name, "PYTHONUNBUFFERED": "1"}
        try:
            with self.log.open("ab") as log:
                async with await anyio.open_process(
                    self.command, stdout=log, stderr=log, env=env
                ) as process:
                    self.process = process
                    mark = self.log.stat().st_size

                    def started() -> bool:
                        synced = b'"watch.synced"' in self.log.read_bytes()[mark:]
                        return synced or process.returncode is not None

                    try:
                        await eventually(started, timeout=60, interval=0.05)
                    except AssertionError:
                        # Slow under chaos (the LIST failing again and again): note it, with
                        # the log to tell why, and keep waiting.
                        tail = self.log.read_bytes()[mark:][-4000:].decode(errors="replace")
                        self.stalls.append(tail)
                        await eventually(started, timeout=600, interval=0.1)
                    self.ready = process.returncode is None
                    self.started_at = time.monotonic()
                    self.rss_start = self.rss()
                    task_status.started()
                    code = await process.wait()
                    if self._drained:
                        self.drain_exits.append(code)
        finally:
            self.process = None
            self.ready = False
            self._done.set()

    def kill(self, *, drain: bool) -> None:
        """SIGTERM (drain, exit 0 expected) or SIGKILL (a crash: the lease is not released)."""
        if self.process is None or self.process.returncode is not None:
            return
        self._drained = drain
        self.ready = False
        self.process.send_signal(signal.SIGTERM if drain else signal.SIGKILL)

    async def restart(self, tg: anyio.abc.TaskGroup, delay: float) -> None:
        await self._done.wait()
        await anyio.sleep(delay)
        await tg.start(self.run)

    async def stopped(self) -> None:
        await self._done.wait()


async def run_soak(
    seconds: float, *, seed: int = 0, quiet: bool = False, log_dir: Path | None = None
) -> SoakResult:
    """Run the soak for ``seconds`` of chaos with two zombied processes; return the figures."""
    rng = random.Random(seed)
    result = SoakResult(seconds)
    sim = Simulator(bookmark_interval=0.5, seed=seed, history_window=5_000)
    world = World(sim, RULES, seed=seed)
    with tempfile.TemporaryDirectory(prefix="zombied-soak-") as tmp:
        async with sim, anyio.create_task_group() as tg:
            world.start(nodes=6, pods=POPULATION)
            kubeconfig = sim.write_kubeconfig(Path(tmp) / "kubeconfig")
            logs = log_dir or Path(tmp)
            logs.mkdir(parents=True, exist_ok=True)
            replicas = [ProcessReplica(f"zombied-{i}", kubeconfig, sim, logs) for i in range(2)]
            observer = ProcessReplica("zombied-observer", kubeconfig, sim, logs, observer=True)
            for replica in (*replicas, observer):
                await tg.start(replica.run)
            with anyio.move_on_after(seconds):
                async with anyio.create_task_group() as drivers:
                    drivers.start_soon(_cluster_driver, world, rng)
                    drivers.start_soon(_chaos_driver, sim, replicas, tg, rng, result)
                    drivers.start_soon(_safety_checker, world)
                    drivers.start_soon(_sample_rss, observer, seconds, result)
            await _settle(sim, world, replicas, result)
            result.terminal_pods = sum(
                1
                for pod in sim.store.list("pods")
                if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")
            )
            result.rss_start, result.rss_end = observer.rss_start, observer.rss()
            result.rss_uptime = time.monotonic() - observer.started_at
            result.leader_rss = max(replica.rss() for replica in replicas)
            for replica in (*replicas, observer):
                replica.kill(drain=True)
            with anyio.move_on_after(30):
                for replica in (*replicas, observer):
                    await replica.stopped()
            result.slow_starts = sum(len(replica.stalls) for replica in replicas)
            if not quiet:
                for replica in replicas:
                    for tail in replica.stalls:
                        print(f"--- {replica.name} slow start ---\n{tail}", file=sys.stderr)
            result.bad_exits = [
                code for replica in replicas for code in replica.drain_exits if code != 0
            ]
            tg.cancel_scope.cancel()  # latency removals still sleeping
        world.check_safety()
        if not quiet and (result.violations or result.left or result.bad_exits):
            for replica in (*replicas, observer):
                tail = replica.log.read_bytes()[-3000:].decode(errors="replace")
                print(f"--- {replica.name} log tail ---\n{tail}", file=sys.stderr)
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
        elif roll < 0.8:
            world.delete_by_other(index, terminal=True)  # users clean up old pods
        terminal = [
            p
            for p in world.sim.store.list("pods")
            if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded")
        ]
        if len(terminal) > TERMINAL_GC_THRESHOLD:
            world.delete_by_other(index, terminal=True)  # the PodGC, scaled down
        running = sum(
            1
            for p in world.sim.store.list("pods")
            if (p.get("status") or {}).get("phase") == "Running"
        )
        if running < POPULATION:
            world.create_pod(index, index >> 4, precious=rng.random() < 0.1)


async def _chaos_driver(
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
            tg.start_soon(_remove_later, faults, rule, rng.uniform(0.2, 3.0))
            result.count("5xx")
        elif roll < 0.45:
            rule = faults.add_error(
                rng.choice(["*", "delete"]),
                "*",
                status=429,
                retry_after=rng.choice([0.2, 0.5, 1.0]),
                fraction=rng.choice([0.5, 1.0]),
            )
            tg.start_soon(_remove_later, faults, rule, rng.uniform(0.2, 2.0))
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


async def _sample_rss(observer: ProcessReplica, seconds: float, result: SoakResult) -> None:
    # Half-time RSS: growth that stops early is warm-up, growth that goes on is a leak.
    await anyio.sleep(seconds / 2)
    result.rss_mid = observer.rss()


async def _safety_checker(world: World) -> None:
    while True:
        await anyio.sleep(0.2)
        world.check_safety()


async def _settle(
    sim: Simulator, world: World, replicas: list[ProcessReplica], result: SoakResult
) -> None:
    """Stop the faults; wait for every replica to be up and the due zombies to be gone."""
    sim.faults.clear()
    deadline = time.monotonic() + LIVENESS_BOUND + 2 * LEASE["lease_duration"] + 20
    # Killed replicas come back within a few seconds (their restart is scheduled).
    with contextlib.suppress(AssertionError):
        await eventually(lambda: all(r.running for r in replicas), timeout=30, interval=0.1)
    with contextlib.suppress(AssertionError):
        await eventually(
            lambda: not world.pending_zombies(),
            timeout=deadline - time.monotonic(),
            interval=0.1,
        )
    result.left = world.pending_zombies()
    result.missed = len(result.left)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("SOAK_S") or 600), help="chaos time"
    )
    parser.add_argument("--seed", type=int, default=int(time.time()), help="randomness seed")
    parser.add_argument("--keep-logs", type=Path, help="write the zombied logs to this directory")
    args = parser.parse_args(argv)
    run = functools.partial(run_soak, args.seconds, seed=args.seed, log_dir=args.keep_logs)
    result = anyio.run(run, backend="asyncio")
    print(result.line() + f" seed={args.seed}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
