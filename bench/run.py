"""Benchmark zombied against the `kubectl` CronJob it replaces (`make bench`).

For each cluster size the simulator runs in its own process with a fresh cluster, and
the two reapers are measured one after the other on the same scenarios: zombied as
`zombied run` (at its default rate limits for the steady state and the trickle, with
the limits lifted for the storm), then the CronJob script with the real kubectl on a
fixed schedule. Figures come from the simulator's request and delete logs (its clock)
and from the kernel's accounting of each process; `bench/RESULTS.md`,
`bench/results.png` and `bench/results.json` are rewritten at the end. `--quick` is a
smoke run that finishes in under a minute and writes into a temporary directory. Every
process started here is stopped before this program exits, and all traffic stays on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):
    # Run as a script (`python bench/run.py`): make the `bench` package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zombied.config import OPTIONS

from bench import machine, pacing, plot, profile, realserver, report
from bench.cronjob import CronJob, CronRun
from bench.procs import Child, Sampler, wait_for
from bench.report import CRONJOB, ZOMBIED, PhaseResult
from bench.simctl import (
    REPO,
    Preemption,
    SimProcess,
    ZombiedProcess,
    decoy_pods,
    venv_tool,
)
from bench.stats import (
    LatencySummary,
    Zombie,
    audit_deletes,
    clear_time,
    cost_by_verb,
    expected_cron_latency,
    peak,
    project_remaining,
    rate_limit_floor,
)

BENCH_DIR = Path(__file__).resolve().parent
# client-go's default client-side limit, which kubectl keeps for everything but discovery.
KUBECTL_DEFAULT_QPS = 5.0
LIFTED_QPS = 1000.0
LIFTED_BURST = 1000
LIFTED = ("--qps", "1000", "--burst", "1000", "--max-in-flight", "16")
DEFAULT_PERIOD = 60.0
# Node-shutdown variants over the trickle's nodes: mostly the common 1.22+ kill, and one
# of each other shape the kubelet leaves (a pod rejected during shutdown; a pod whose
# containers had exited 0 stays Succeeded on the newest kubelets).
TRICKLE_VARIANTS = (
    ("1.22", "terminated"),
    ("1.20", "terminated"),
    ("newest", "succeeded"),
    ("1.22", "rejected"),
    ("1.26", "terminated"),
    ("1.22", "terminated"),
)
# zombied's defaults (`zombied run --help`), the floor its reap latency is judged against.
_DEFAULTS = {option.name: option.default for option in OPTIONS}
ZOMBIED_DEFAULT_QPS = float(_DEFAULTS["qps"])
ZOMBIED_DEFAULT_BURST = int(_DEFAULTS["burst"])
ZOMBIED_DEFAULT_IN_FLIGHT = int(_DEFAULTS["max_in_flight"])
# As the shipped Deployment runs it: with a Lease (outside a cluster, in `default`).
AS_DEPLOYED = ("--leader-elect", "--lease-namespace", "default")


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything a run measures; `--quick` shrinks it to a smoke run."""

    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    pods_per_node: int = 30
    namespaces: int = 10  # named team-0, team-1, ...
    steady_s: float = 15.0
    storm_fraction: float = 0.10
    trickle_nodes: int = 6
    trickle_interval_s: float = 8.0
    cron_period_s: float = DEFAULT_PERIOD
    cron_deadline_s: float = 90.0
    clear_timeout_s: float = 180.0
    seed: int = 1
    quick: bool = False
    profile: bool = False
    profile_path: Path | None = None

    def nodes(self, pods: int) -> int:
        return max(1, math.ceil(pods / self.pods_per_node))

    def storm_nodes(self, pods: int) -> int:
        return max(1, round(self.nodes(pods) * self.storm_fraction))


QUICK = Plan(
    sizes=(1_000,),
    steady_s=3.0,
    trickle_nodes=2,
    trickle_interval_s=2.0,
    cron_period_s=8.0,
    cron_deadline_s=8.0,
    clear_timeout_s=20.0,
    quick=True,
)


