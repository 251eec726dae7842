"""Pure statistics over what the simulator recorded: latencies, audits, API cost.

Everything here takes plain data (numbers, dicts decoded from the simulator's control
API) and returns plain data, so it is unit-tested without starting a process. It must
never do I/O and never read a clock: every time it sees comes from the simulator's
records or from the caller.
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


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the quotient is meaningless."""
    if numerator is None or denominator is None:
        return None
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return None
    return numerator / denominator


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
class WrongDelete:
    """A DELETE that removed a pod that was not a zombie the reaper was entitled to."""

    namespace: str
    name: str
    uid: str
    phase: str
    reason: str
    why: str


@dataclass(frozen=True, slots=True)
class DeleteAudit:
    """The simulator's delete log judged against the zombies the scenario made."""

    latencies: dict[str, list[float]] = field(default_factory=dict)  # group -> seconds
    missed: list[Zombie] = field(default_factory=list)
    wrong: list[WrongDelete] = field(default_factory=list)
    deleted_by_group: dict[str, list[float]] = field(default_factory=dict)  # delete times

    @property
    def all_latencies(self) -> list[float]:
        return [value for values in self.latencies.values() for value in values]

    def missed_in(self, groups: Iterable[str]) -> int:
        wanted = set(groups)
        return sum(1 for zombie in self.missed if zombie.group in wanted)


def audit_deletes(
    zombies: Iterable[Zombie],
    deleted: Iterable[Mapping[str, Any]],
    *,
    user: str | None = None,
) -> DeleteAudit:
    """Match the delete log with the zombies: latency per zombie, misses, wrong deletes.

    `deleted` are the simulator's delete records (`obj`, `time`, `dry_run`, `user`). A
    delete is wrong when the object removed was not a node-shutdown zombie, or when its
    uid is not one the scenario made a zombie (for instance the StatefulSet replacement
    that reused the zombie's name). Dry-run deletes remove nothing and are ignored;
    with `user`, only that user's deletes are judged (the harness may delete too).
    """
    by_uid = {zombie.uid: zombie for zombie in zombies}
    latencies: dict[str, list[float]] = {}
    deleted_by_group: dict[str, list[float]] = {}
    wrong: list[WrongDelete] = []
    reaped: set[str] = set()
    for record in deleted:
        if record.get("dry_run"):
            continue
        if user is not None and record.get("user") != user:
            continue
        obj = record.get("obj") or {}
        metadata = obj.get("metadata") or {}
        status = obj.get("status") or {}
        uid = str(metadata.get("uid", ""))
        when = float(record["time"])
        zombie = by_uid.get(uid)
        why = ""
        if zombie is None:
            why = "not a zombie the scenario made"
        elif not is_node_shutdown_zombie(obj):
            why = "object did not match the node-shutdown rule when deleted"
        if why:
            wrong.append(
                WrongDelete(
                    namespace=str(metadata.get("namespace", "")),
                    name=str(metadata.get("name", "")),
                    uid=uid,
                    phase=str(status.get("phase", "")),
                    reason=str(status.get("reason", "")),
                    why=why,
                )
            )
            continue
        assert zombie is not None
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


@dataclass(slots=True)
class VerbCost:
    """API requests and response bytes for one verb."""

    requests: int = 0
    bytes: int = 0
    seconds: float = 0.0  # server time spent answering


def cost_by_verb(
    records: Iterable[Mapping[str, Any]],
    *,
    since: float | None = None,
    until: float | None = None,
    users: Iterable[str] | None = None,
    exclude_path_prefix: str = "/_sim",
) -> dict[str, VerbCost]:
    """Requests, bytes and server seconds per verb within [since, until).

    Records are the simulator's request log entries (`verb`, `path`, `bytes`,
    `duration`, `user`, `time`). The simulator stamps a record when the answer is done,
    so a request is placed in the window by when it started (`time - duration`): a
    long-running WATCH counts once, when it was opened. The simulator's own control API
    is excluded: it is the harness talking, not the reaper.
    """
    wanted = set(users) if users is not None else None
    costs: dict[str, VerbCost] = {}
    for record in records:
        if str(record.get("path", "")).startswith(exclude_path_prefix):
            continue
        when = float(record.get("time", 0.0)) - float(record.get("duration") or 0.0)
        if since is not None and when < since:
            continue
        if until is not None and when >= until:
            continue
        if wanted is not None and record.get("user") not in wanted:
            continue
        verb = str(record.get("verb", "?"))
        cost = costs.setdefault(verb, VerbCost())
        cost.requests += 1
        cost.bytes += int(record.get("bytes") or 0)
        cost.seconds += float(record.get("duration") or 0.0)
    return dict(sorted(costs.items()))


