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

zombied runs as users run it: ``zombied run`` with its defaults (no ``--qps`` or
``--burst``) and leader election, alone on its storm. The CronJob is the real kubectl
doing what the usual script does (`bench.cronjob.run_once`, scoped to its namespace),
on real schedules: every 9 minutes, as it is usually set up, and every minute. Both
schedules run side by side on the same server, each with its own namespace, storm and
user; the storm is written into both namespaces at the same moment, and each schedule's
first slot is half its period after the kubelet's last write. A storm lands halfway
through the period: that is the median wait of a storm arriving at a random moment, and
the time to clear and the reap latencies, measured from the kubelet's writes, include
it. A run that overruns its period skips the slots it missed (``concurrencyPolicy:
Forbid``). A schedule stops once its zombies are gone or its first run was cut; a run
longer than its deadline (``activeDeadlineSeconds``) is cut there, and what it did not
reach counts as missed. CPU is each process's user and system time from the kernel's
accounting. Run with ``python -m bench.realserver``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import ssl
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import wait_for

from bench.cronjob import CronJob, CronRun
from bench.procs import Sampler
from bench.simctl import ZombiedProcess
from bench.stats import LatencySummary

SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
PODS_PER_NODE = 100
HARNESS_AGENT = "zombied-bench-kubelet"
#: The CronJob's schedules, run side by side: every 9 minutes as it is usually set up,
#: and every minute.
CRON_PERIODS = (540.0, 60.0)
#: Time to clear after the kubelet's last write that zombied's defaults must meet.
CLEAR_TARGETS_S = {200: 10.0, 1_000: 60.0}
#: Storm sizes of `make bench`: a node's batch, and the design's 1,000-zombie storm.
#: Larger storms at the defaults only measure `--qps` (10,000 zombies at 20/s: 500 s).
SIZES = (200, 1_000)
#: Storm sizes the CronJob's schedules run on too (zombied runs on every size).
KUBECTL_SIZES = (1_000,)
#: A kubectl run longer than this is cut (the job's activeDeadlineSeconds). kubectl
#: deletes at client-go's 5 requests/s: 1,000 zombies take about 200 s.
KUBECTL_DEADLINE_S = 300.0
#: The audit log's username of zombied; each schedule has its own (`cron_user`).
ZOMBIED_USER = "zombied"

T = TypeVar("T")


def cron_user(period: float) -> str:
    """The user (and audit log username) of the schedule with this period."""
    return f"cronjob-every-{period:g}s"


def schedule_label(period: float) -> str:
    """`every 9 min`, `every 1 min`, `every 20 s`."""
    if period >= 60 and period % 60 == 0:
        return f"every {period / 60:.0f} min"
    return f"every {period:g} s"


def first_slot(last_write: float, period: float) -> float:
    """The schedule's first slot: half a period after the storm's last write.

    The storm lands halfway through the period, the median wait of a storm that
    arrives at a random moment of a fixed schedule.
    """
    return last_write + period / 2


def interleave(groups: Sequence[Sequence[T]]) -> list[T]:
    """One item of each group in turn, so that every group's writes span the same time."""
    longest = max((len(group) for group in groups), default=0)
    return [group[index] for index in range(longest) for group in groups if index < len(group)]


def schedule_over(
    runs: Sequence[CronRun], zombies_left: int | None, *, period: float, now: float
) -> bool:
    """Whether a schedule may stop: its storm is cleared or will not be by waiting.

    ``zombies_left`` is counted after its latest run (None: not counted). No run yet:
    not over. Its zombies gone, or its first run cut by the deadline (the projection
    completes it): over. Otherwise it gets one more period after its first run for the
    zombies that run left behind.
    """
    if not runs:
        return False
    if zombies_left == 0 or runs[0].cut_at is not None:
        return True
    return now >= runs[0].finished + period