@dataclass(slots=True)
class Session:
    """One simulator with one cluster: the raw material of a reaper's results."""

    sim: SimProcess
    pods: int
    nodes: list[str]
    namespaces: list[str]
    zombies: list[Zombie] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    storm_window: tuple[float, float] = (0.0, 0.0)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def pick_nodes(nodes: Sequence[str], plan: Plan, pods: int) -> tuple[list[str], list[str]]:
    """Disjoint trickle and storm node sets, the same for both reapers."""
    order = random.Random(plan.seed + pods).sample(list(nodes), len(nodes))
    trickle = order[: plan.trickle_nodes]
    storm = order[plan.trickle_nodes : plan.trickle_nodes + plan.storm_nodes(pods)]
    return trickle, storm


def start_cluster(
    workdir: Path, plan: Plan, pods: int, label: str, *, decoys: bool = True
) -> tuple[SimProcess, Session]:
    sim = SimProcess(workdir, name=f"sim-{label}-{pods}")
    sim.__enter__()
    try:
        started = time.monotonic()
        namespaces = [f"team-{index}" for index in range(plan.namespaces)]
        sim.build(nodes=plan.nodes(pods), pods=pods, namespaces=namespaces)
        session = Session(sim=sim, pods=pods, nodes=sim.node_names(), namespaces=namespaces)
        if decoys:
            add_decoys(session, plan)
        log(
            f"  [{label} {pods:,}] cluster of {pods:,} pods on {len(session.nodes)} nodes "
            f"in {time.monotonic() - started:.1f} s"
        )
    except BaseException:
        sim.__exit__(None, None, None)
        raise
    return sim, session


def add_decoys(session: Session, plan: Plan) -> None:
    """Terminal pods no reaper should delete, on a node no scenario shuts down."""
    trickle, storm = pick_nodes(session.nodes, plan, session.pods)
    spare = next(node for node in reversed(session.nodes) if node not in {*trickle, *storm})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for decoy in decoy_pods(session.namespaces, node=spare, now=now):
        session.sim.create_pod(decoy)


def preempt(session: Session, node: str, index: int, group: str) -> Preemption:
    version, variant = (
        TRICKLE_VARIANTS[index % len(TRICKLE_VARIANTS)]
        if group == "trickle"
        else ("1.22", "terminated")
    )
    done = session.sim.preempt(node, version=version, variant=variant, group=group)
    session.preemptions.append(done)
    session.zombies.extend(done.zombies)
    return done


def inject_storm(session: Session, pods: list[dict[str, Any]]) -> None:
    """Every pod of the storm's nodes gets the kubelet's shutdown status, as fast as it goes."""
    started = time.time()
    zombies = session.sim.shut_down(pods, group="storm")
    session.zombies.extend(zombies)
    session.storm_window = (started, time.time())


def wait_cleared(session: Session, groups: set[str], timeout: float, *, since: int = 0) -> bool:
    """Until every zombie of `groups` has a delete record (or `timeout` passes).

    The cheap delete counter is polled first; the full log (large at 100k pods) is only
    fetched once enough deletes happened to possibly cover the zombies.
    """
    wanted = {z.uid for z in session.zombies if z.group in groups}

    def cleared() -> bool:
        if session.sim.deleted_count() - since < len(wanted):
            return False
        deleted = {
            str((record.get("obj") or {}).get("metadata", {}).get("uid", ""))
            for record in session.sim.deleted()[since:]
        }
        return wanted <= deleted

    return wait_for(cleared, timeout=timeout, interval=0.25)


