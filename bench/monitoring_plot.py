"""The monitoring picture: the dashboard's main panels, drawn from a real Prometheus.

``python -m bench.monitoring_plot`` (``make monitoring-plot``) starts the simulator,
``zombied run`` and Debian's Prometheus server (unpacked by ``make prometheus``) scraping
zombied every second with the alert rules loaded, plays a storm (a backlog of old
zombies, then several nodes shut down at once, with throttled deletes and refused
Events), then runs the Grafana dashboard's own queries through Prometheus's
``query_range`` API and draws them into ``bench/monitoring.png`` with matplotlib. It is
not a Grafana screenshot, and the picture says so. `scraped_storm` is also the set-up of
the end-to-end monitoring test, so the test checks the very queries this draws.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")

# The backend must be chosen before pyplot loads.
import matplotlib.pyplot as plt
from tests.helpers import LOOPBACK, wait_for

from bench.prometheus import Prometheus
from bench.simctl import REPO, SimProcess, ZombiedProcess

MONITORING = REPO / "manifests" / "components" / "monitoring"
DASHBOARD = MONITORING / "dashboard.json"
RULES = MONITORING / "zombied-rules.yaml"
#: One DELETE refused (403), then three throttled (429): counted, not random.
_PUSHBACK = [
    "error:verb=delete,resource=pods,status=403,count=1",
    "error:verb=delete,resource=pods,status=429,retry_after=1,count=3",
]
#: Grafana's ``$__rate_interval`` is at least four scrape intervals.
RATE_INTERVAL = "4s"


@dataclass(frozen=True, slots=True)
class Target:
    """One query of a dashboard panel, with the legend naming the labels it shows."""

    panel: str
    ref: str
    expr: str
    legend: str

    @property
    def promql(self) -> str:
        """The query as Prometheus runs it (Grafana's interval variables filled in)."""
        return self.expr.replace("$__rate_interval", RATE_INTERVAL)

    @property
    def legend_labels(self) -> tuple[str, ...]:
        """Labels the legend prints: every series of the answer must carry them."""
        return tuple(re.findall(r"\{\{\s*(\w+)\s*\}\}", self.legend))


def dashboard_targets(path: Path = DASHBOARD) -> list[Target]:
    """Every query of every panel of the dashboard, in panel order."""
    dashboard = json.loads(path.read_text())
    return [
        Target(panel["title"], target["refId"], target["expr"], target.get("legendFormat", ""))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


@dataclass(frozen=True, slots=True)
class Scale:
    """How big a storm to play: the test's is small, the picture's larger."""

    nodes: int = 10
    pods: int = 100
    backlog_nodes: int = 2
    storm_nodes: int = 2
    qps: int = 5
    linger: float = 2.0


@dataclass(slots=True)
class Run:
    """A finished storm, with Prometheus still serving what it scraped."""

    prometheus: Prometheus
    start: float
    backlog_seen: float
    storm_at: float
    end: float
    backlog: int
    zombies: int
    deleted: int
    metrics_text: str


@contextmanager
def scraped_storm(workdir: Path, scale: Scale = Scale()) -> Iterator[Run]:
    """Play the storm with Prometheus scraping zombied; yield while Prometheus still runs."""
    with ExitStack() as stack:
        sim = SimProcess(workdir)
        zombied = ZombiedProcess(
            sim.kubeconfig,
            workdir,
            name="zombied",
            extra=[f"--qps={scale.qps}", f"--burst={scale.qps}", "--watch-timeout=5s"],
        )
        # Prometheus takes seconds to begin scraping: let it start while the cluster is built.
        prometheus = stack.enter_context(
            Prometheus(workdir / "prometheus", [f"{LOOPBACK}:{zombied.port}"], rule_files=[RULES])
        )
        stack.enter_context(sim)
        sim.build(nodes=scale.nodes, pods=scale.pods, namespaces=["shop", "batch"])
        names = sim.node_names()
        backlog_pods = sim.pods_on(names[: scale.backlog_nodes])
        # Zombies an hour old: a backlog zombied finds on its first LIST.
        backlog = len(sim.shut_down(backlog_pods, now=datetime.now(UTC) - timedelta(hours=1)))
        prometheus.wait_scraping()
        start = time.time()
        stack.enter_context(zombied)
        backlog_seen = time.time()
        # Once zombied is ready (a refused Event or DELETE makes it not ready, by design):
        # Events refused as with a missing RBAC rule, watches cut every few seconds, and
        # pushback on DELETEs now and again when the storm starts (a counter series is
        # born at its first increment, which increase() cannot see: the second round
        # makes it move). Each alert expression and panel gets something to see.
        faults = ["error:verb=create,resource=events,status=403", "cut-every:3", *_PUSHBACK]
        sim.http.json("POST", "/_sim/faults", {"specs": faults})
        if not wait_for(lambda: sim.deleted_count() >= backlog, timeout=120):
            raise RuntimeError(f"the backlog was not cleared:\n{zombied.child.tail()}")
        sim.http.json("POST", "/_sim/faults", {"specs": _PUSHBACK})
        storm_at = time.time()
        storm_nodes = names[scale.backlog_nodes :][: scale.storm_nodes]
        zombies = backlog + len(sim.shut_down(sim.pods_on(storm_nodes)))
        if not wait_for(lambda: sim.deleted_count() >= zombies, timeout=180):
            raise RuntimeError(f"the storm was not cleared:\n{zombied.child.tail()}")
        # Wait for Prometheus to have stored scrapes ``linger`` seconds past the last
        # delete, so that the rate windows show the tail of the storm.
        done = time.time() + scale.linger

        def scraped_after_done() -> bool:
            result = prometheus.query("timestamp(up)")["result"]
            return bool(result) and float(result[0]["value"][1]) > done

        if not wait_for(scraped_after_done, timeout=60, interval=0.2):
            raise RuntimeError(f"Prometheus stopped scraping:\n{prometheus.child.tail()}")
        _, body = zombied.http.request("GET", "/metrics")
        yield Run(
            prometheus=prometheus,
            start=start,
            backlog_seen=backlog_seen,
            storm_at=storm_at,
            end=time.time(),
            backlog=backlog,
            zombies=zombies,
            deleted=sim.deleted_count(),
            metrics_text=body.decode(),
        )


# -- the picture -------------------------------------------------------------------------

#: The panels drawn, in the order of the picture.
MAIN_PANELS = (
    "Zombies reaped by rule and outcome",
    "Zombies known and overdue",
    "Delete rate vs the limit",
    "Reap latency",
    "API errors by code",
    "Watch health",
)


def _legend(target: Target, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), target.legend)


def draw(run: Run, path: Path) -> Path:
    """Draw the main panels from ``run``'s Prometheus into ``path``."""
    targets = dashboard_targets()
    figure, axes = plt.subplots(2, 3, figsize=(17, 8.5), constrained_layout=True)
    for axis, title in zip(axes.flat, MAIN_PANELS, strict=True):
        for target in (t for t in targets if t.panel == title):
            answer = run.prometheus.query_range(target.promql, run.start, run.end, 1.0)
            for series in answer["result"]:
                points = [
                    (float(ts) - run.start, float(value))
                    for ts, value in series["values"]
                    if not math.isnan(float(value))
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    axis.plot(xs, ys, label=_legend(target, series["metric"]) or target.ref)
        for moment, what in ((run.backlog_seen, "zombied ready"), (run.storm_at, "storm")):
            axis.axvline(moment - run.start, color="grey", linestyle=":", linewidth=1)
            axis.annotate(
                what,
                (moment - run.start, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="grey",
                rotation=90,
                va="top",
                ha="right",
            )
        axis.set_title(title)
        axis.set_xlabel("seconds since Prometheus started scraping")
        axis.grid(visible=True, alpha=0.3)
        axis.legend(fontsize=7, loc="upper right")
    figure.suptitle(
        "zombied's dashboard queries drawn with matplotlib from a real Prometheus 2.42 scraping "
        "zombied every 1 s on the simulator (not a Grafana screenshot)\n"
        f"{run.backlog} zombies an hour old, then {run.zombies - run.backlog} from a storm; "
        "twice one DELETE refused (403) and three throttled (429), every Event refused (403), "
        "watches cut every 3 s",
        fontsize=10,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def main() -> int:
    scale = Scale(nodes=20, pods=600, backlog_nodes=2, storm_nodes=6, qps=8, linger=10.0)
    with tempfile.TemporaryDirectory(prefix="zombied-monitoring-") as tmp:
        workdir = Path(tmp)
        with scraped_storm(workdir, scale) as run:
            out = draw(run, REPO / "bench" / "monitoring.png")
    print(f"wrote {out}: {run.zombies} zombies, {run.deleted} deletes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
