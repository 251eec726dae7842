"""Memory against cluster size, on the simulator (part of `make bench`).

zombied watches terminal pods only and keeps a small snapshot of each, so its resident
memory should be the same whether the cluster runs 1,000 or 100,000 pods. For each
size a fresh simulator holds that many running pods (30 per node, 10 namespaces) and a
fresh zombied runs at its defaults, as deployed: first idle (its steady-state cost:
one open watch, Lease renewals, no LIST after the first), then the pods of a few nodes
shut down at once, the same number of zombies at every size, which it reaps. Peak RSS
is the kernel's high-water mark at the end of each phase; requests come from the
simulator's request log.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import wait_for

from bench.procs import high_water_rss, log
from bench.simctl import SimProcess, ZombiedProcess
from bench.stats import audit_deletes, count_requests

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 3_000)
PODS_PER_NODE = 30
NAMESPACES = tuple(f"team-{index}" for index in range(10))
IDLE_S = 15.0
QUICK_IDLE_S = 4.0
#: Zombies of the batch at every size: under the default burst, so no rate-limit wait.
BATCH = 90


@dataclass(slots=True)
class MemoryResult:
    """zombied on one cluster size: idle, then reaping one batch."""

    pods: int
    idle_s: float
    idle_rss_bytes: float = math.nan
    idle_requests: dict[str, int] = field(default_factory=dict)  # "verb resource code" -> n
    open_watches: int = 0
    zombies: int = 0
    missed: int = 0
    wrong: int = 0
    batch_rss_bytes: float = math.nan

    @property
    def lists(self) -> int:
        return sum(n for key, n in self.idle_requests.items() if key.startswith("list "))


def run_size(pods: int, workdir: Path, *, idle_s: float) -> MemoryResult:
    result = MemoryResult(pods=pods, idle_s=idle_s)
    nodes = math.ceil(pods / PODS_PER_NODE)
    with SimProcess(workdir, name=f"sim-memory-{pods}") as sim:
        built = time.monotonic()
        sim.build(nodes=nodes, pods=pods, namespaces=NAMESPACES)
        log(f"  {pods:,} running pods on {nodes:,} nodes in {time.monotonic() - built:.1f} s")
        batch = sim.pods_on(sim.node_names()[: math.ceil(BATCH / PODS_PER_NODE) + 1])[:BATCH]
        with ZombiedProcess(sim.kubeconfig, workdir, name=f"zombied-memory-{pods}") as daemon:
            idle_from = time.time()
            time.sleep(idle_s)
            idle_until = time.time()
            result.idle_rss_bytes = high_water_rss(daemon.pid)
            result.open_watches = int(sim.stats()["watches"])
            zombies = sim.shut_down(batch)
            wait_for(lambda: sim.reaped(zombies), timeout=60, interval=0.1)
            result.batch_rss_bytes = high_water_rss(daemon.pid)
            deleted, requests = sim.deleted(), sim.requests()
    result.idle_requests = count_requests(requests, idle_from, idle_until)
    audit = audit_deletes(zombies, deleted)
    result.zombies, result.missed, result.wrong = len(zombies), audit.missed, audit.wrong
    log(
        f"  {pods:,} pods: idle RSS {result.idle_rss_bytes / (1 << 20):.1f} MiB, "
        f"{result.lists} LIST, {result.open_watches} watch(es); batch of {result.zombies}: "
        f"{result.missed} missed, RSS {result.batch_rss_bytes / (1 << 20):.1f} MiB"
    )
    return result


def run_all(workdir: Path, *, quick: bool = False) -> list[MemoryResult]:
    log("memory against cluster size")
    sizes, idle_s = (QUICK_SIZES, QUICK_IDLE_S) if quick else (SIZES, IDLE_S)
    return [run_size(pods, workdir, idle_s=idle_s) for pods in sizes]


def _mib(value: float) -> str:
    return "-" if math.isnan(value) else f"{value / (1 << 20):.1f} MiB"


def render(results: Sequence[MemoryResult]) -> list[str]:
    """The RESULTS.md section of these runs."""
    if not results:
        return []
    rows = []
    for r in results:
        per_minute = ", ".join(
            f"{key} {n * 60 / r.idle_s:.0f}" for key, n in r.idle_requests.items()
        )
        rows.append(
            f"| {r.pods:,} | {_mib(r.idle_rss_bytes)} | {per_minute or 'none'} "
            f"| {r.open_watches} | {r.lists} | {r.zombies} | {_mib(r.batch_rss_bytes)} "
            f"| {r.missed} / {r.wrong} |"
        )
    smallest, largest = results[0], results[-1]
    growth = largest.idle_rss_bytes / smallest.idle_rss_bytes - 1
    lead = (
        f"zombied at its defaults, as deployed, on clusters of {PODS_PER_NODE} running pods "
        f"per node in {len(NAMESPACES)} namespaces: idle for {smallest.idle_s:.0f} s, then "
        f"the pods of a few nodes shut down at once ({BATCH} zombies at every size). Peak RSS "
        "is the kernel's high-water mark (since zombied started) at the end of each phase; "
        "requests per minute while idle come from "
        "the simulator's request log (LIST counts the lists after zombied's first one). "
        f"From {smallest.pods:,} to {largest.pods:,} running pods the idle RSS "
        f"changes by {growth * 100:+.1f} % (design target: flat)."
    )
    return [
        "## Memory against cluster size (simulator)",
        "",
        *textwrap.wrap(lead, width=88, break_on_hyphens=False),
        "",
        "| running pods | idle: peak RSS | requests/min | open watches | LIST "
        "| batch zombies | batch: peak RSS | missed / wrong |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]