def phase_result(
    session: Session,
    *,
    reaper: str,
    scenario: str,
    setting: str,
    since: float,
    until: float,
    deleted: list[dict[str, Any]],
    requests: list[dict[str, Any]],
    judge_wrong: bool = True,
) -> PhaseResult:
    """Figures for the zombies of `scenario`, from the deletes and requests in the window."""
    window = [record for record in deleted if since <= float(record["time"]) <= until]
    audit = audit_deletes(session.zombies, window)
    zombies = [z for z in session.zombies if z.group == scenario]
    wrong = audit.wrong if judge_wrong else []
    succeeded = sum(1 for z in audit.missed if z.group == scenario and z.variant == "succeeded")
    deletes = audit.deleted_by_group.get(scenario, [])
    extra: dict[str, float] = {}
    if zombies and deletes:
        extra["drain_s"] = max(deletes) - max(z.failed_at for z in zombies)
        extra["arrival_s"] = max(z.failed_at for z in zombies) - min(z.failed_at for z in zombies)
    return PhaseResult(
        extra=extra,
        reaper=reaper,
        pods=session.pods,
        nodes=len(session.nodes),
        scenario=scenario,
        setting=setting,
        window_s=until - since,
        zombies=len(zombies),
        latencies=audit.latencies.get(scenario, []),
        clear_s=clear_time(
            (z.failed_at for z in zombies), audit.deleted_by_group.get(scenario, [])
        ),
        costs=cost_by_verb(requests, since=since, until=until),
        missed=audit.missed_in({scenario}),
        # The CronJob's phase filter never matches these: they stay until PodGC's threshold.
        missed_note=f"{succeeded} left in phase Succeeded" if succeeded else "",
        wrong=len(wrong),
        wrong_examples=[
            f"{w.namespace}/{w.name} ({w.phase} {w.reason or '-'}): {w.why}" for w in wrong[:5]
        ],
    )


def busy_fraction(before: Any, after: Any) -> float:
    """Share of all cores' time spent busy between two `psutil.cpu_times()` readings."""
    total = sum(after) - sum(before)
    idle = (after.idle + getattr(after, "iowait", 0.0)) - (
        before.idle + getattr(before, "iowait", 0.0)
    )
    return (total - idle) / total if total > 0 else math.nan


def with_floor(result: PhaseResult, session: Session, qps: float, burst: int) -> None:
    """What the rate limit alone would impose on these arrivals: the latency floor."""
    arrivals = [z.failed_at for z in session.zombies if z.group == result.scenario]
    if not arrivals:
        return
    floor = LatencySummary.of(rate_limit_floor(arrivals, qps=qps, burst=burst))
    result.extra.update(
        {"floor_p50": floor.p50, "floor_p99": floor.p99, "floor_max": floor.max, "qps": qps}
    )


def sampled(
    result: PhaseResult,
    sampler: Sampler,
    since: float,
    until: float,
    server: Sampler | None = None,
) -> PhaseResult:
    result.peak_rss_bytes = peak(sampler.rss, since, until)
    result.extra["rss_high_water_since_start"] = sampler.high_water
    if server is not None:
        result.extra["sim_cpu_s"] = server.cpu_at(until) - server.cpu_at(since)
    result.cpu_s = sampler.cpu_at(until) - sampler.cpu_at(since)
    return result


