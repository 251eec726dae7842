"""The benchmark's picture: reap-latency distributions and RSS against cluster size.

Draws with matplotlib's Agg backend (no display, same output everywhere) into one PNG.
It reads `PhaseResult`s only; it must never run anything or touch the network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")

# The backend must be chosen before pyplot loads.
import matplotlib.pyplot as plt

from bench.pacing import PacingResult
from bench.report import CRONJOB, ZOMBIED, PhaseResult, find, sizes

_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a")
_MIB = float(1 << 20)


def _ecdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(max(value, 1e-4) for value in values)
    count = len(ordered)
    return ordered, [(index + 1) / count for index in range(count)]


def draw(results: Sequence[PhaseResult], path: Path, *, title: str) -> Path:
    """Write the PNG to `path` and return it."""
    figure, axes = plt.subplots(1, 3, figsize=(16, 5.2), constrained_layout=True)
    all_sizes = sizes(results)
    for axis, scenario in zip(axes[:2], ("storm", "trickle"), strict=True):
        for colour, pods in zip(_COLOURS, all_sizes, strict=False):
            for reaper, style in ((ZOMBIED, "-"), (CRONJOB, "--")):
                result = find(results, reaper, pods, scenario)
                if result is None or not result.latencies:
                    continue
                xs, ys = _ecdf(result.latencies)
                axis.step(
                    xs,
                    ys,
                    where="post",
                    linestyle=style,
                    color=colour,
                    label=f"{reaper} ({result.setting}), {pods:,} pods",
                )
        axis.set_xscale("log")
        axis.set_xlabel("reap latency: kubelet status change -> DELETE (s, log)")
        axis.set_ylabel("fraction of zombies reaped")
        axis.set_title(f"{scenario}: latency distribution (CDF)")
        axis.grid(visible=True, which="both", alpha=0.3)
        axis.legend(fontsize=7, loc="lower right")

    axis = axes[2]
    for colour, scenario in zip(_COLOURS, ("steady", "trickle", "storm"), strict=False):
        points = [
            (pods, result.peak_rss_bytes / _MIB, result.zombies)
            for pods in all_sizes
            if (result := find(results, ZOMBIED, pods, scenario)) is not None
            and not math.isnan(result.peak_rss_bytes)
        ]
        if points:
            zombies = sorted({z for _, _, z in points})
            if scenario == "storm":
                held = "10 % of pods as"
            elif zombies[0] == zombies[-1]:
                held = f"{zombies[0]:,}"
            else:
                held = f"{zombies[0]:,}-{zombies[-1]:,}"
            axis.plot(
                [p for p, _, _ in points],
                [r for _, r, _ in points],
                marker="o",
                color=colour,
                label=f"zombied, {scenario} ({held} zombies)",
            )
    cron_points = [
        (pods, result.peak_rss_bytes / _MIB)
        for pods in all_sizes
        if (result := find(results, CRONJOB, pods, "storm")) is not None
        and not math.isnan(result.peak_rss_bytes)
    ]
    if cron_points:
        axis.plot(
            [p for p, _ in cron_points],
            [r for _, r in cron_points],
            marker="s",
            linestyle="--",
            color="grey",
            label="kubectl (largest CronJob process), storm",
        )
    axis.set_xscale("log")
    axis.set_xlabel("pods in the cluster (log)")
    axis.set_ylabel("peak RSS (MiB)")
    axis.set_ylim(bottom=0)
    axis.set_title("peak RSS against cluster size")
    axis.grid(visible=True, which="both", alpha=0.3)
    axis.legend(fontsize=7, loc="lower right")

    figure.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def draw_pacing(runs: Sequence[PacingResult], path: Path, *, title: str) -> Path:
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
    limit.set_title("zombied_delete_rate (the adaptive limit), scraped every 0.2 s")
    limit.set_ylabel("DELETEs per second allowed")
    answered.set_title("DELETE requests per second, from the API server's request log")
    answered.set_ylabel("requests per second")
    for axis in axes:
        axis.set_xlabel("seconds since the first kubelet write")
        axis.set_ylim(bottom=0)
        axis.grid(visible=True, alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
