"""The benchmark's results as data, and their rendering as markdown.

`PhaseResult` is one measured phase (a reaper, a cluster size, a scenario); the
functions below turn a list of them into the tables of `bench/RESULTS.md`. Rendering
is pure (results in, text out) so it is unit-tested without running anything; this
module must never start a process or read a clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.stats import LatencySummary, VerbCost, per_minute, ratio, total_cost

ZOMBIED = "zombied"
CRONJOB = "cronjob"


@dataclass(slots=True)
class PhaseResult:
    """Figures for one reaper on one scenario at one cluster size."""

    reaper: str
    pods: int
    nodes: int
    scenario: str  # "steady", "storm", "trickle"
    setting: str  # e.g. "qps 1000" or "period 60 s"
    window_s: float
    zombies: int = 0
    latencies: list[float] = field(default_factory=list)
    clear_s: float = math.nan
    costs: dict[str, VerbCost] = field(default_factory=dict)
    peak_rss_bytes: float = math.nan
    cpu_s: float = math.nan
    missed: int = 0
    missed_note: str = ""
    wrong: int = 0
    wrong_examples: list[str] = field(default_factory=list)
    zombies_held: int = 0  # zombies alive in the cluster while RSS was measured
    cost_zombies: int = -1  # zombies the API cost covers; -1: the same as `zombies`
    cost_note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def latency(self) -> LatencySummary:
        return LatencySummary.of(self.latencies)

    @property
    def requests(self) -> int:
        return total_cost(self.costs).requests

    @property
    def bytes(self) -> int:
        return total_cost(self.costs).bytes

    @property
    def projected(self) -> float:
        return self.extra.get("projected", 0.0)

    @property
    def requests_per_zombie(self) -> float:
        covered = self.zombies if self.cost_zombies < 0 else self.cost_zombies
        return self.requests / covered if covered else math.nan

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["costs"] = {verb: asdict(cost) for verb, cost in self.costs.items()}
        # Tenths of a millisecond are below anything measured here; keeps the file small.
        data["latencies"] = [round(value, 4) for value in self.latencies]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseResult:
        values = dict(data)
        values["costs"] = {verb: VerbCost(**cost) for verb, cost in values["costs"].items()}
        return cls(**values)


def fmt_seconds(value: float | None) -> str:
    """Seconds in a unit a reader compares at a glance: ms below 1 s, s below 10 min."""
    if value is None or math.isnan(value):
        return "-"
    if value < 1.0:
        return f"{value * 1000:.0f} ms" if value >= 0.01 else f"{value * 1000:.1f} ms"
    if value < 600:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def fmt_bytes(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def fmt_ratio(value: float | None) -> str:
    """zombied / CronJob; below 1 means zombied is smaller (faster, cheaper)."""
    if value is None or math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:.0f}x"
    if value >= 0.1:
        return f"{value:.2f}x"
    return f"{value:.3f}x" if value >= 0.001 else f"{value:.1e}x"


def fmt_pct(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * 100:.0f} %"


def fmt_count(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub markdown table; the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join([" --- "] + [" ---: "] * (len(headers) - 1)) + "|")
    lines.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def find(
    results: Iterable[PhaseResult], reaper: str, pods: int, scenario: str
) -> PhaseResult | None:
    for result in results:
        if result.reaper == reaper and result.pods == pods and result.scenario == scenario:
            return result
    return None


def sizes(results: Iterable[PhaseResult]) -> list[int]:
    return sorted({result.pods for result in results})


def comparison_rows(results: Sequence[PhaseResult], scenario: str) -> list[list[str]]:
    """One row per figure and cluster size: zombied, CronJob, and their ratio."""
    rows: list[list[str]] = []
    for pods in sizes(results):
        zombied = find(results, ZOMBIED, pods, scenario)
        cron = find(results, CRONJOB, pods, scenario)
        if zombied is None and cron is None:
            continue
        figures: list[tuple[str, float | None, float | None, Any]] = [
            ("zombies", _get(zombied, "zombies"), _get(cron, "zombies"), fmt_count),
            ("reap latency p50", _lat(zombied, "p50"), _lat(cron, "p50"), fmt_seconds),
            ("reap latency p99", _lat(zombied, "p99"), _lat(cron, "p99"), fmt_seconds),
            ("reap latency max", _lat(zombied, "max"), _lat(cron, "max"), fmt_seconds),
            (
                "  status changes spread over",
                _extra(zombied, "arrival_s"),
                _extra(cron, "arrival_s"),
                fmt_seconds,
            ),
            ("time to clear", _get(zombied, "clear_s"), _get(cron, "clear_s"), fmt_seconds),
            (
                "  after the last status change",
                _extra(zombied, "drain_s"),
                _extra(cron, "drain_s"),
                fmt_seconds,
            ),
            ("API requests", _get(zombied, "requests"), _get(cron, "requests"), fmt_count),
            ("API response bytes", _get(zombied, "bytes"), _get(cron, "bytes"), fmt_bytes),
            (
                "API requests per zombie",
                _get(zombied, "requests_per_zombie"),
                _get(cron, "requests_per_zombie"),
                fmt_count,
            ),
            (
                "peak RSS",
                _get(zombied, "peak_rss_bytes"),
                _get(cron, "peak_rss_bytes"),
                fmt_bytes,
            ),
            ("CPU seconds", _get(zombied, "cpu_s"), _get(cron, "cpu_s"), _fmt_cpu),
            ("  CPU per zombie", _cpu_per_zombie(zombied), _cpu_per_zombie(cron), _fmt_cpu_ms),
            (
                "  simulator's CPU seconds meanwhile",
                _extra(zombied, "sim_cpu_s"),
                _extra(cron, "sim_cpu_s"),
                _fmt_cpu,
            ),
            (
                "  harness CPU seconds (writing the storm)",
                _extra(zombied, "harness_cpu_s"),
                None,
                _fmt_cpu,
            ),
            ("  machine busy (both cores)", _extra(zombied, "machine_busy"), None, fmt_pct),
            ("zombies missed", _get(zombied, "missed"), _get(cron, "missed"), fmt_count),
            ("wrong deletes", _get(zombied, "wrong"), _get(cron, "wrong"), fmt_count),
        ]
        projected = _get(cron, "projected")
        if projected:
            figures.insert(
                1, ("  of which projected (run cut by its deadline)", 0.0, projected, fmt_count)
            )
        for label, left, right, fmt in figures:
            if left is None and right is None and label.startswith(("  harness", "  machine")):
                continue
            show_ratio = label not in {"zombies", "zombies missed", "wrong deletes"} and not (
                label.startswith(("  of which", "  harness", "  machine", "  status"))
            )
            right_text = fmt(right)
            if projected and label in PARTIAL_WHEN_CUT and right is not None:
                # The cut run paid for part of the deletes only: no honest ratio.
                right_text += " (cut run only)"
                show_ratio = False
            rows.append(
                [
                    f"{pods:,} pods",
                    label,
                    fmt(left),
                    right_text,
                    fmt_ratio(ratio(left, right)) if show_ratio else "",
                ]
            )
    return rows


PARTIAL_WHEN_CUT = frozenset(
    {
        "API requests",
        "API response bytes",
        "CPU seconds",
        "  simulator's CPU seconds meanwhile",
    }
)


def _fmt_cpu(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2f} s"


_SHARED = frozenset({"requests", "bytes", "requests_per_zombie", "cpu_s", "peak_rss_bytes"})


def _get(result: PhaseResult | None, name: str) -> float | None:
    if result is None:
        return None
    if name in _SHARED and result.extra.get("cost_shared"):
        return None  # shown once, on the row of the run that paid for it
    value = getattr(result, name)
    return float(value)


def _cpu_per_zombie(result: PhaseResult | None) -> float | None:
    cpu = _get(result, "cpu_s")
    if result is None or not result.zombies or cpu is None or math.isnan(cpu):
        return None
    if _get(result, "projected"):
        return None  # a cut run's CPU covers only part of its zombies
    return cpu / result.zombies


def _fmt_cpu_ms(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.2f} ms"


def _extra(result: PhaseResult | None, name: str) -> float | None:
    if result is None or name not in result.extra:
        return None
    return float(result.extra[name])


def _lat(result: PhaseResult | None, name: str) -> float | None:
    if result is None:
        return None
    return float(getattr(result.latency, name))


def steady_rows(results: Sequence[PhaseResult]) -> list[list[str]]:
    """Idle cost per minute: requests and bytes by verb, RSS, CPU."""
    rows: list[list[str]] = []
    for pods in sizes(results):
        for reaper in (ZOMBIED, CRONJOB):
            result = find(results, reaper, pods, "steady")
            if result is None:
                continue
            verbs = ", ".join(
                f"{verb} {per_minute(cost.requests, result.window_s):.1f}"
                for verb, cost in result.costs.items()
            )
            total = total_cost(result.costs)
            rows.append(
                [
                    f"{pods:,} pods",
                    f"{reaper} ({result.setting})",
                    fmt_seconds(result.window_s),
                    f"{per_minute(total.requests, result.window_s):.1f}",
                    verbs or "none",
                    fmt_bytes(per_minute(total.bytes, result.window_s)),
                    fmt_seconds(per_minute(total.seconds, result.window_s)),
                    fmt_bytes(result.peak_rss_bytes),
                    _fmt_cpu(per_minute(result.cpu_s, result.window_s)),
                ]
            )
    return rows


def cost_rows(results: Sequence[PhaseResult]) -> list[list[str]]:
    """API requests and bytes by verb for every phase."""
    rows: list[list[str]] = []
    for result in sorted(results, key=lambda r: (r.pods, r.scenario, r.reaper)):
        if result.extra.get("cost_shared"):
            continue
        for verb, cost in result.costs.items():
            rows.append(
                [
                    f"{result.pods:,} pods",
                    result.scenario,
                    f"{result.reaper} ({result.setting})",
                    verb,
                    fmt_count(cost.requests),
                    fmt_bytes(cost.bytes),
                    fmt_seconds(cost.seconds),
                ]
            )
    return rows


def memory_rows(results: Sequence[PhaseResult]) -> list[list[str]]:
    """zombied's RSS by cluster size, for each scenario, with the zombies it was holding."""
    rows: list[list[str]] = []
    for scenario in ("steady", "trickle", "storm"):
        for pods in sizes(results):
            result = find(results, ZOMBIED, pods, scenario)
            if result is None:
                continue
            rows.append(
                [
                    scenario,
                    f"{pods:,}",
                    fmt_count(result.zombies),
                    fmt_bytes(result.peak_rss_bytes),
                ]
            )
    return rows