def run_zombied(plan: Plan, pods: int, workdir: Path) -> list[PhaseResult]:
    """Steady state and trickle at default limits, then the storm with limits lifted."""
    log(f"zombied, {pods:,} pods")
    sim, session = start_cluster(workdir, plan, pods, "zombied")
    results: list[PhaseResult] = []
    trickle_nodes, storm_nodes = pick_nodes(session.nodes, plan, pods)
    defaults = (
        f"defaults: qps {ZOMBIED_DEFAULT_QPS:g}, burst {ZOMBIED_DEFAULT_BURST}, "
        f"{ZOMBIED_DEFAULT_IN_FLIGHT} in flight"
    )
    with sim, Sampler(sim.child.pid, interval=0.25) as server:
        storm_pods = [pod for on_node in sim.pods_on(storm_nodes).values() for pod in on_node]
        with (
            ZombiedProcess(
                sim, workdir, name=f"zombied-defaults-{pods}", extra=AS_DEPLOYED
            ) as daemon,
            Sampler(daemon.pid) as sampler,
        ):
            sampler.sample()
            steady_start = time.time()
            time.sleep(plan.steady_s / 2)
            watches = sim.open_watches()
            time.sleep(plan.steady_s / 2)
            steady_end = time.time()
            sampler.sample()
            server.sample()
            log(f"  steady state {plan.steady_s:.0f} s, {watches} open watch(es)")
            for index, node in enumerate(trickle_nodes):
                if index:
                    time.sleep(plan.trickle_interval_s)
                preempt(session, node, index, "trickle")
            cleared = wait_cleared(session, {"trickle"}, plan.clear_timeout_s)
            time.sleep(0.5)  # let the Events that follow the deletes land inside the window
            trickle_end = time.time()
            sampler.sample()
            server.sample()
            log(
                f"  trickle of {len(trickle_nodes)} nodes {'cleared' if cleared else 'NOT cleared'}"
            )
            deleted, requests = sim.deleted(), sim.requests()
            steady = phase_result(
                session,
                reaper=ZOMBIED,
                scenario="steady",
                setting=defaults,
                since=steady_start,
                until=steady_end,
                deleted=deleted,
                requests=requests,
            )
            steady.extra["open_watches"] = float(watches)
            results.append(sampled(steady, sampler, steady_start, steady_end, server))
            trickle = phase_result(
                session,
                reaper=ZOMBIED,
                scenario="trickle",
                setting=defaults,
                since=steady_end,
                until=trickle_end,
                deleted=deleted,
                requests=requests,
            )
            with_floor(trickle, session, ZOMBIED_DEFAULT_QPS, ZOMBIED_DEFAULT_BURST)
            results.append(sampled(trickle, sampler, steady_end, trickle_end, server))
        offset = sim.deleted_count()
        with (
            ZombiedProcess(
                sim, workdir, name=f"zombied-lifted-{pods}", extra=(*AS_DEPLOYED, *LIFTED)
            ) as daemon,
            Sampler(daemon.pid) as sampler,
        ):
            sampler.sample()
            profiler = start_profiler(plan, daemon, workdir, pods)
            try:
                machine_before = psutil.cpu_times()
                harness_before = psutil.Process().cpu_times()
                storm_start = time.time()
                inject_storm(session, storm_pods)
                log(
                    f"  storm: {len(storm_pods)} pods on {len(storm_nodes)} nodes shut down "
                    f"in {time.time() - storm_start:.1f} s"
                )
                cleared = wait_cleared(session, {"storm"}, plan.clear_timeout_s, since=offset)
                time.sleep(0.5)
                storm_end = time.time()
                sampler.sample()
                server.sample()
                machine_busy = busy_fraction(machine_before, psutil.cpu_times())
                harness_after = psutil.Process().cpu_times()
                harness_cpu = (harness_after.user + harness_after.system) - (
                    harness_before.user + harness_before.system
                )
            finally:
                if profiler is not None:
                    profiler.stop()
            log(f"  storm {'cleared' if cleared else 'NOT cleared'}")
            storm = phase_result(
                session,
                reaper=ZOMBIED,
                scenario="storm",
                setting="qps 1000, burst 1000, 16 in flight",
                since=storm_start,
                until=storm_end,
                deleted=sim.deleted(),
                requests=sim.requests(),
            )
            with_floor(storm, session, LIFTED_QPS, LIFTED_BURST)
            storm.extra["machine_busy"] = machine_busy
            storm.extra["harness_cpu_s"] = harness_cpu
            results.append(sampled(storm, sampler, storm_start, storm_end, server))
        # A wrong delete outside every measured window (at start-up, say) counts too.
        everything = audit_deletes(session.zombies, sim.deleted())
        stray = len(everything.wrong) - sum(r.wrong for r in results)
        if stray > 0:
            results[0].wrong += stray
            results[0].wrong_examples.append(f"{stray} outside the measured windows")
    return results


