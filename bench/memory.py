"""Memory against cluster size, on the simulator (part of `make bench`).

zombied watches terminal pods only and keeps a small snapshot of each, so its resident
memory should be the same whether the cluster runs 1,000 or 100,000 pods. For each
size a fresh simulator holds that many running pods (30 per node, 10 namespaces) and a
fresh zombied runs at its defaults, as deployed: first idle (its steady-state cost:
one open watch, Lease renewals, no LIST after the first), then the pods of a few nodes
shut down at once, the same number of zombies at every size, which it reaps. RSS is
sampled from the kernel every 0.25 s; requests come from the simulator's request log.
Run alone with ``python -m bench.memory [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import wait_for

from bench.procs import Sampler
from bench.simctl import SimProcess, ZombiedProcess
from bench.stats import LatencySummary, audit_deletes

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
    idle_requests: dict[str, int] = field(default_factory=dict)  # "verb resource" -> n
    idle_cpu_s: float = math.nan
    open_watches: int = 0
    zombies: int = 0
    reaped: int = 0
    missed: int = 0
    wrong: int = 0
    batch_rss_bytes: float = math.nan
    clear_after_last_write_s: float = math.nan
    latency_p50_s: float = math.nan
    latency_p99_s: float = math.nan

    @property
    def lists(self) -> int:
        return sum(n for key, n in self.idle_requests.items() if key.startswith("list "))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _peak(samples: Sequence[tuple[float, float]], since: float, until: float) -> float:
    return max((value for when, value in samples if since <= when <= until), default=math.nan)


def _requests(records: Sequence[dict[str, Any]], since: float, until: float) -> dict[str, int]:
    """zombied's requests by "verb resource" that started within [since, until)."""
    counts: Counter[str] = Counter()
    for record in records:
        if str(record.get("path", "")).startswith("/_sim"):
            continue  # the harness
        started = float(record.get("time", 0.0)) - float(record.get("duration") or 0.0)
        if since <= started < until:
            counts[f"{record.get('verb')} {record.get('resource')}"] += 1
    return dict(sorted(counts.items()))


def run_size(pods: int, workdir: Path, *, idle_s: float) -> MemoryResult:
    result = MemoryResult(pods=pods, idle_s=idle_s)
    nodes = math.ceil(pods / PODS_PER_NODE)
    with SimProcess(workdir, name=f"sim-memory-{pods}") as sim:
        built = time.monotonic()
        sim.build(nodes=nodes, pods=pods, namespaces=NAMESPACES)
        _log(f"  {pods:,} running pods on {nodes:,} nodes in {time.monotonic() - built:.1f} s")
        batch_nodes = sim.node_names()[: math.ceil(BATCH / PODS_PER_NODE) + 1]
        storm = [pod for on_node in sim.pods_on(batch_nodes).values() for pod in on_node][:BATCH]
        with (
            ZombiedProcess(sim.kubeconfig, workdir, name=f"zombied-memory-{pods}") as daemon,
            Sampler(daemon.pid, interval=0.25) as sampler,
        ):
            sampler.sample()
            idle_from = time.time()
            time.sleep(idle_s)
            sampler.sample()  # the last CPU reading inside the window
            idle_until = time.time()
            result.open_watches = sim.open_watches()
            started = time.time()
            zombies = sim.shut_down(storm, group="batch")
            wanted = {z.uid for z in zombies}

            def cleared() -> bool:
                done = {
                    str((r.get("obj") or {}).get("metadata", {}).get("uid")) for r in sim.deleted()
                }
                return wanted <= done

            wait_for(cleared, timeout=60, interval=0.1)
            sampler.sample()  # the last CPU reading inside the window
            ended = time.time()
            deleted, requests = sim.deleted(), sim.requests()
    result.idle_rss_bytes = _peak(sampler.rss, idle_from, idle_until)
    result.idle_cpu_s = sampler.cpu_at(idle_until) - sampler.cpu_at(idle_from)
    result.idle_requests = _requests(requests, idle_from, idle_until)
    result.batch_rss_bytes = _peak(sampler.rss, started, ended)
    audit = audit_deletes(zombies, deleted)
    latencies = audit.latencies.get("batch", [])
    result.zombies, result.reaped = len(zombies), len(latencies)
    result.missed, result.wrong = audit.missed_in({"batch"}), len(audit.wrong)
    stamps = audit.deleted_by_group.get("batch", [])
    if stamps and not result.missed:
        result.clear_after_last_write_s = max(stamps) - max(z.failed_at for z in zombies)
    summary = LatencySummary.of(latencies)
    result.latency_p50_s, result.latency_p99_s = summary.p50, summary.p99
    _log(
        f"  {pods:,} pods: idle RSS {result.idle_rss_bytes / (1 << 20):.1f} MiB, "
        f"{result.lists} LIST, {result.open_watches} watch(es); batch of {result.zombies} "
        f"reaped {result.reaped}, RSS {result.batch_rss_bytes / (1 << 20):.1f} MiB"
    )
    return result


def run_all(workdir: Path, *, quick: bool = False) -> list[MemoryResult]:
    _log("memory against cluster size")
    sizes, idle_s = (QUICK_SIZES, QUICK_IDLE_S) if quick else (SIZES, IDLE_S)
    return [run_size(pods, workdir, idle_s=idle_s) for pods in sizes]


def _mib(value: float) -> str:
    return "-" if math.isnan(value) else f"{value / (1 << 20):.1f} MiB"


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


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
            f"| {r.open_watches} | {r.lists} | {r.idle_cpu_s * 60 / r.idle_s:.2f} s "
            f"| {r.zombies} | {_mib(r.batch_rss_bytes)} | {_ms(r.clear_after_last_write_s)} "
            f"| {_ms(r.latency_p50_s)} / {_ms(r.latency_p99_s)} | {r.missed} / {r.wrong} |"
        )
    smallest, largest = results[0], results[-1]
    growth = largest.idle_rss_bytes / smallest.idle_rss_bytes - 1
    lead = (
        f"zombied at its defaults, as deployed, on clusters of {PODS_PER_NODE} running pods "
        f"per node in {len(NAMESPACES)} namespaces: idle for {smallest.idle_s:.0f} s, then "
        f"the pods of a few nodes shut down at once ({BATCH} zombies at every size). Peak RSS "
        "is sampled from the kernel every 0.25 s; requests per minute and CPU while idle come "
        "from the simulator's request log and the kernel (LIST counts the lists after "
        f"zombied's first one). From {smallest.pods:,} to {largest.pods:,} running pods the "
        f"idle RSS changes by {growth * 100:+.1f} % (design target: flat)."
    )
    return [
        "## Memory against cluster size (simulator)",
        "",
        *textwrap.wrap(lead, width=88, break_on_hyphens=False),
        "",
        "| running pods | idle: peak RSS | requests/min | open watches | LIST | CPU/min "
        "| batch zombies | batch: peak RSS | cleared after the last write "
        "| reap latency p50 / p99 | missed / wrong |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} only")
    parser.add_argument("--out", type=Path, help="write memory.json here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    workdir = Path(tempfile.mkdtemp(prefix="zombied-memory-"))
    _log(f"logs in {workdir}")
    results = run_all(workdir, quick=args.quick)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "memory.json").write_text(json.dumps([r.to_json() for r in results], indent=1))
    print("\n".join(render(results)))
    return 1 if any(r.missed or r.wrong for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
