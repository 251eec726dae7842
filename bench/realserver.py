"""Storms on a real kube-apiserver with etcd: zombied's defaults vs the CronJob.

The API server and etcd are the test suite's real-server harness
(``tests/realserver``), which keeps an audit log (writes at the ``Request`` level,
everything else at ``Metadata``), so every request of every client is counted by the
server itself, by user, verb, resource and status code. Every reaper talks to the
server as its own user (all of them in ``system:masters``), so the audit log tells
their requests apart. There is no kubelet: this module plays it. It creates the pods
(bound to made-up nodes), then writes the kubelet's node-shutdown status on all of them
at once through the ``status`` subresource, as a shutting-down node would; each zombie's
time is the answer to that write. A few terminal pods that are not node-shutdown
zombies (a Job pod that failed on its own, an evicted pod, an opted-out zombie) sit
beside them; no reaper should delete those.

zombied runs as users run it, at its defaults with leader election, alone on its storm;
the CronJob is the real kubectl doing what the usual script does (`bench.cronjob`) on
its two usual schedules, side by side. How the schedules meet their storms, and what is
counted, is said in the lead of the report's section (`render`).
"""

from __future__ import annotations

import functools
import math
import ssl
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.daemon.pods import evicted, pod, zombie
from tests.helpers import wait_for
from tests.realserver.cluster import RealCluster

from bench.cronjob import CronRun, run_schedule
from bench.procs import Http, cpu_seconds, high_water_rss, log
from bench.simctl import ZombiedProcess
from bench.stats import p50_p99, seconds

PODS_PER_NODE = 100
#: The CronJob's schedules, run side by side: every 9 minutes as it is usually set up,
#: and every minute.
CRON_PERIODS = (540.0, 60.0)
#: Time to clear after the kubelet's last write that zombied's defaults must meet.
CLEAR_TARGETS_S = {200: 10.0, 1_000: 60.0}
#: Storm sizes of `make bench`: a node's batch, and the design's 1,000-zombie storm.
#: Larger storms at the defaults only measure `--qps` (10,000 zombies at 20/s: 500 s).
SIZES = (200, 1_000)
QUICK_SIZES = (200,)
#: Storm sizes the CronJob's schedules run on too (zombied runs on every size).
KUBECTL_SIZES = (1_000,)
#: A kubectl run longer than this is cut (the job's activeDeadlineSeconds). kubectl
#: deletes at client-go's 5 requests/s: 1,000 zombies take about 200 s.
KUBECTL_DEADLINE_S = 300.0
#: The audit log's username of zombied; each schedule has its own (`cron_user`).
ZOMBIED_USER = "zombied"
KEEP = "zombied.io/keep"
JOB = ("Job", "nightly")


def cron_user(period: float) -> str:
    """The user (and audit log username) of the schedule with this period."""
    return f"cronjob-every-{period:g}s"


def schedule_label(period: float) -> str:
    """`every 9 min`, `every 1 min`."""
    return f"every {period / 60:g} min"


@dataclass(slots=True)
class RealResult:
    """One reaper on one storm of the real server."""

    reaper: str
    zombies: int
    clear_after_last_write_s: float = math.nan
    latency_p50_s: float = math.nan
    latency_p99_s: float = math.nan
    requests: dict[str, int] = field(default_factory=dict)  # "verb resource code" -> n
    wrong: int = 0
    missed: int = 0
    cpu_s: float = math.nan
    peak_rss_bytes: float = math.nan
    note: str = ""
    server: str = ""  # the API server's version
    schedule_s: float = 0.0  # the CronJob's period (0: zombied)
    runs: int = 0  # the CronJob's runs

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def cpu_per_reaped_ms(self) -> float:
        reaped = self.zombies - self.missed
        return self.cpu_s * 1000 / reaped if reaped > 0 else math.nan

    @property
    def label(self) -> str:
        """The reaper as the table names it: `zombied`, `kubectl every 9 min`."""
        return f"kubectl {schedule_label(self.schedule_s)}" if self.schedule_s else self.reaper