def start_profiler(plan: Plan, daemon: ZombiedProcess, workdir: Path, pods: int) -> Child | None:
    """py-spy on the zombied process for the largest storm, when asked for."""
    if not plan.profile or pods != max(plan.sizes):
        return None
    out = plan.profile_path or workdir / f"profile-storm-{pods}.txt"
    child = Child(
        "py-spy",
        [
            venv_tool("py-spy"),
            "record",
            "--pid",
            str(daemon.pid),
            "--format",
            "raw",
            "--rate",
            "100",
            # Only samples holding the GIL: where the CPU goes, not where threads wait.
            "--gil",
            "--threads",
            # Sample without pausing zombied, so the profile does not slow the storm down.
            "--nonblocking",
            "--output",
            str(out),
        ],
        log_path=workdir / "py-spy.log",
        # py-spy writes its output when interrupted, as after Ctrl-C.
        stop_signal=signal.SIGINT,
    )
    child.__enter__()
    time.sleep(1.0)  # attach before the storm starts
    log(f"  profiling zombied into {out}")
    return child


def run_cronjob(plan: Plan, pods: int, workdir: Path) -> list[PhaseResult]:
    """One empty run (steady), then trickle and storm zombies cleared by the next run.

    The clearing run has a deadline (a CronJob's `activeDeadlineSeconds`); the deletes it
    did not get to are projected at the delete rate it had, and reported as projected.
    """
    period = plan.cron_period_s
    tag = f"[cronjob {pods:,}]"
    log(f"{tag} kubectl every {period:.0f} s, run deadline {plan.cron_deadline_s:.0f} s")
    # The decoys come after the first run, so that run measures an idle cluster.
    sim, session = start_cluster(workdir, plan, pods, "cronjob", decoys=False)
    trickle_nodes, storm_nodes = pick_nodes(session.nodes, plan, pods)
    setting = f"every {period:.0f} s"
    with sim, Sampler(sim.child.pid, interval=0.25) as server:
        storm_pods = [pod for on_node in sim.pods_on(storm_nodes).values() for pod in on_node]
        first = time.time() + 0.5
        with CronJob(
            sim.kubeconfig, period=period, first=first, deadline_s=plan.cron_deadline_s
        ) as cron:
            if not wait_for(lambda: len(cron.completed_runs()) >= 1, timeout=period + 120):
                raise RuntimeError(f"the CronJob's first run did not finish: {cron.errors}")
            empty = cron.completed_runs()[0]
            log(f"{tag} empty run took {empty.finished - empty.started:.2f} s")
            add_decoys(session, plan)
            # Zombies arrive spread over the period (a CronJob's runs are not aligned with
            # preemptions); the storm lands in the middle of it.
            arrivals: list[tuple[float, str, int, str]] = [
                (first + (index + 0.5) * period / len(trickle_nodes), node, index, "trickle")
                for index, node in enumerate(trickle_nodes)
            ]
            arrivals.append((first + 0.5 * period, "", 0, "storm"))
            for at, node, index, group in sorted(arrivals):
                time.sleep(max(0.0, at - time.time()))
                if group == "storm":
                    inject_storm(session, storm_pods)
                else:
                    preempt(session, node, index, group)
            # The first run after the last zombie arrived is the one that must clear them.
            target = cron.next_slot(time.time())
            if not wait_for(
                lambda: any(run.scheduled >= target for run in cron.completed_runs()),
                timeout=(target - time.time()) + plan.cron_deadline_s + 120,
                interval=0.25,
            ):
                log(f"{tag} the clearing run did not finish in time")
        runs = cron.completed_runs()
        deleted, requests = sim.deleted(), sim.requests()
        server.sample()
    for run in runs:
        log(
            f"{tag} run at +{run.scheduled - first:.1f} s: listed {run.listed}, "
            f"{len(run.invocations)} kubectl, {run.finished - run.started:.2f} s"
            + (
                f", cut by the deadline after {run.cut_at - run.started:.1f} s"
                if run.cut_at
                else ""
            )
        )
        for invocation in run.invocations:
            if invocation.returncode not in (0, -9):
                log(f"{tag}   kubectl {invocation.argv_head}: {invocation.stderr_tail[:300]}")
    busy = [run for run in runs if run.scheduled > first]
    clearing = next((run for run in busy if run.scheduled >= target), None)
    synthetic, rate = project_cut_run(session, clearing, deleted)
    if synthetic:
        log(f"{tag} {len(synthetic)} deletes projected at {rate:.2f} deletes/s")
    end = max(run.finished for run in runs) + 0.5
    judged = deleted + synthetic
    steady = phase_result(
        session,
        reaper=CRONJOB,
        scenario="steady",
        setting=setting,
        since=empty.started,
        until=empty.finished + 0.01,
        deleted=deleted,
        requests=requests,
    )
    # One run per period: its cost is the cost of a period.
    steady.window_s = period
    steady.peak_rss_bytes = float(empty.max_rss_bytes)
    steady.cpu_s = empty.cpu_seconds
    results = [steady]
    since = min(z.failed_at for z in session.zombies)
    until = max([end, *(float(record["time"]) for record in synthetic)]) + 0.01
    measured = 0
    for scenario in ("trickle", "storm"):
        result = phase_result(
            session,
            reaper=CRONJOB,
            scenario=scenario,
            setting=setting,
            since=since,
            until=until,
            deleted=judged,
            requests=[r for r in requests if float(r["time"]) <= end],
            judge_wrong=scenario == "storm",
        )
        result.peak_rss_bytes = float(max((run.max_rss_bytes for run in busy), default=0))
        result.cpu_s = sum(run.cpu_seconds for run in busy)
        result.extra["sim_cpu_s"] = server.cpu_at(end) - server.cpu_at(since)
        projected = sum(1 for record in synthetic if record["group"] == scenario)
        result.extra["projected"] = float(projected)
        if projected:
            result.extra["projected_rate"] = rate
        measured += result.zombies - result.missed - projected
        results.append(result)
    # The same runs cleared the trickle and the storm: their cost is shown once, on
    # the storm, and covers the zombies they really deleted.
    results[1].extra["cost_shared"] = 1.0
    if clearing is not None:
        last = max(
            [
                *(float(r["time"]) for r in deleted if clearing.started <= float(r["time"])),
                *(float(r["time"]) for r in synthetic),
            ],
            default=clearing.finished,
        )
        results[2].extra["clear_run_s"] = last - clearing.started
    results[2].cost_zombies = measured
    results[2].cost_note = (
        "API requests, CPU and RSS are those of the runs that cleared both the trickle and the "
        f"storm ({measured:,} real deletes"
        + (", the rest projected: not counted)" if synthetic else ")")
    )
    stray = len(audit_deletes(session.zombies, deleted).wrong) - sum(r.wrong for r in results)
    if stray > 0:
        results[0].wrong += stray
    return results


