"""Storms at zombied's default settings, clean and under pushback (part of `make bench`).

What users run is the defaults, so these runs never pass `--qps` or `--burst`: a node
batch (200 zombies at once), a storm (1,000 at once), and the same storm while the API
server answers a fifth of the DELETEs with 429 and ``Retry-After: 1`` (the simulator's
fault injection). Each run gets a fresh zombied on a fresh simulator; zombied's
``zombied_delete_rate`` gauge is read every 0.2 s or so while the storm clears, for the
rate curve (``pacing.png``).
Figures come from the simulator's request and delete logs (its clock) and the kernel's
accounting of the zombied process (CPU per reaped pod).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")

# The backend must be chosen before pyplot loads.
import matplotlib.pyplot as plt
from tests.helpers import wait_for

from bench.procs import cpu_seconds, log
from bench.simctl import SimProcess, ZombiedProcess
from bench.stats import audit_deletes, count_requests, p50_p99, seconds

#: The fault of the pushback run, in the simulator's fault syntax.
PUSHBACK_FAULT = "error:verb=delete,resource=pods,status=429,fraction=0.2,retry_after=1"
PODS_PER_NODE = 100
#: A bound on the wait for zombied's Reaped Events after the last delete: it writes them
#: at a few per second of its own (`zombied run --help`, under --qps), behind the deletes.
EVENTS_WAIT_PER_ZOMBIE_S = 0.5
_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    zombies: int
    fault: str = ""
    target_s: float | None = None  # the clear-time target after the last write, if any


SCENARIOS = (
    Scenario("node batch", 200, target_s=10.0),
    Scenario("storm", 1_000, target_s=60.0),
    Scenario("storm, 20 % of DELETEs 429", 1_000, fault=PUSHBACK_FAULT),
)
QUICK_SCENARIOS = (
    Scenario("node batch", 200, target_s=10.0),
    Scenario("storm, 20 % of DELETEs 429", 200, fault=PUSHBACK_FAULT),
)


@dataclass(slots=True)
class PacingResult:
    """One run: how fast it cleared, what it cost, and the rate over time."""

    scenario: str
    zombies: int
    fault: str
    target_s: float | None
    clear_after_last_write_s: float = math.nan
    latency_p50_s: float = math.nan
    latency_p99_s: float = math.nan
    requests: dict[str, int] = field(default_factory=dict)  # "verb resource code" -> count
    cpu_s: float = math.nan
    reaped: int = 0
    missed: int = 0
    wrong: int = 0
    # Seconds since the first kubelet write -> zombied_delete_rate, and DELETEs answered
    # per second (all codes) and 429s per second, from the simulator's request log.
    rate_curve: list[tuple[float, float]] = field(default_factory=list)
    deletes_per_s: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def delete_requests(self) -> int:
        return sum(n for key, n in self.requests.items() if key.startswith("delete pods "))

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def cpu_per_reaped_ms(self) -> float:
        return self.cpu_s * 1000 / self.reaped if self.reaped else math.nan


def run_scenario(scenario: Scenario, workdir: Path, *, clear_timeout: float) -> PacingResult:
    """A fresh simulator and a zombied at its defaults; shut the nodes down at once."""
    nodes = math.ceil(scenario.zombies / PODS_PER_NODE) + 1
    slug = scenario.name.split(",")[0].replace(" ", "-") + ("-429" if scenario.fault else "")
    result = PacingResult(scenario.name, scenario.zombies, scenario.fault, scenario.target_s)
    with SimProcess(workdir, name=f"sim-pacing-{slug}") as sim:
        sim.build(nodes=nodes, pods=nodes * PODS_PER_NODE, namespaces=["team-0", "team-1"])
        pods = sim.pods_on(sim.node_names()[: nodes - 1])[: scenario.zombies]
        curve: list[tuple[float, float]] = []  # (time, zombied_delete_rate)
        with ZombiedProcess(sim.kubeconfig, workdir, name=f"zombied-pacing-{slug}") as zd:
            if scenario.fault:
                sim.http.json("POST", "/_sim/faults", {"spec": scenario.fault})
            cpu_before = cpu_seconds(zd.pid)
            started = time.time()
            zombies = sim.shut_down(pods)

            def cleared() -> bool:
                rate = zd.metrics().get("zombied_delete_rate")
                if rate is not None:
                    curve.append((time.time(), rate))
                return sim.reaped(zombies)

            ok = wait_for(cleared, timeout=clear_timeout, interval=0.2)
            result.cpu_s = cpu_seconds(zd.pid) - cpu_before
            # The requests of a storm include the Events written after its last delete.
            wait_for(
                lambda: zd.metrics().get("zombied_events_queued") == 0,
                timeout=scenario.zombies * EVENTS_WAIT_PER_ZOMBIE_S + 30,
                interval=0.5,
            )
            counted_until = time.time()
        deleted, requests = sim.deleted(), sim.requests()
    audit = audit_deletes(zombies, deleted)
    first_write = min(z.failed_at for z in zombies)
    result.reaped, result.missed, result.wrong = len(audit.latencies), audit.missed, audit.wrong
    if ok and audit.deleted_at:
        result.clear_after_last_write_s = max(audit.deleted_at) - max(z.failed_at for z in zombies)
    result.latency_p50_s, result.latency_p99_s = p50_p99(audit.latencies)
    result.requests = count_requests(requests, started, counted_until)
    per_second: Counter[int] = Counter()
    throttled: Counter[int] = Counter()
    for record in requests:
        when = float(record["time"]) - float(record.get("duration") or 0.0)
        if record["verb"] == "delete" and started <= when <= counted_until:
            per_second[int(when - first_write)] += 1
            throttled[int(when - first_write)] += record["status"] == 429
    if per_second:
        result.deletes_per_s = [
            (float(s), per_second[s], throttled[s]) for s in range(max(per_second) + 1)
        ]
    result.rate_curve = [(t - first_write, rate) for t, rate in curve]
    log(
        f"  {scenario.name}: {result.reaped}/{len(zombies)} reaped, cleared "
        f"{result.clear_after_last_write_s:.1f} s after the last write, "
        f"{result.total_requests} requests ({result.delete_requests} DELETE), "
        f"CPU {result.cpu_s:.2f} s ({result.cpu_per_reaped_ms:.2f} ms per reaped pod)"
    )
    return result


def render(runs: Sequence[PacingResult], *, picture: str) -> list[str]:
    """The RESULTS.md section of these runs."""
    clean = {run.zombies: run for run in runs if not run.fault}
    rows = []
    for run in runs:
        total = f"{run.total_requests:,}"
        twin = clean.get(run.zombies)
        if run.fault and twin and twin.total_requests:
            total += f" ({run.total_requests / twin.total_requests:.2f}x the clean run)"
        cleared = seconds(run.clear_after_last_write_s)
        if run.target_s and not math.isnan(run.clear_after_last_write_s):
            verdict = "met" if run.clear_after_last_write_s <= run.target_s else "MISSED"
            cleared += f" (target {seconds(run.target_s)}: {verdict})"
        by_code = ", ".join(f"{key} {count:,}" for key, count in run.requests.items())
        rows.append(
            f"| {run.scenario} | {run.zombies:,} | {cleared} "
            f"| {seconds(run.latency_p50_s)} / {seconds(run.latency_p99_s)} "
            f"| {run.delete_requests:,} | {total} | {by_code} "
            f"| {run.cpu_s:.2f} s ({run.cpu_per_reaped_ms:.2f} ms) | {run.missed} / {run.wrong} |"
        )
    return [
        "## Storms at the default settings (simulator)",
        "",
        "zombied as users run it: no `--qps`/`--burst` flags, with leader election. Each run",
        "shuts its nodes down at once on a fresh simulator (HTTPS, on this machine) and a",
        "fresh zombied. The pushback run has the simulator answer 20 % of the DELETEs with",
        "`429` and `Retry-After: 1`. Requests are every request zombied made from the first",
        "kubelet write until its queue of Reaped Events was written out (DELETEs, Events,",
        "lease renewals, watches), by verb, resource and status. CPU is the zombied",
        "process's user and system time over the same span as the clear time (in brackets:",
        "per reaped pod), from the kernel's accounting.",
        "",
        "| run | zombies | cleared after the last kubelet write | reap latency p50 / p99 "
        "| DELETE requests | all requests | by verb, resource, code | CPU (per reaped pod) "
        "| missed / wrong |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
        *rows,
        "",
        f"![zombied_delete_rate and DELETEs per second during these runs]({picture})",
        "",
    ]


def draw(runs: Sequence[PacingResult], path: Path) -> Path:
    """The rate curve: zombied's DELETE rate limit and the DELETEs answered, per run."""
    figure, axes = plt.subplots(1, 2, figsize=(14, 4.8), constrained_layout=True)
    limit, answered = axes
    for colour, run in zip(_COLOURS, runs, strict=False):
        if run.rate_curve:
            xs, ys = zip(*run.rate_curve, strict=True)
            limit.step(
                xs, ys, where="post", color=colour, label=f"{run.scenario} ({run.zombies:,})"
            )
        if run.deletes_per_s:
            seconds = [point[0] for point in run.deletes_per_s]
            answered.plot(
                seconds,
                [point[1] for point in run.deletes_per_s],
                color=colour,
                label=f"{run.scenario}: all DELETEs",
            )
            if any(point[2] for point in run.deletes_per_s):
                answered.plot(
                    seconds,
                    [point[2] for point in run.deletes_per_s],
                    color=colour,
                    linestyle=":",
                    label=f"{run.scenario}: answered 429",
                )
    limit.set_title("zombied_delete_rate (the adaptive limit), scraped until cleared")
    limit.set_ylabel("DELETEs per second allowed")
    answered.set_title("DELETE requests per second, from the API server's request log")
    answered.set_ylabel("requests per second")
    for axis in axes:
        axis.set_xlabel("seconds since the first kubelet write")
        axis.set_ylim(bottom=0)
        axis.grid(visible=True, alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("zombied at its defaults: the rate curve")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def run_all(workdir: Path, *, quick: bool = False) -> list[PacingResult]:
    log("storms at the default settings")
    scenarios = QUICK_SCENARIOS if quick else SCENARIOS
    return [run_scenario(s, workdir, clear_timeout=60.0 if quick else 600.0) for s in scenarios]