def rss_growth(results: Sequence[PhaseResult], scenario: str) -> float | None:
    """Relative growth of zombied's peak RSS from the smallest to the largest cluster."""
    by_size = [
        result
        for pods in sizes(results)
        if (result := find(results, ZOMBIED, pods, scenario)) is not None
        and not math.isnan(result.peak_rss_bytes)
    ]
    if len(by_size) < 2:
        return None
    return ratio(by_size[-1].peak_rss_bytes, by_size[0].peak_rss_bytes)


#: CPU seconds per reaped pod in the largest storm, on the benchmark's 2-core machine.
CPU_PER_ZOMBIE_TARGET_S = 0.0007


def targets_rows(results: Sequence[PhaseResult]) -> list[list[str]]:
    """design.md's scale and cost targets against what zombied measured."""
    rows: list[list[str]] = []
    mine = [r for r in results if r.reaper == ZOMBIED]
    for result in mine:
        if result.scenario not in ("trickle", "storm") or not result.latencies:
            continue
        lat = result.latency
        floor = (
            result.extra.get("floor_p50", math.nan),
            result.extra.get("floor_p99", math.nan),
            result.extra.get("floor_max", math.nan),
        )
        excess = lat.p99 - floor[1]
        rows.append(
            [
                f"reap latency, min age 0, {result.pods:,} pods, {result.scenario} "
                f"({result.setting})",
                "within tens of ms of the rate limit's own floor (p99 excess <= 100 ms); "
                f"floor p50/p99/max {fmt_seconds(floor[0])} / {fmt_seconds(floor[1])} / "
                f"{fmt_seconds(floor[2])}",
                f"p50 {fmt_seconds(lat.p50)}, p99 {fmt_seconds(lat.p99)}, "
                f"max {fmt_seconds(lat.max)}",
                "met" if excess <= 0.1 else _missed_because(result, excess),
            ]
        )
    storms = [r for r in mine if r.scenario == "storm" and r.zombies]
    if storms:
        largest = max(storms, key=lambda r: r.pods)
        per_zombie = largest.cpu_s / largest.zombies
        busy = largest.extra.get("machine_busy", math.nan)
        rows.append(
            [
                f"CPU per reaped pod, {largest.pods:,}-pod storm ({largest.setting})",
                "<= 0.70 ms",
                _fmt_cpu_ms(per_zombie),
                "met"
                if per_zombie <= CPU_PER_ZOMBIE_TARGET_S
                else f"missed by {_fmt_cpu_ms(per_zombie - CPU_PER_ZOMBIE_TARGET_S)} "
                f"(machine {fmt_pct(busy)} busy; see the profile)",
            ]
        )
    lists = sum(r.costs["list"].requests for r in mine if "list" in r.costs)
    rows.append(
        [
            "no periodic LIST (after the first list, in every measured window)",
            "0 LIST",
            f"{lists} LIST",
            "met" if lists == 0 else "missed",
        ]
    )
    watches = [r.extra.get("open_watches", math.nan) for r in mine if r.scenario == "steady"]
    known = [w for w in watches if not math.isnan(w)]
    if known:
        rows.append(
            [
                "one open watch per scope (cluster-wide: 1)",
                "1",
                ", ".join(fmt_count(w) for w in known),
                "met" if all(w == 1 for w in known) else "missed",
            ]
        )
    for scenario in ("steady", "trickle"):
        growth = rss_growth(results, scenario)
        if growth is None:
            continue
        rows.append(
            [
                f"flat RSS from {sizes(mine)[0]:,} to {sizes(mine)[-1]:,} running pods "
                f"({scenario})",
                "growth <= 10 %",
                f"{(growth - 1) * 100:+.1f} %",
                "met" if growth <= 1.10 else f"missed by {(growth - 1.10) * 100:.1f} points",
            ]
        )
    return rows