def project_cut_run(
    session: Session, run: CronRun | None, deleted: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], float]:
    """Delete records for the zombies a deadline-cut run did not reach, at its rate."""
    if run is None or run.cut_at is None:
        return [], 0.0
    by_key = {f"{z.namespace}/{z.name}": z for z in session.zombies}
    done: dict[str, float] = {}
    for record in deleted:
        when = float(record["time"])
        if run.started <= when <= run.finished + 1.0:
            meta = (record.get("obj") or {}).get("metadata") or {}
            done[f"{meta.get('namespace')}/{meta.get('name')}"] = when
    projection = project_remaining(
        run.order, done, start=run.started, fallback_rate=KUBECTL_DEFAULT_QPS
    )
    synthetic: list[dict[str, Any]] = []
    for key, when in projection.times.items():
        zombie = by_key.get(key)
        if zombie is None:
            # A Failed pod that is no zombie (a decoy): the run would have deleted it too.
            namespace, _, name = key.partition("/")
            synthetic.append(
                {
                    "obj": {
                        "metadata": {"namespace": namespace, "name": name, "uid": ""},
                        "status": {"phase": "Failed", "reason": "(projected)"},
                    },
                    "time": when,
                    "dry_run": False,
                    "user": "projected",
                    "group": "",
                }
            )
            continue
        synthetic.append(
            {
                "obj": {
                    "metadata": {
                        "namespace": zombie.namespace,
                        "name": zombie.name,
                        "uid": zombie.uid,
                    },
                    "status": {"phase": "Failed", "reason": "Terminated"},
                },
                "time": when,
                "dry_run": False,
                "user": "projected",
                "group": zombie.group,
            }
        )
    return synthetic, projection.rate