def harness_available() -> str | None:
    """Why the real-server runs cannot happen here (None: they can)."""
    try:
        from tests.realserver import cluster  # noqa: PLC0415 - optional harness
    except ImportError:
        return "the real-server harness (tests/realserver) is not in this tree"
    reason: str | None = cluster.missing_binaries()
    return reason


@dataclass(slots=True)
class RealResult:
    """One reaper on one storm of the real server."""

    reaper: str
    zombies: int
    decoys: int
    cleared: bool = False
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
    schedule_s: float = 0.0  # the CronJob's period (0: zombied, or a single kubectl run)
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
        if self.reaper != "kubectl":
            return self.reaper
        if not self.schedule_s:
            return "kubectl, one run"
        return f"kubectl {schedule_label(self.schedule_s)}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Kubelet:
    """Writes pods and their shutdown status, on one keep-alive connection per thread."""

    def __init__(self, url: str, token: str, ca_pem: bytes) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 443
        self.token = token
        self.context = ssl.create_default_context(cadata=ca_pem.decode())
        self._local = threading.local()

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=60
            )
            self._local.conn = conn
        headers = {"Authorization": f"Bearer {self.token}", "User-Agent": HARNESS_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            self._local.conn = None
            conn.close()
            raise
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw

    def create_pods(self, namespace: str, pods: Sequence[dict[str, Any]]) -> None:
        def one(pod: dict[str, Any]) -> None:
            status, body = self.call("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
            if status != 201:
                raise RuntimeError(f"create pod: {status} {body}")
            self.call(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
                {"status": pod["status"]},
                "application/merge-patch+json",
            )

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, pods))

    def shut_down(self, namespace: str, names: Sequence[str]) -> dict[str, float]:
        """The kubelet's 1.22+ graceful-shutdown status on every pod: name -> answer time."""
        written = self.shut_down_all([(namespace, name) for name in names])
        return {name: at for (_, name), at in written.items()}

    def shut_down_all(self, pods: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """`shut_down` of (namespace, name) pods, written in this order."""

        def one(pod: tuple[str, str]) -> tuple[tuple[str, str], float]:
            namespace, name = pod
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            status, body = self.call(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                {"status": shutdown_status(now)},
                "application/merge-patch+json",
            )
            if status != 200:
                raise RuntimeError(f"status of {namespace}/{name}: {status} {body}")
            return pod, time.time()

        with ThreadPoolExecutor(max_workers=8) as pool:
            return dict(pool.map(one, pods))

    def pod_names(self, namespace: str) -> set[str]:
        """The names of the pods left in ``namespace``, listed page by page."""
        names: set[str] = set()
        token = ""
        while True:
            query = urlencode({"limit": 500, **({"continue": token} if token else {})})
            status, body = self.call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}")
            if status != 200 or not isinstance(body, dict):
                raise RuntimeError(f"list pods: {status}")
            names.update(str(item["metadata"]["name"]) for item in body.get("items") or [])
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return names

    def count_pods(self, namespace: str) -> int:
        status, body = self.call("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        if status != 200 or not isinstance(body, dict):
            raise RuntimeError(f"list pods: {status}")
        meta = body.get("metadata") or {}
        return len(body.get("items") or []) + int(meta.get("remainingItemCount") or 0)


def running_pod(name: str, node: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels or {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d4f",
                    "uid": "00000000-0000-0000-0000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.example/web:1"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [
                {
                    "name": "app",
                    "image": "registry.example/web:1",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        },
    }


def shutdown_status(now: str) -> dict[str, Any]:
    return {
        "phase": "Failed",
        "reason": "Terminated",
        "message": SHUTDOWN_MESSAGE,
        "conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {
                "name": "app",
                "image": "registry.example/web:1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
        ],
    }


def decoys(node: str) -> list[dict[str, Any]]:
    """Terminal pods no reaper should delete: the CronJob's phase filter takes them all."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    made = []
    for index in range(4):
        pod = running_pod(f"job-failed-{index}", node)
        pod["metadata"]["ownerReferences"][0].update(kind="Job", apiVersion="batch/v1")
        pod["status"] = {**shutdown_status(now), "reason": None, "message": None}
        made.append(pod)
    for index in range(4):
        pod = running_pod(f"evicted-{index}", node)
        pod["status"] = {
            **shutdown_status(now),
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
        }
        made.append(pod)
    for index in range(2):
        pod = running_pod(f"kept-{index}", node)
        pod["metadata"]["annotations"] = {"zombied.io/keep": "true"}
        pod["status"] = shutdown_status(now)
        made.append(pod)
    return made


def read_audit(path: Path, since: float) -> Iterator[dict[str, Any]]:
    """Completed requests from the audit log, from ``since`` (epoch seconds) on."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("stage") != "ResponseComplete":
                continue
            stamp = _epoch(str(event.get("requestReceivedTimestamp", "")))
            if stamp < since:
                continue
            event["_received"] = stamp
            event["_done"] = _epoch(str(event.get("stageTimestamp", "")))
            yield event


def _epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.nan


def judge(
    result: RealResult,
    events: Sequence[dict[str, Any]],
    *,
    namespace: str,
    written: dict[str, float],
    decoy_names: set[str],
    user: str | None = None,
    agent_prefix: str = "",
) -> dict[str, float]:
    """Fill ``result`` from the audit events of one reaper: its ``user`` (the audit log's
    username) and user agent prefix, whichever are given.

    Returns when each pod of ``namespace`` was deleted (end of the answer).
    """
    counts: Counter[str] = Counter()
    deleted: dict[str, float] = {}
    for event in events:
        if user is not None and (event.get("user") or {}).get("username") != user:
            continue
        if not str(event.get("userAgent", "")).startswith(agent_prefix):
            continue
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        verb = str(event.get("verb"))
        counts[f"{verb} {ref.get('resource', '-')} {code}"] += 1
        if verb == "delete" and ref.get("namespace") == namespace and 200 <= code < 300:
            deleted.setdefault(str(ref.get("name")), float(event["_done"]))
    result.requests = dict(sorted(counts.items()))
    result.wrong = sum(1 for name in deleted if name in decoy_names)
    _score(result, deleted, written)
    return deleted


def _score(result: RealResult, deleted: dict[str, float], written: dict[str, float]) -> None:
    """Missed zombies, reap latencies and time to clear from when each pod was deleted."""
    reaped = {name: deleted[name] for name in written if name in deleted}
    result.missed = len(written) - len(reaped)
    result.cleared = result.missed == 0
    if reaped:
        summary = LatencySummary.of([at - written[name] for name, at in reaped.items()])
        result.latency_p50_s, result.latency_p99_s = summary.p50, summary.p99
        if result.cleared:
            result.clear_after_last_write_s = max(reaped.values()) - max(written.values())


def judge_schedule(
    result: RealResult,
    events: Sequence[dict[str, Any]],
    runs: Sequence[CronRun],
    *,
    namespace: str,
    written: dict[str, float],
    decoy_names: set[str],
) -> None:
    """Fill ``result`` for one CronJob schedule: its user's requests and its runs' cost.

    A run its deadline cut leaves the zombies it did not reach: they count as missed.
    """
    judge(
        result,
        events,
        user=cron_user(result.schedule_s),
        namespace=namespace,
        written=written,
        decoy_names=decoy_names,
    )
    result.runs = len(runs)
    result.cpu_s = sum(run.cpu_seconds for run in runs)
    result.peak_rss_bytes = float(max((run.max_rss_bytes for run in runs), default=0))
    cut = next((run for run in runs if run.cut_at is not None), None)
    if cut is not None and cut.cut_at is not None:
        result.note = f"cut by its deadline after {cut.cut_at - cut.started:.0f} s"


@dataclass(slots=True)
class Storm:
    """The pods of one storm in their own namespace, before and after the kubelet's writes."""

    namespace: str
    names: list[str]
    decoy_names: set[str]
    written: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(cls, cluster: Any, kubelet: Kubelet, zombies: int, prefix: str) -> Storm:
        namespace = cluster.create_namespace(prefix)
        nodes = math.ceil(zombies / PODS_PER_NODE)
        pods = [
            running_pod(f"web-{index:05d}", f"spot-{index // PODS_PER_NODE:03d}")
            for index in range(zombies)
        ]
        decoy_pods = decoys(f"spot-{nodes:03d}")
        kubelet.create_pods(namespace, [*pods, *decoy_pods])
        return cls(
            namespace=namespace,
            names=[pod["metadata"]["name"] for pod in pods],
            decoy_names={pod["metadata"]["name"] for pod in decoy_pods},
        )


def run_zombied(cluster: Any, kubelet: Kubelet, zombies: int, workdir: Path) -> RealResult:
    """One storm of ``zombies`` pods in a fresh namespace, reaped by zombied at its defaults."""
    storm = Storm.create(cluster, kubelet, zombies, f"storm-{zombies}")
    namespace = storm.namespace
    result = RealResult(reaper="zombied", zombies=zombies, decoys=len(storm.decoy_names))
    daemon = ZombiedProcess(
        cluster.kubeconfig(ZOMBIED_USER),
        workdir,
        name=f"zombied-real-{zombies}",
        extra=("--namespaces", namespace),
    )
    with daemon, Sampler(daemon.pid, interval=0.25) as sampler:
        sampler.sample()
        started = time.time()
        storm.written = kubelet.shut_down(namespace, storm.names)
        wait_for(
            lambda: kubelet.count_pods(namespace) <= len(storm.decoy_names),
            timeout=max(120.0, zombies / 5),
            interval=0.5,
        )
        sampler.sample()  # the last CPU reading inside the window
        ended = time.time()
        result.cpu_s = sampler.cpu_at(ended) - sampler.cpu_at(started)
        result.peak_rss_bytes = max((rss for _, rss in sampler.rss), default=math.nan)
    time.sleep(1.0)  # the audit log is written after the answer
    judge(
        result,
        list(read_audit(Path(cluster.workdir) / "audit.log", started)),
        user=ZOMBIED_USER,
        agent_prefix="zombied/",
        namespace=namespace,
        written=storm.written,
        decoy_names=storm.decoy_names,
    )
    return result


def run_schedules(
    cluster: Any,
    kubelet: Kubelet,
    zombies: int,
    *,
    periods: Sequence[float] = CRON_PERIODS,
    deadline_s: float = KUBECTL_DEADLINE_S,
) -> list[RealResult]:
    """The CronJob on one schedule per period, all at once, each on its own storm.

    The kubelet writes every storm at the same moment (one namespace's pod after the
    other's); each schedule's first slot is half its period after the last write.
    """
    storms = [
        Storm.create(cluster, kubelet, zombies, f"cron-{period:g}s-{zombies}") for period in periods
    ]
    started = time.time()
    written = kubelet.shut_down_all(
        interleave([[(storm.namespace, name) for name in storm.names] for storm in storms])
    )
    last_write = max(written.values())
    for storm in storms:
        storm.written = {name: at for (ns, name), at in written.items() if ns == storm.namespace}

    def stop_after(storm: Storm, period: float) -> Callable[[Sequence[CronRun]], bool]:
        def over(runs: Sequence[CronRun]) -> bool:
            left = None
            if runs[-1].cut_at is None:
                try:
                    left = len(set(storm.written) & kubelet.pod_names(storm.namespace))
                except (OSError, RuntimeError, http.client.HTTPException):
                    left = None  # not counted: the time bound ends the schedule
            return schedule_over(runs, left, period=period, now=time.time())

        return over

    crons = [
        CronJob(
            cluster.kubeconfig(cron_user(period)),
            period=period,
            first=first_slot(last_write, period),
            deadline_s=deadline_s,
            namespace=storm.namespace,
            stop_after=stop_after(storm, period),
        )
        for period, storm in zip(periods, storms, strict=True)
    ]
    # A bound on the wait whatever happens: the last first slot, then a run to its
    # deadline, one period, and another run to its deadline.
    give_up = last_write + max(periods) * 1.5 + 2 * deadline_s + 120
    with ExitStack() as stack:
        for cron in crons:
            stack.enter_context(cron)
        # Each schedule ends itself after a run (`stop_after`); this ends one whose
        # first run left zombies behind, a period after that run.
        while any(cron.running for cron in crons):
            now = time.time()
            for cron in crons:
                runs = cron.completed_runs()
                if cron.running and (
                    schedule_over(runs, None, period=cron.period, now=now) or now > give_up
                ):
                    if now > give_up:
                        print(f"kubectl {schedule_label(cron.period)}: gave up waiting", flush=True)
                    cron.halt()
            time.sleep(0.5)
    for cron in crons:
        if cron.errors:
            raise RuntimeError(f"kubectl {schedule_label(cron.period)}: {cron.errors}")
    time.sleep(1.0)  # the audit log is written after the answer
    events = list(read_audit(Path(cluster.workdir) / "audit.log", started))
    results = []
    for period, storm, cron in zip(periods, storms, crons, strict=True):
        result = RealResult(
            reaper="kubectl", zombies=zombies, decoys=len(storm.decoy_names), schedule_s=period
        )
        runs = cron.completed_runs()
        for run in runs:
            for invocation in run.invocations:
                if invocation.returncode not in (0, -9):
                    print(
                        f"  kubectl {invocation.argv_head}: {invocation.stderr_tail[:300]}",
                        flush=True,
                    )
        judge_schedule(
            result,
            events,
            runs,
            namespace=storm.namespace,
            written=storm.written,
            decoy_names=storm.decoy_names,
        )
        results.append(result)
    return results


def run_all(
    workdir: Path,
    sizes: Sequence[int],
    *,
    kubectl_sizes: Sequence[int] = KUBECTL_SIZES,
    periods: Sequence[float] = CRON_PERIODS,
    kubectl_deadline_s: float = KUBECTL_DEADLINE_S,
) -> list[RealResult]:
    """zombied on storms of every size, and the CronJob's schedules on those of
    ``kubectl_sizes``, on one real API server with an audit log."""
    from tests.realserver.cluster import RealCluster  # noqa: PLC0415 - optional harness

    users = (ZOMBIED_USER, *(cron_user(period) for period in periods))
    cluster = RealCluster(workdir / "apiserver", admins=users)
    results: list[RealResult] = []
    try:
        cluster.start()
        kubelet = Kubelet(cluster.url, cluster.tokens["admin"], cluster.ca_pem)
        server = cluster.version()
        for zombies in sizes:
            batch = [run_zombied(cluster, kubelet, zombies, workdir)]
            if zombies in kubectl_sizes:
                batch += run_schedules(
                    cluster, kubelet, zombies, periods=periods, deadline_s=kubectl_deadline_s
                )
            for result in batch:
                result.server = server
                print(
                    f"[{time.strftime('%H:%M:%S')}] real {result.label} {zombies}: "
                    f"cleared {result.clear_after_last_write_s:.1f} s after the last write, "
                    f"CPU {result.cpu_per_reaped_ms:.2f} ms per reaped pod, "
                    f"{result.total_requests} requests, wrong {result.wrong}, "
                    f"missed {result.missed}"
                    + (f", runs: {result.runs}" if result.runs else "")
                    + (f", {result.note}" if result.note else ""),
                    flush=True,
                )
            results += batch
    finally:
        cluster.stop()
    return results


def render(
    results: Sequence[RealResult], *, kubectl_deadline_s: float = KUBECTL_DEADLINE_S
) -> list[str]:
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
            f"| {r.label} | {r.zombies:,} | {_fmt(r.clear_after_last_write_s)}{extra} "
            f"| {_fmt(r.latency_p50_s)} / {_fmt(r.latency_p99_s)} | {r.total_requests:,} "
            f"| {by_code} | {r.wrong} | {r.missed} | {r.cpu_s:.2f} s "
            f"| {r.cpu_per_reaped_ms:.2f} ms | {r.peak_rss_bytes / (1 << 20):.0f} MiB |"
        )
    periods = sorted({r.schedule_s for r in results if r.schedule_s}, reverse=True)
    with_kubectl = sorted({r.zombies for r in results if r.reaper == "kubectl"})
    alone = sorted({r.zombies for r in results} - set(with_kubectl))
    lead = (
        "zombied at its defaults, alone on its storm, against the usual CronJob: the real "
        "kubectl listing the Failed pods of its namespace and deleting them by name."
    )
    if periods:
        schedules = " and ".join(schedule_label(period) for period in periods)
        together = (
            "the schedules side by side on the same server, each with its own namespace, "
            "storm and user; the kubelet writes the storms into every namespace at the same "
            "moment"
            if len(periods) > 1
            else "in its own namespace, as its own user"
        )
        lead += (
            f" The CronJob runs for real, {schedules}: {together}. Each schedule's first slot "
            "is half its period after the kubelet's last write: the storm lands mid-period, "
            "the median wait of a storm arriving at a random moment. Time to clear and reap "
            "latency are measured from the kubelet's writes, so they include that real wait. "
            "A run overrunning its period skips the slots it missed (`concurrencyPolicy: "
            "Forbid`); a schedule stops once its zombies are gone or its first run was cut. "
            f"A run longer than {kubectl_deadline_s:.0f} s is cut (`activeDeadlineSeconds`): "
            "the zombies it did not reach count as missed."
        )
    if alone and with_kubectl:
        sizes = " and ".join(f"{size:,}" for size in with_kubectl)
        lead += f" The CronJob runs on the storms of {sizes} zombies only."
    lead += (
        " Requests are counted by the API server's audit log, by user (every reaper has its "
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


def _fmt(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _numbers(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        default=",".join(str(size) for size in SIZES),
        help="comma-separated storm sizes (default %(default)s)",
    )
    parser.add_argument(
        "--kubectl-sizes",
        default=",".join(str(size) for size in KUBECTL_SIZES),
        help="the storm sizes the CronJob runs on too (default %(default)s)",
    )
    parser.add_argument(
        "--cron-periods",
        default=",".join(f"{period:g}" for period in CRON_PERIODS),
        help="the CronJob's schedules, run side by side: periods in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--kubectl-deadline",
        type=float,
        default=KUBECTL_DEADLINE_S,
        help="seconds after which a kubectl run is cut (default %(default)g)",
    )
    parser.add_argument("--out", type=Path, help="write realserver.json here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    periods = _numbers(args.cron_periods)
    if len(set(periods)) != len(periods) or any(period <= 0 for period in periods):
        parser.error("--cron-periods: distinct positive periods")
    reason = harness_available()
    if reason is not None:
        print(f"real-server runs skipped: {reason}", file=sys.stderr)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="zombied-real-"))
    print(f"logs in {workdir}", flush=True)
    results = run_all(
        workdir,
        [int(size) for size in _numbers(args.sizes)],
        kubectl_sizes=[int(size) for size in _numbers(args.kubectl_sizes)],
        periods=periods,
        kubectl_deadline_s=args.kubectl_deadline,
    )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "realserver.json").write_text(
            json.dumps([r.to_json() for r in results], indent=1)
        )
    print("\n".join(render(results, kubectl_deadline_s=args.kubectl_deadline)))
    return 1 if any(r.reaper == "zombied" and (r.wrong or r.missed) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