def _missed_because(result: PhaseResult, excess: float) -> str:
    text = f"missed: p99 {fmt_seconds(excess)} above the floor"
    busy = result.extra.get("machine_busy")
    if busy is None or math.isnan(busy):
        return text
    return (
        f"{text}; in its {fmt_seconds(result.window_s)} window zombied used "
        f"{_fmt_cpu(result.cpu_s)} CPU, the simulator "
        f"{_fmt_cpu(result.extra.get('sim_cpu_s'))}, the machine was {fmt_pct(busy)} busy"
    )


def summary_lines(results: Sequence[PhaseResult]) -> str:
    """A few lines for the terminal at the end of a run."""
    lines = []
    for result in results:
        lat = result.latency
        lines.append(
            f"{result.reaper:8} {result.pods:>7,} pods {result.scenario:8} "
            f"zombies {result.zombies:>6} p50 {fmt_seconds(lat.p50):>9} "
            f"p99 {fmt_seconds(lat.p99):>9} "
            f"max {fmt_seconds(lat.max):>9} req {result.requests:>6} "
            f"rss {fmt_bytes(result.peak_rss_bytes):>9} missed {result.missed} wrong {result.wrong}"
        )
    return "\n".join(lines)


def render_document(
    results: Sequence[PhaseResult],
    *,
    facts: Mapping[str, str],
    plan: Mapping[str, Any],
    elapsed_s: float,
    picture: str,
    generated: str,
    command: str,
    model: Callable[[float], LatencySummary],
    notes: Sequence[str] = (),
    appendix: Sequence[str] = (),
    lead: Sequence[str] = (),
) -> str:
    """The whole of RESULTS.md; ``lead`` comes first, after the title."""
    period = float(plan["cron_period_s"])
    parts: list[str] = [
        "# zombied benchmark",
        "",
        f"Generated by `{command}` on {generated}; the run took {elapsed_s:.0f} s. "
        "Do not edit: rerun the command.",
        "",
        *lead,
        f"![reap-latency distributions and RSS against cluster size]({picture})",
        "",
        "## Machine",
        "",
        markdown_table(["", ""], [[name, value] for name, value in facts.items()]),
        "",
        "## What runs",
        "",
        _scenario_text(plan),
        "",
        "Ratios are zombied / CronJob: below 1 means zombied is faster or cheaper.",
        "",
        "## Storm: 10 % of the nodes shut down at once",
        "",
        markdown_table(
            ["cluster", "figure", "zombied", "CronJob", "ratio"], comparison_rows(results, "storm")
        ),
        "",
        "## Trickle: one node every few seconds",
        "",
        markdown_table(
            ["cluster", "figure", "zombied", "CronJob", "ratio"],
            comparison_rows(results, "trickle"),
        ),
        "",
        "## Steady state: no preemptions",
        "",
        "Per minute. The CronJob's figures are one empty run (discovery, then the LIST of "
        f"Failed pods) scaled to its period of {period:.0f} s.",
        "",
        markdown_table(
            [
                "cluster",
                "reaper",
                "window",
                "requests/min",
                "by verb /min",
                "bytes/min",
                "server time/min",
                "peak RSS",
                "CPU/min",
            ],
            steady_rows(results),
        ),
        "",
        "## Memory against cluster size",
        "",
        "zombied's peak RSS while the cluster held the given number of running pods. "
        "Steady and trickle hold the same number of zombies at every size; the storm's "
        "zombies are 10 % of the pods, so its memory is expected to grow with them.",
        "",
        markdown_table(["scenario", "running pods", "zombies", "peak RSS"], memory_rows(results)),
        "",
        "## Design targets",
        "",
        markdown_table(["target", "wanted", "measured", "verdict"], targets_rows(results)),
        "",
    ]
    if period != DEFAULT_CRON_PERIOD:
        parts.extend(_default_period_section(results, period, model))
    parts.extend(
        [
            "## API requests and bytes by verb",
            "",
            "From the simulator's request log, within each phase's window; the simulator's "
            "own control API (the harness) is excluded. `server time` is the simulator's "
            "time answering.",
            "",
            markdown_table(
                ["cluster", "scenario", "reaper", "verb", "requests", "bytes", "server time"],
                cost_rows(results),
            ),
            "",
        ]
    )
    wrong = [
        f"- {r.reaper}, {r.pods:,} pods, {r.scenario}: {example}"
        for r in results
        for example in r.wrong_examples
    ]
    if wrong:
        parts.extend(["## Wrong deletes (examples)", "", *wrong, ""])
    parts.extend(["## Caveats", "", *(f"- {line}" for line in CAVEATS), ""])
    if notes:
        parts.extend(["## Notes", "", *(f"- {note}" for note in notes), ""])
    parts.extend(appendix)
    return "\n".join(parts)