def write_outputs(
    results: list[PhaseResult],
    plan: Plan,
    out: Path,
    facts: dict[str, str],
    elapsed: float,
    pacing_runs: Sequence[pacing.PacingResult] = (),
    real: Sequence[realserver.RealResult] = (),
    real_skipped: str = "",
) -> None:
    document = {
        "pacing": [run.to_json() for run in pacing_runs],
        "realserver": [run.to_json() for run in real],
        "realserver_skipped": real_skipped,
        "plan": plan_facts(plan),
        "machine": facts,
        "elapsed_s": elapsed,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "appendix": profile_appendix(plan),
        "results": [r.to_json() for r in results],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(document, indent=1))
    render_outputs(document, out)


def render_outputs(document: dict[str, Any], out: Path) -> None:
    """RESULTS.md and results.png from the data of a run (as written to results.json)."""
    results = [PhaseResult.from_json(item) for item in document["results"]]
    facts: dict[str, str] = document["machine"]
    plan: dict[str, Any] = document["plan"]
    picture = plot.draw(
        results,
        out / "results.png",
        title=f"zombied vs kubectl CronJob ({facts['CPU']}, {facts['cores (logical)']} cores)",
    )
    command = "make bench QUICK=1 (bench/run.py --quick)" if plan["quick"] else "make bench"
    pacing_runs = [pacing.PacingResult.from_json(item) for item in document.get("pacing") or []]
    real = [realserver.RealResult(**item) for item in document.get("realserver") or []]
    lead: list[str] = realserver.render(real)
    if not real and document.get("realserver_skipped"):
        lead = [
            "## Real kube-apiserver v1.20.2 with etcd",
            "",
            f"Not run: {document['realserver_skipped']}. Every figure below comes from the "
            "simulator.",
            "",
        ]
    if pacing_runs:
        curve = plot.draw_pacing(
            pacing_runs, out / "pacing.png", title="zombied at its defaults: the rate curve"
        )
        lead += pacing.render(pacing_runs, picture=curve.name)
    text = report.render_document(
        results,
        facts=facts,
        plan=plan,
        elapsed_s=float(document["elapsed_s"]),
        picture=picture.name,
        generated=str(document["generated"]),
        command=command,
        model=lambda run_s: expected_cron_latency(DEFAULT_PERIOD, run_s),
        notes=[*run_notes(results), *document.get("notes", [])],
        appendix=list(document.get("appendix") or []),
        lead=lead,
    )
    (out / "RESULTS.md").write_text(text)


def plan_facts(plan: Plan) -> dict[str, object]:
    return {
        "sizes": list(plan.sizes),
        "pods_per_node": plan.pods_per_node,
        "namespaces": plan.namespaces,
        "steady_s": plan.steady_s,
        "storm_fraction": plan.storm_fraction,
        "trickle_nodes": plan.trickle_nodes,
        "trickle_interval_s": plan.trickle_interval_s,
        "cron_period_s": plan.cron_period_s,
        "cron_deadline_s": plan.cron_deadline_s,
        "quick": plan.quick,
    }


def profile_appendix(plan: Plan) -> list[str]:
    if plan.profile_path is None or not plan.profile_path.exists():
        return []
    summary = profile.summarise(profile.parse_collapsed(plan.profile_path.read_text()))
    return profile.render(
        summary, title=f"Profile: zombied during the {max(plan.sizes):,}-pod storm"
    )