def total_cost(costs: Mapping[str, VerbCost]) -> VerbCost:
    """The sum over verbs."""
    total = VerbCost()
    for cost in costs.values():
        total.requests += cost.requests
        total.bytes += cost.bytes
        total.seconds += cost.seconds
    return total


def per_minute(count: float, seconds: float) -> float:
    """A count over a window, as a rate per minute."""
    if seconds <= 0:
        return math.nan
    return count * 60.0 / seconds


def peak(samples: Iterable[tuple[float, float]], since: float, until: float) -> float:
    """Largest sampled value with a timestamp within [since, until]; NaN when none."""
    values = [value for when, value in samples if since <= when <= until]
    return max(values) if values else math.nan


def clear_time(failed_at: Iterable[float], deleted_at: Iterable[float]) -> float:
    """From the first status change to the last delete: how long a storm took to clear."""
    starts = list(failed_at)
    ends = list(deleted_at)
    if not starts or not ends:
        return math.nan
    return max(ends) - min(starts)


def expected_cron_latency(period: float, run_seconds: float) -> LatencySummary:
    """Latency of a periodic job for zombies arriving uniformly over its period.

    A zombie waits for the next run (uniform over [0, period)) then for the run to
    reach it; this is the model used to report the default period when a run used a
    shorter one.
    """
    return LatencySummary(
        count=0,
        p50=0.5 * period + run_seconds,
        p99=0.99 * period + run_seconds,
        max=period + run_seconds,
        mean=0.5 * period + run_seconds,
    )


@dataclass(frozen=True, slots=True)
class Projection:
    """When the deletes a run did not get to would have landed, at the rate it had."""

    times: dict[str, float]  # key -> projected delete time
    rate: float  # deletes per second used


def project_remaining(
    order: Sequence[str],
    deleted_at: Mapping[str, float],
    *,
    start: float,
    fallback_rate: float,
) -> Projection:
    """Project the delete time of every key in `order` that has no delete yet.

    A run deletes in order at a steady rate (kubectl's client-side limit); keys after
    the last real delete follow it at the rate measured over the run's real deletes,
    or at `fallback_rate` when too few happened to measure one.
    """
    done = sorted(deleted_at[key] for key in order if key in deleted_at)
    rate = fallback_rate
    if len(done) >= 10 and done[-1] > done[0]:
        rate = (len(done) - 1) / (done[-1] - done[0])
    last = done[-1] if done else start
    remaining = [key for key in order if key not in deleted_at]
    return Projection(
        times={key: last + (index + 1) / rate for index, key in enumerate(remaining)}, rate=rate
    )


def rate_limited_schedule(arrivals: Sequence[float], *, qps: float, burst: int) -> list[float]:
    """Earliest send times of requests arriving at `arrivals`, through a token bucket.

    FIFO, a bucket of `burst` tokens refilled at `qps` and full at the first arrival:
    the best any client limited to (qps, burst) can do. Subtracting the arrival times
    gives the latency the rate limit alone imposes, the floor a reaper is measured
    against. Returned in arrival order.
    """
    if qps <= 0 or burst < 1:
        raise ValueError("qps must be > 0 and burst >= 1")
    ordered = sorted(arrivals)
    sends: list[float] = []
    tokens = float(burst)
    clock = ordered[0] if ordered else 0.0
    for arrival in ordered:
        now = max(arrival, clock)
        tokens = min(float(burst), tokens + (now - clock) * qps)
        clock = now
        if tokens < 1.0:
            wait = (1.0 - tokens) / qps
            clock += wait
            tokens = 1.0
        tokens -= 1.0
        sends.append(clock)
    return sends


def rate_limit_floor(arrivals: Sequence[float], *, qps: float, burst: int) -> list[float]:
    """Per-request latency a (qps, burst) token bucket imposes on these arrivals."""
    ordered = sorted(arrivals)
    sends = rate_limited_schedule(ordered, qps=qps, burst=burst)
    return [send - arrival for send, arrival in zip(sends, ordered, strict=True)]