DEFAULT_CRON_PERIOD = 60.0

CAVEATS = (
    "The simulator is one Python process on the same cores as zombied and the harness; "
    "it serves every write, delete, Event and watch event. In a storm each zombie costs "
    "it about as much CPU as it costs zombied, so storm latencies here are bounded by the "
    "machine (see `machine busy`), not by zombied's QPS; a real API server is faster "
    "per request and does not share zombied's CPU.",
    "The storm's status writes are not instantaneous: the table shows over how long they "
    "landed. Latency is measured per zombie from its own write, so the spread does not "
    "inflate it, but a backlog built while writes still arrive does.",
    "zombied's trickle and steady state run at its defaults (see the setting column): the "
    "`floor` in the targets table is what a perfect client with the same rate limit would "
    "achieve on the same arrivals.",
    "The CronJob's latencies for zombies its deadline-cut run did not reach are projected "
    "(rows `of which projected`); zombies left in phase `Succeeded` by the newest kubelet "
    "are never matched by its `status.phase==Failed` filter and are counted as missed.",
    "With `--leader-elect` (as the shipped Deployment runs), zombied renews its Lease every "
    "2 s: that is its whole steady-state API cost in the window measured (its watch, "
    "opened before the window, stays open; it is re-opened every 5 to 10 minutes, longer "
    "than the window). Without leader election the renewals go away.",
    "Other work on the machine skews every figure: the load averages are in the machine table.",
)


