"""Storms on a real kube-apiserver v1.20.2 with etcd: zombied's defaults vs the CronJob.

The API server and etcd are the test suite's real-server harness
(``tests/realserver``), which keeps an audit log (writes at the ``Request`` level,
everything else at ``Metadata``), so every request of every client is counted by the
server itself, by user agent, verb, resource and status code. There is no kubelet:
this module plays it. It creates the pods (bound to made-up nodes), then writes the
kubelet's node-shutdown status on all of them at once through the ``status``
subresource, as a shutting-down node would; each zombie's time is the answer to that
write. A few terminal pods that are not node-shutdown zombies (a Job pod that failed
on its own, an evicted pod, an opted-out zombie) sit beside them; no reaper should
delete those.

zombied runs as users run it: ``zombied run`` with its defaults (no ``--qps`` or
``--burst``) and leader election. The CronJob is the real kubectl doing what the usual
script does (`bench.cronjob.run_once`), started right after the kubelet's last write:
its time to clear does not count the wait for its schedule, which is added as a model
for a 9-minute and a 1-minute period. Run with ``python -m bench.realserver``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cronjob import CronRun, run_once
from bench.procs import Child, Sampler, free_port, wait_for
from bench.simctl import venv_tool
from bench.stats import LatencySummary, expected_cron_latency, project_remaining

SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
PODS_PER_NODE = 100
HARNESS_AGENT = "zombied-bench-kubelet"
CRON_PERIODS = (540.0, 60.0)
#: Time to clear after the kubelet's last write that zombied's defaults must meet.
CLEAR_TARGETS_S = {200: 10.0, 1_000: 60.0}
#: Storm sizes of `make bench`.
SIZES = (200, 1_000, 10_000)
#: A kubectl run longer than this is cut and its remaining deletes projected at the rate
#: it had (kubectl deletes one pod after the other at client-go's 5 requests/s).
KUBECTL_DEADLINE_S = 240.0
KUBECTL_FALLBACK_QPS = 5.0


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
    projected: int = 0  # deletes a cut kubectl run did not reach, projected

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

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

        def one(name: str) -> tuple[str, float]:
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            status, body = self.call(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                {"status": shutdown_status(now)},
                "application/merge-patch+json",
            )
            if status != 200:
                raise RuntimeError(f"status of {name}: {status} {body}")
            return name, time.time()

        with ThreadPoolExecutor(max_workers=8) as pool:
            return dict(pool.map(one, names))

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
    agent_prefix: str,
    namespace: str,
    written: dict[str, float],
    decoy_names: set[str],
) -> dict[str, float]:
    """Fill ``result`` from the audit events of one reaper (by user agent).

    Returns when each pod of ``namespace`` was deleted (end of the answer).
    """
    counts: Counter[str] = Counter()
    deleted: dict[str, float] = {}
    for event in events:
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
    reaped = {name: at for name, at in deleted.items() if name in written}
    result.missed = len(written) - len(reaped)
    result.cleared = result.missed == 0
    if reaped:
        latencies = [at - written[name] for name, at in reaped.items()]
        summary = LatencySummary.of(latencies)
        result.latency_p50_s, result.latency_p99_s = summary.p50, summary.p99
        if result.cleared:
            result.clear_after_last_write_s = max(reaped.values()) - max(written.values())
    return deleted


def project_cut_run(
    result: RealResult,
    order: Sequence[str],
    deleted: dict[str, float],
    *,
    started: float,
    written: dict[str, float],
    decoy_names: set[str],
) -> None:
    """Complete a kubectl run its deadline cut, at the rate it had (as the simulator runs do)."""
    projection = project_remaining(
        order, deleted, start=started, fallback_rate=KUBECTL_FALLBACK_QPS
    )
    times = {**deleted, **projection.times}
    result.projected = sum(1 for name in projection.times if name in written)
    result.wrong += sum(1 for name in projection.times if name in decoy_names)
    reaped = {name: times[name] for name in written if name in times}
    result.missed = len(written) - len(reaped)
    result.cleared = result.missed == 0
    summary = LatencySummary.of([at - written[name] for name, at in reaped.items()])
    result.latency_p50_s, result.latency_p99_s = summary.p50, summary.p99
    if result.cleared:
        result.clear_after_last_write_s = max(reaped.values()) - max(written.values())
    result.note = f"{result.projected:,} deletes projected at {projection.rate:.1f}/s"


def run_storm(
    cluster: Any, kubelet: Kubelet, zombies: int, reaper: str, workdir: Path
) -> RealResult:
    """One storm of ``zombies`` pods in a fresh namespace, reaped by ``reaper``."""
    namespace = cluster.create_namespace(f"storm-{zombies}")
    nodes = math.ceil(zombies / PODS_PER_NODE)
    pods = [
        running_pod(f"web-{index:05d}", f"spot-{index // PODS_PER_NODE:03d}")
        for index in range(zombies)
    ]
    decoy_pods = decoys(f"spot-{nodes:03d}")
    kubelet.create_pods(namespace, [*pods, *decoy_pods])
    names = [pod["metadata"]["name"] for pod in pods]
    decoy_names = {pod["metadata"]["name"] for pod in decoy_pods}
    result = RealResult(reaper=reaper, zombies=zombies, decoys=len(decoy_pods))
    audit = Path(cluster.workdir) / "audit.log"
    run: CronRun | None = None
    if reaper == "zombied":
        port = free_port()
        argv = [
            venv_tool("zombied"),
            "run",
            "--kubeconfig",
            str(cluster.admin_kubeconfig),
            "--namespaces",
            namespace,
            "--min-age",
            "0s",
            "--listen",
            f"127.0.0.1:{port}",
            "--log-format",
            "json",
            "--leader-elect",
            "--lease-namespace",
            "default",
        ]
        with Child(
            f"zombied-real-{zombies}", argv, log_path=workdir / f"zombied-real-{zombies}.log"
        ) as child:
            if not wait_for(lambda: _leading(port), timeout=60, interval=0.2):
                raise RuntimeError(f"zombied did not start:\n{child.tail()}")
            with Sampler(child.pid, interval=0.25) as sampler:
                sampler.sample()
                started = time.time()
                written = kubelet.shut_down(namespace, names)
                wait_for(
                    lambda: kubelet.count_pods(namespace) <= len(decoy_pods),
                    timeout=max(120.0, zombies / 5),
                    interval=0.5,
                )
                ended = time.time()
                sampler.sample()
                result.cpu_s = sampler.cpu_at(ended) - sampler.cpu_at(started)
                result.peak_rss_bytes = max((rss for _, rss in sampler.rss), default=math.nan)
            time.sleep(1.0)  # the audit log is written after the answer
    else:
        started = time.time()
        written = kubelet.shut_down(namespace, names)
        run = run_once(cluster.admin_kubeconfig, deadline_s=KUBECTL_DEADLINE_S)
        result.cpu_s = run.cpu_seconds
        result.peak_rss_bytes = float(run.max_rss_bytes)
        time.sleep(1.0)
    deleted = judge(
        result,
        list(read_audit(audit, started)),
        agent_prefix="zombied/" if reaper == "zombied" else "kubectl",
        namespace=namespace,
        written=written,
        decoy_names=decoy_names,
    )
    if run is not None and run.cut_at is not None:
        order = [key.split("/", 1)[1] for key in run.order if key.startswith(f"{namespace}/")]
        project_cut_run(
            result,
            order,
            deleted,
            started=run.started,
            written=written,
            decoy_names=decoy_names,
        )
    return result


def _leading(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode(errors="replace")
        conn.close()
    except OSError:
        return False
    return any(line == "zombied_leader 1.0" for line in body.splitlines())


def run_all(workdir: Path, sizes: Sequence[int]) -> list[RealResult]:
    """Both reapers on storms of every size, on one real API server with an audit log."""
    from tests.realserver.cluster import RealCluster  # noqa: PLC0415 - optional harness

    cluster = RealCluster(workdir / "apiserver")
    results: list[RealResult] = []
    try:
        cluster.start()
        kubelet = Kubelet(cluster.url, cluster.tokens["admin"], cluster.ca_pem)
        for zombies in sizes:
            for reaper in ("zombied", "kubectl"):
                result = run_storm(cluster, kubelet, zombies, reaper, workdir)
                print(
                    f"[{time.strftime('%H:%M:%S')}] real {reaper} {zombies}: "
                    f"cleared {result.clear_after_last_write_s:.1f} s after the last write, "
                    f"{result.total_requests} requests, wrong {result.wrong}, "
                    f"missed {result.missed}",
                    flush=True,
                )
                results.append(result)
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
        cron = ""
        if r.reaper == "kubectl" and not math.isnan(r.clear_after_last_write_s):
            waits = [
                f"every {period / 60:.0f} min: p50 "
                f"{expected_cron_latency(period, r.clear_after_last_write_s).p50:.0f} s"
                for period in CRON_PERIODS
            ]
            cron = " (with its schedule " + "; ".join(waits) + ")"
        if r.projected:
            cron += f" ({r.note})"
        target = CLEAR_TARGETS_S.get(r.zombies) if r.reaper == "zombied" else None
        if target is not None and not math.isnan(r.clear_after_last_write_s):
            verdict = "met" if r.clear_after_last_write_s <= target else "MISSED"
            cron += f" (target {target:.0f} s: {verdict})"
        rows.append(
            f"| {r.reaper} | {r.zombies:,} | {_fmt(r.clear_after_last_write_s)}{cron} "
            f"| {_fmt(r.latency_p50_s)} / {_fmt(r.latency_p99_s)} | {r.total_requests:,} "
            f"| {by_code} | {r.wrong} | {r.missed} | {r.cpu_s:.2f} s "
            f"| {r.peak_rss_bytes / (1 << 20):.0f} MiB |"
        )
    return [
        "## Real kube-apiserver v1.20.2 with etcd",
        "",
        "zombied at its defaults against the CronJob's kubectl (one run started right after",
        "the kubelet's last write; the wait for its schedule is modelled; a run longer than",
        f"{KUBECTL_DEADLINE_S:.0f} s is cut and the rest projected at its rate). Requests are",
        "counted by the API server's audit log, by user agent, from the first kubelet write",
        "to the last delete (zombied's Reaped Events still queued then are written later,",
        "at 5/s, and not counted); a cut CronJob run's requests cover only what it reached.",
        "",
        "| reaper | zombies | cleared after the last kubelet write | reap latency p50 / p99 "
        "| requests | by verb, resource, code | wrong deletes | missed | CPU | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]


def _fmt(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="200,1000", help="comma-separated storm sizes")
    parser.add_argument("--out", type=Path, help="write realserver.json here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    reason = harness_available()
    if reason is not None:
        print(f"real-server runs skipped: {reason}", file=sys.stderr)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="zombied-real-"))
    print(f"logs in {workdir}", flush=True)
    results = run_all(workdir, [int(size) for size in args.sizes.split(",")])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "realserver.json").write_text(
            json.dumps([r.to_json() for r in results], indent=1)
        )
    print("\n".join(render(results)))
    return 1 if any(r.reaper == "zombied" and (r.wrong or r.missed) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