class Kubelet:
    """Writes pods and their node-shutdown status as the admin, 8 requests at a time."""

    def __init__(self, cluster: RealCluster) -> None:
        context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
        self.http = Http(cluster.url, cluster.tokens["admin"], context=context)

    def _status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.http.json(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            {"status": status},
            "application/merge-patch+json",
        )

    def create_pods(self, pods: Sequence[dict[str, Any]]) -> None:
        """Create each pod bound to its node, then write its status (created pods have none)."""

        def one(body: dict[str, Any]) -> None:
            namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
            self.http.json("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            self._status(namespace, name, body["status"])

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, pods))

    def shut_down(self, pods: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """The kubelet's 1.22+ graceful-shutdown status on these (namespace, name) pods,
        written in this order: when each write was answered."""

        def one(ref: tuple[str, str]) -> tuple[tuple[str, str], float]:
            self._status(*ref, zombie(ref[1], ref[0], finished_ago=0)["status"])
            return ref, time.time()

        with ThreadPoolExecutor(max_workers=8) as pool:
            return dict(pool.map(one, pods))

    def pod_names(self, namespace: str) -> set[str]:
        """The names of the pods left in ``namespace``."""
        pods = self.http.items(f"/api/v1/namespaces/{namespace}/pods", limit=500)
        return {str(item["metadata"]["name"]) for item in pods}


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(slots=True)
class Storm:
    """The pods of one storm in their own namespace, and when the kubelet wrote each."""

    namespace: str
    names: list[str]
    decoy_names: set[str]
    written: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(cls, cluster: RealCluster, kubelet: Kubelet, zombies: int, prefix: str) -> Storm:
        """Running pods, and beside them terminal pods no reaper should delete (the
        CronJob's phase filter takes them all): failed Job pods, evicted pods and
        zombies an operator opted out."""
        ns = cluster.create_namespace(prefix)
        names = [f"web-{index:05d}" for index in range(zombies)]
        node = f"spot-{zombies // PODS_PER_NODE:03d}"
        decoys = [zombie(f"kept-{i}", ns, node=node, annotations={KEEP: "true"}) for i in (0, 1)]
        for i in range(4):
            decoys.append(pod(f"job-failed-{i}", ns, node=node, phase="Failed", owner=JOB))
            decoys.append(evicted(f"evicted-{i}", ns, node=node))
        running = [
            pod(name, ns, node=f"spot-{index // PODS_PER_NODE:03d}")
            for index, name in enumerate(names)
        ]
        kubelet.create_pods([*running, *decoys])
        return cls(ns, names, {body["metadata"]["name"] for body in decoys})

    def judge(self, result: RealResult, cluster: RealCluster, user: str, since: float) -> None:
        """Fill ``result`` from the audit log's requests of ``user`` from ``since`` on: its
        requests, the decoys it deleted, the zombies it missed, reap latencies and time to
        clear."""
        time.sleep(1.0)  # the audit log is written after the answer
        counts: Counter[str] = Counter()
        deleted: dict[str, float] = {}
        for event in cluster.audit(user=user):
            if _epoch(event["requestReceivedTimestamp"]) < since:
                continue
            ref = event.get("objectRef") or {}
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            counts[f"{event['verb']} {ref.get('resource', '-')} {code}"] += 1
            if (
                event["verb"] == "delete"
                and ref.get("namespace") == self.namespace
                and 200 <= code < 300
            ):
                deleted.setdefault(str(ref.get("name")), _epoch(event["stageTimestamp"]))
        result.requests = dict(sorted(counts.items()))
        result.wrong = len(self.decoy_names & set(deleted))
        reaped = {name: deleted[name] for name in self.written if name in deleted}
        result.missed = len(self.written) - len(reaped)
        latencies = [at - self.written[name] for name, at in reaped.items()]
        result.latency_p50_s, result.latency_p99_s = p50_p99(latencies)
        if reaped and not result.missed:
            result.clear_after_last_write_s = max(reaped.values()) - max(self.written.values())


def run_zombied(cluster: RealCluster, kubelet: Kubelet, zombies: int, workdir: Path) -> RealResult:
    """One storm of ``zombies`` pods in a fresh namespace, reaped by zombied at its defaults."""
    storm = Storm.create(cluster, kubelet, zombies, f"storm-{zombies}")
    result = RealResult(reaper="zombied", zombies=zombies)
    daemon = ZombiedProcess(
        cluster.kubeconfig(ZOMBIED_USER),
        workdir,
        name=f"zombied-real-{zombies}",
        extra=("--namespaces", storm.namespace),
    )
    with daemon:
        cpu_before = cpu_seconds(daemon.pid)
        started = time.time()
        written = kubelet.shut_down([(storm.namespace, name) for name in storm.names])
        storm.written = {name: at for (_, name), at in written.items()}
        wait_for(
            lambda: kubelet.pod_names(storm.namespace) <= storm.decoy_names,
            timeout=max(120.0, zombies / 5),
            interval=0.5,
        )
        result.cpu_s = cpu_seconds(daemon.pid) - cpu_before
        result.peak_rss_bytes = high_water_rss(daemon.pid)
    storm.judge(result, cluster, ZOMBIED_USER, since=started)
    return result


def run_schedules(cluster: RealCluster, kubelet: Kubelet, zombies: int) -> list[RealResult]:
    """The CronJob on each schedule of `CRON_PERIODS`, all at once, each on its own storm.

    The kubelet writes every storm at the same moment (one namespace's pod after the
    other's); each schedule's first slot is half its period after the last write: the
    storm lands mid-period, the median wait of a storm arriving at a random moment.
    """
    storms = [
        Storm.create(cluster, kubelet, zombies, f"cron-{period:g}s-{zombies}")
        for period in CRON_PERIODS
    ]
    started = time.time()
    # One pod of each storm in turn, so that every storm's writes span the same time.
    per_storm = ([(storm.namespace, name) for name in storm.names] for storm in storms)
    in_turn = zip(*per_storm, strict=True)  # the storms are of one size
    written = kubelet.shut_down([ref for refs in in_turn for ref in refs])
    last_write = max(written.values())
    for storm in storms:
        storm.written = {name: at for (ns, name), at in written.items() if ns == storm.namespace}

    def zombies_left(storm: Storm) -> int:
        return len(set(storm.written) & kubelet.pod_names(storm.namespace))

    stop = threading.Event()  # set: the schedules start no further run
    with ThreadPoolExecutor(max_workers=len(storms)) as pool:
        try:
            schedules = [
                pool.submit(
                    run_schedule,
                    cluster.kubeconfig(cron_user(period)),
                    namespace=storm.namespace,
                    period=period,
                    first=last_write + period / 2,
                    deadline_s=KUBECTL_DEADLINE_S,
                    zombies_left=functools.partial(zombies_left, storm),
                    stop=stop,
                )
                for period, storm in zip(CRON_PERIODS, storms, strict=True)
            ]
            runs = [schedule.result() for schedule in schedules]
        finally:
            stop.set()
    results = []
    for period, storm, schedule_runs in zip(CRON_PERIODS, storms, runs, strict=True):
        result = RealResult(reaper="kubectl", zombies=zombies, schedule_s=period)
        storm.judge(result, cluster, cron_user(period), since=started)
        _add_runs(result, schedule_runs)
        results.append(result)
    return results


def _add_runs(result: RealResult, runs: Sequence[CronRun]) -> None:
    """A schedule's cost: all its kubectl processes (CPU summed, the highest RSS)."""
    invocations = [invocation for run in runs for invocation in run.invocations]
    result.runs = len(runs)
    result.cpu_s = sum(invocation.cpu_seconds for invocation in invocations)
    result.peak_rss_bytes = max((inv.max_rss_bytes for inv in invocations), default=0)
    for invocation in invocations:
        if invocation.returncode not in (0, -9):
            log(f"  kubectl {invocation.argv_head}: {invocation.stderr_tail[:300]}")
    cut = next((run for run in runs if run.cut_at is not None), None)
    if cut is not None and cut.cut_at is not None:
        result.note = f"cut by its deadline after {cut.cut_at - cut.started:.0f} s"


def run_all(workdir: Path, *, quick: bool = False) -> list[RealResult]:
    """zombied on storms of every size, and the CronJob's schedules on those of
    `KUBECTL_SIZES` (none when quick), on one real API server with an audit log."""
    users = (ZOMBIED_USER, *(cron_user(period) for period in CRON_PERIODS))
    cluster = RealCluster(workdir / "apiserver", admins=users)
    results: list[RealResult] = []
    try:
        cluster.start()
        kubelet = Kubelet(cluster)
        server = cluster.version()
        for zombies in QUICK_SIZES if quick else SIZES:
            batch = [run_zombied(cluster, kubelet, zombies, workdir)]
            if zombies in KUBECTL_SIZES and not quick:
                batch += run_schedules(cluster, kubelet, zombies)
            for result in batch:
                result.server = server
                log(
                    f"real {result.label} {zombies}: cleared "
                    f"{seconds(result.clear_after_last_write_s)} after the last write, "
                    f"{result.missed} missed, {result.wrong} wrong"
                    + (f", {result.note}" if result.note else "")
                )
            results += batch
        kubelet.http.close()
    finally:
        cluster.stop()
    return results


def render(results: Sequence[RealResult]) -> list[str]:
    """The RESULTS.md section of the real-server runs."""
    if not results:
        return []
    rows = []
    for r in results:
        by_code = ", ".join(f"{key} {n:,}" for key, n in r.requests.items())
        notes = [f"{r.runs} run" + ("s" if r.runs > 1 else "")] if r.runs else []
        if r.note:
            notes.append(r.note)
        extra = f" ({'; '.join(notes)})" if notes else ""
        target = CLEAR_TARGETS_S.get(r.zombies) if r.reaper == "zombied" else None
        if target is not None and not math.isnan(r.clear_after_last_write_s):
            verdict = "met" if r.clear_after_last_write_s <= target else "MISSED"
            extra += f" (target {target:.0f} s: {verdict})"
        rows.append(
            f"| {r.label} | {r.zombies:,} | {seconds(r.clear_after_last_write_s)}{extra} "
            f"| {seconds(r.latency_p50_s)} / {seconds(r.latency_p99_s)} | {r.total_requests:,} "
            f"| {by_code} | {r.wrong} | {r.missed} | {r.cpu_s:.2f} s "
            f"| {r.cpu_per_reaped_ms:.2f} ms | {r.peak_rss_bytes / (1 << 20):.0f} MiB |"
        )
    schedules = " and ".join(schedule_label(period) for period in CRON_PERIODS)
    sizes = " and ".join(f"{size:,}" for size in KUBECTL_SIZES)
    lead = (
        "zombied at its defaults, alone on its storm, against the usual CronJob: the real "
        "kubectl listing the Failed pods of its namespace and deleting them by name, "
        f"{schedules}, on the storms of {sizes} zombies (`make bench QUICK=1` runs zombied "
        "alone). The schedules run side by side on the same server, each with its own "
        "namespace, storm and user; the kubelet writes the storms into every namespace at "
        "the same moment. Each schedule's first slot is half its period after the kubelet's "
        "last write: the storm lands mid-period, the median wait of a storm arriving at a "
        "random moment. Time to clear and reap latency are measured from the kubelet's "
        "writes, so they include that real wait. A run overrunning its period skips the "
        "slots it missed (`concurrencyPolicy: Forbid`); a schedule stops once its zombies "
        f"are gone or its first run was cut. A run longer than {KUBECTL_DEADLINE_S:.0f} s is "
        "cut (`activeDeadlineSeconds`): the zombies it did not reach count as missed. "
        "Requests are counted by the API server's audit log, by user (every reaper has its "
        "own), from the first kubelet write to the last delete (zombied's Reaped Events still "
        "queued then are written later, at their own rate, and not counted). CPU is the "
        "kernel's count of user and system time over the same span, per reaped pod in the "
        "next column; a schedule's CPU and peak RSS are those of all its kubectl processes "
        "(summed, highest)."
    )
    server = results[0].server or "(version unknown)"
    return [
        f"## Real kube-apiserver {server} with etcd",
        "",
        *textwrap.wrap(lead, width=88, break_on_hyphens=False),
        "",
        "| reaper | zombies | cleared after the last kubelet write | reap latency p50 / p99 "
        "| requests | by verb, resource, code | wrong deletes | missed | CPU "
        "| CPU per reaped pod | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]