def _default_period_section(
    results: Sequence[PhaseResult], period: float, model: Callable[[float], LatencySummary]
) -> list[str]:
    rows: list[list[str]] = []
    for pods in sizes(results):
        storm = find(results, CRONJOB, pods, "storm")
        if storm is None or "clear_run_s" not in storm.extra:
            continue
        expected = model(storm.extra["clear_run_s"])
        rows.append(
            [
                f"{pods:,} pods",
                fmt_seconds(expected.p50),
                fmt_seconds(expected.p99),
                fmt_seconds(expected.max),
            ]
        )
    return [
        f"## CronJob at its default period of {DEFAULT_CRON_PERIOD:.0f} s (model)",
        "",
        f"This run used a period of {period:.0f} s. A zombie waits for the next run "
        "(uniform over the period) and then for the run to reach it; adding the time the "
        "clearing run took to its last delete (measured, or projected when cut) to that "
        "wait gives, at the default period:",
        "",
        markdown_table(["cluster", "p50", "p99", "max"], rows),
        "",
    ]


def _scenario_text(plan: Mapping[str, Any]) -> str:
    sizes_text = ", ".join(f"{size:,}" for size in plan["sizes"])
    return "\n".join(
        [
            f"- Clusters of {sizes_text} running pods, {plan['pods_per_node']} pods per node, "
            f"{plan['namespaces']} namespaces, owned by ReplicaSets, StatefulSets, Jobs, "
            "DaemonSets and bare pods. The simulator (`python -m kubesim`) runs in its own "
            "process; a fresh one for each reaper and size.",
            "- zombied runs as `zombied run --kubeconfig K --min-age 0s --listen 127.0.0.1:P "
            "--log-format json`: with its default rate limits for the steady state and the "
            "trickle, and with `--qps 1000 --burst 1000 --max-in-flight 16` for the storm.",
            f"- Steady: {plan['steady_s']:.0f} s with no preemption. Trickle: "
            f"{plan['trickle_nodes']} nodes shut down one after the other (zombied: every "
            f"{plan['trickle_interval_s']:.0f} s; CronJob: spread over its period), mixing "
            "the kubelet's variants (1.20 `Shutdown`, 1.22 `Terminated` and `NodeShutdown`, "
            "1.26 with `DisruptionTarget`, and the newest kubelet's `Succeeded`). Storm: "
            f"{plan['storm_fraction'] * 100:.0f} % of the nodes shut down at once.",
            "- CronJob: the real kubectl on a schedule, every "
            f"{plan['cron_period_s']:.0f} s: `kubectl get pods -A "
            "--field-selector=status.phase==Failed` (namespace and name columns: `-o name` "
            "drops the namespace with `-A`), then `kubectl delete --wait=false -n NS pod/...` "
            "batched per namespace as `xargs` would (128 KiB command lines), each run with an "
            "empty kubectl cache as in a fresh CronJob pod. Its RSS is the largest kubectl "
            "process and its CPU the sum over its runs; it holds no memory between runs.",
            "- The simulator serves HTTPS (`--tls`), as an API server does; both reapers use "
            "the same admin kubeconfig. Trickle nodes shut down through the simulator's "
            "`Cluster.preempt` (node cordoned, replacements created, StatefulSet names "
            "reused after the delete); the storm's pods get the same kubelet status (1.22, "
            "`Terminated`) written straight into the store by 4 client threads, because "
            "`preempt` scans the whole cluster per node. Each zombie's status time is the "
            "simulator's answer to the write that made it.",
            "- kubectl deletes at client-go's default client-side limit (5 requests/s, burst "
            "10), so a big backlog takes long: each run has a deadline of "
            f"{plan.get('cron_deadline_s', 0):.0f} s (`activeDeadlineSeconds`), and the "
            "deletes a cut run did not reach are projected at the rate it had and shown as "
            "projected. The CronJob sessions for the different sizes run side by side, after "
            "zombied's (they mostly wait on their schedule and on that limit).",
            "- Reap latency: from the simulator applying the kubelet's status to the "
            "simulator receiving the DELETE, both on the simulator's clock. Wrong delete: a "
            "delete of a pod that was not a node-shutdown zombie when deleted, or of another "
            "uid than the zombie's (neither reaper ever gets a say here: the audit reads the "
            "simulator's delete log).",
        ]
    )
