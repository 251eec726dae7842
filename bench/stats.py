"""Pure statistics over what the simulator recorded: latency percentiles and the audit
of its delete log against the zombies a scenario made.

Plain data in, plain data out: it must never do I/O and never read a clock; every time
it sees comes from the simulator's records or from the caller.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

# The design's default `node-shutdown` rule: what a pod left by a node shutdown looks like.
SHUTDOWN_REASONS: Final = frozenset({"Shutdown", "NodeShutdown", "Terminated"})
TERMINAL_PHASES: Final = frozenset({"Failed", "Succeeded"})
KEEP_ANNOTATION: Final = "zombied.io/keep"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks.

    Same definition as numpy's default, so figures can be checked by hand; NaN for no
    values (an empty distribution has no percentile, and a 0 would look like a result).
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """p50/p99/max of a latency distribution, in seconds."""

    count: int
    p50: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float]) -> LatencySummary:
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        return cls(
            count=len(values),
            p50=percentile(values, 50),
            p99=percentile(values, 99),
            max=float(max(values)),
            mean=float(sum(values) / len(values)),
        )


def is_node_shutdown_zombie(obj: Mapping[str, Any]) -> bool:
    """Whether a pod object (as the API serves it) is a zombie under the default rule.

    Terminal phase, a node-shutdown reason, not already being deleted, not opted out.
    """
    status = obj.get("status") or {}
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return (
        status.get("phase") in TERMINAL_PHASES
        and status.get("reason") in SHUTDOWN_REASONS
        and not metadata.get("deletionTimestamp")
        and annotations.get(KEEP_ANNOTATION) != "true"
    )


@dataclass(frozen=True, slots=True)
class Zombie:
    """A pod the scenario turned into a zombie, and when the kubelet's status landed."""

    namespace: str
    name: str
    uid: str
    failed_at: float
    group: str = ""  # which part of the scenario made it ("storm", "trickle", ...)
    variant: str = ""  # the kubelet's shape: "terminated", "rejected", "succeeded"
    sent_at: float = 0.0  # when the write that made it was sent (failed_at: answered)


@dataclass(frozen=True, slots=True)
class DeleteAudit:
    """The simulator's delete log judged against the zombies the scenario made."""

    latencies: dict[str, list[float]] = field(default_factory=dict)  # group -> seconds
    missed: list[Zombie] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # "namespace/name: why"
    deleted_by_group: dict[str, list[float]] = field(default_factory=dict)  # delete times

    def missed_in(self, groups: Iterable[str]) -> int:
        wanted = set(groups)
        return sum(1 for zombie in self.missed if zombie.group in wanted)


def audit_deletes(
    zombies: Iterable[Zombie],
    deleted: Iterable[Mapping[str, Any]],
) -> DeleteAudit:
    """Match the delete log with the zombies: latency per zombie, misses, wrong deletes.

    `deleted` are the simulator's delete records (`obj`, `time`, `dry_run`, `user`). A
    delete is wrong when the object removed was not a node-shutdown zombie, or when its
    uid is not one the scenario made a zombie (for instance the StatefulSet replacement
    that reused the zombie's name). Dry-run deletes remove nothing and are ignored.
    """
    by_uid = {zombie.uid: zombie for zombie in zombies}
    latencies: dict[str, list[float]] = {}
    deleted_by_group: dict[str, list[float]] = {}
    wrong: list[str] = []
    reaped: set[str] = set()
    for record in deleted:
        if record.get("dry_run"):
            continue
        obj = record.get("obj") or {}
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid", ""))
        when = float(record["time"])
        zombie = by_uid.get(uid)
        why = ""
        if zombie is None:
            why = "not a zombie the scenario made"
        elif not is_node_shutdown_zombie(obj):
            why = "object did not match the node-shutdown rule when deleted"
        if zombie is None or why:
            wrong.append(f"{metadata.get('namespace')}/{metadata.get('name')}: {why}")
            continue
        if uid in reaped:
            continue
        reaped.add(uid)
        # A delete seen before the status write was answered (a slow client) happened
        # after the write was sent: measure from the send then, never below zero.
        late = when < zombie.failed_at and zombie.sent_at > 0
        start = zombie.sent_at if late else zombie.failed_at
        latencies.setdefault(zombie.group, []).append(max(0.0, when - start))
        deleted_by_group.setdefault(zombie.group, []).append(when)
    missed = [zombie for zombie in by_uid.values() if zombie.uid not in reaped]
    return DeleteAudit(
        latencies=latencies, missed=missed, wrong=wrong, deleted_by_group=deleted_by_group
    )