def run_notes(results: list[PhaseResult]) -> list[str]:
    notes = [
        f"{r.reaper}, {r.pods:,} pods, {r.scenario}: {r.cost_note}" for r in results if r.cost_note
    ]
    notes.extend(
        f"{r.reaper}, {r.pods:,} pods, {r.scenario}: missed {r.missed} ({r.missed_note})"
        for r in results
        if r.missed_note
    )
    return notes


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1k pods, short CronJob period, under a minute",
    )
    parser.add_argument(
        "--sizes", help="comma-separated cluster sizes in pods (default 1000,10000,100000)"
    )
    parser.add_argument(
        "--cron-period",
        type=float,
        help=f"CronJob period in seconds (default {DEFAULT_PERIOD:.0f}; quick 8)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where RESULTS.md, results.png and results.json go "
        "(default bench/; quick: a temporary directory)",
    )
    parser.add_argument(
        "--no-profile",
        action="store_true",
        help="do not py-spy the zombied process during the largest storm (default: profile, "
        "except with --quick)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="only redraw RESULTS.md and results.png from a results.json of an earlier run",
    )
    parser.add_argument("--skip-cronjob", action="store_true", help="measure zombied only")
    parser.add_argument(
        "--skip-pacing", action="store_true", help="skip the storms at the default settings"
    )
    parser.add_argument(
        "--skip-realserver", action="store_true", help="skip the runs on a real kube-apiserver"
    )
    return parser.parse_args(argv)


def _terminate(signum: int, _frame: object) -> None:
    # Unwind through every `with` so that each child process is stopped.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _terminate)
    if args.render:
        out = args.out or args.render.parent
        render_outputs(json.loads(args.render.read_text()), out)
        log(f"redrawn: {out / 'RESULTS.md'}, {out / 'results.png'}")
        return 0
    plan = QUICK if args.quick else Plan()
    if args.sizes:
        plan = replace(plan, sizes=tuple(int(size) for size in args.sizes.split(",")))
    if args.cron_period:
        plan = replace(plan, cron_period_s=args.cron_period)
    workdir = Path(tempfile.mkdtemp(prefix="zombied-bench-"))
    if not args.no_profile and not plan.quick:
        plan = replace(
            plan, profile=True, profile_path=workdir / f"profile-storm-{max(plan.sizes)}.txt"
        )
    out = args.out or (workdir if plan.quick else BENCH_DIR)
    log(f"logs in {workdir}")
    started = time.monotonic()
    facts = machine.describe(REPO)
    facts["load average at start (1/5/15 min)"] = machine.load_average()
    results: list[PhaseResult] = []
    real_skipped = "--skip-realserver" if args.skip_realserver else realserver.harness_available()
    real: list[realserver.RealResult] = []
    if real_skipped is None:
        real = realserver.run_all(workdir, (200,) if plan.quick else realserver.SIZES)
    else:
        log(f"real-server runs skipped: {real_skipped}")
    pacing_runs = [] if args.skip_pacing else pacing.run_all(workdir, quick=plan.quick)
    for pods in plan.sizes:
        results.extend(run_zombied(plan, pods, workdir))
    if not args.skip_cronjob:
        # The CronJob sessions mostly wait for their schedule and for kubectl's client-side
        # rate limit, so the sizes run side by side (each on its own simulator) once
        # zombied's measurements are over.
        with ThreadPoolExecutor(max_workers=len(plan.sizes)) as pool:
            futures = [pool.submit(run_cronjob, plan, pods, workdir) for pods in plan.sizes]
            for future in futures:
                results.extend(future.result())
    elapsed = time.monotonic() - started
    facts["load average at end (1/5/15 min)"] = machine.load_average()
    write_outputs(results, plan, out, facts, elapsed, pacing_runs, real, real_skipped or "")
    log(f"done in {elapsed:.0f} s: {out / 'RESULTS.md'}, {out / 'results.png'}")
    print(report.summary_lines(results))
    failures = [r for r in results if r.reaper == ZOMBIED and (r.missed or r.wrong)]
    pacing_failures = [r for r in pacing_runs if r.missed or r.wrong]
    real_failures = [r for r in real if r.reaper == "zombied" and (r.missed or r.wrong)]
    return 1 if failures or pacing_failures or real_failures else 0


if __name__ == "__main__":
    sys.exit(main())
