"""Pure statistics over what a server recorded: latency percentiles, request counts and
the audit of the simulator's delete log against the zombies a run made.

Plain data in, plain data out: it must never do I/O and never read a clock; every time
it sees comes from the servers' records or from the caller.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

# The design's default `node-shutdown` rule: what a pod left by a node shutdown looks like.
SHUTDOWN_REASONS: Final = frozenset({"Shutdown", "NodeShutdown", "Terminated"})


def p50_p99(values: Sequence[float]) -> tuple[float, float]:
    """The median and the 99th percentile, interpolated between closest ranks (numpy's
    default, so figures can be checked by hand); NaN for no values, as a 0 would look
    like a result."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (math.nan, math.nan)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[98]


def seconds(value: float) -> str:
    """`37 ms`, `4.6 s`, `-` for NaN: a duration as the tables print it."""
    if math.isnan(value):
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def count_requests(
    records: Iterable[Mapping[str, Any]], since: float, until: float
) -> dict[str, int]:
    """The simulator's request records begun within [since, until], by "verb resource code".

    The harness's own calls to the control API (`/_sim/...`) are left out.
    """
    counts: Counter[str] = Counter()
    for record in records:
        began = float(record["time"]) - float(record.get("duration") or 0.0)
        if since <= began <= until and not str(record.get("path", "")).startswith("/_sim"):
            counts[f"{record['verb']} {record['resource']} {record['status']}"] += 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class Zombie:
    """A pod a run turned into a zombie, and when the kubelet's status write was answered
    (``failed_at``) and sent (``sent_at``)."""

    uid: str
    failed_at: float
    sent_at: float


@dataclass(frozen=True, slots=True)
class Audit:
    """The simulator's delete log judged against the zombies a run made."""

    latencies: list[float]  # per reaped zombie, seconds from its status write
    deleted_at: list[float]  # when each reaped zombie was deleted
    missed: int
    wrong: int  # deletes of pods that were no node-shutdown zombie of the run


def _is_zombie(obj: Mapping[str, Any]) -> bool:
    status, metadata = obj.get("status") or {}, obj.get("metadata") or {}
    return (
        status.get("phase") in ("Failed", "Succeeded")
        and status.get("reason") in SHUTDOWN_REASONS
        and not metadata.get("deletionTimestamp")
        and (metadata.get("annotations") or {}).get("zombied.io/keep") != "true"
    )


def audit_deletes(zombies: Iterable[Zombie], deleted: Iterable[Mapping[str, Any]]) -> Audit:
    """Match the delete log (the simulator's records: `obj`, `time`, `dry_run`) with the
    zombies: latency per zombie, misses, wrong deletes (an object that was no zombie
    when deleted, or a uid the run never made a zombie). Dry runs remove nothing."""
    by_uid = {zombie.uid: zombie for zombie in zombies}
    latencies: list[float] = []
    deleted_at: list[float] = []
    wrong = 0
    for record in deleted:
        if record.get("dry_run"):
            continue
        obj = record.get("obj") or {}
        zombie = by_uid.pop(str((obj.get("metadata") or {}).get("uid", "")), None)
        if zombie is None or not _is_zombie(obj):
            wrong += 1
            continue
        when = float(record["time"])
        # A delete seen before the status write was answered happened after it was sent:
        # measure from the send then, never below zero.
        start = zombie.sent_at if when < zombie.failed_at else zombie.failed_at
        latencies.append(max(0.0, when - start))
        deleted_at.append(when)
    return Audit(latencies, deleted_at, missed=len(by_uid), wrong=wrong)
