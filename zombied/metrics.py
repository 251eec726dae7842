"""Prometheus metrics of zombied, defined once, and the functions that record them.

The metric objects are private; the daemon hands the recording functions to the parts
it builds as callbacks, so every series has one writer. Label values are bounded sets
(rule, outcome, scope, verb, code): pod names never become labels. The metrics
reference in the docs is generated from `reference`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Final

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.metrics import MetricWrapperBase

from zombied import __version__

# The ``*_created`` series double the exposition for timestamps nobody alerts on.
disable_created_metrics()  # type: ignore[no-untyped-call]

# A DELETE answers within its 10 s timeout; a due key waits up to a minute under --qps.
_DELETE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)


_pods_reaped = Counter(
    "zombied_pods_reaped",
    "Delete attempts on zombie pods, by the rule that matched and the outcome "
    "(deleted, gone, conflict, dry_run, error).",
    ["rule", "outcome"],
)
_delete_duration = Histogram(
    "zombied_delete_duration_seconds",
    "Duration of DELETE requests for zombie pods, including the wait for the answer.",
    buckets=_DELETE_BUCKETS,
)
_queue_depth = Gauge(
    "zombied_queue_depth",
    "Keys waiting in the work queue, due or not yet due.",
)
_queue_wait = Histogram(
    "zombied_queue_wait_seconds",
    "Time a key waited in the work queue between becoming due and being handed to a worker.",
    buckets=_WAIT_BUCKETS,
)
_watch_restarts = Counter(
    "zombied_watch_restarts",
    "Watch requests started again after the previous one ended (expiry, error or cut), by scope.",
    ["scope"],
)
_watch_relists = Counter(
    "zombied_watch_relists",
    "Full relists after the API server answered 410 Gone (history compacted), by scope.",
    ["scope"],
)
_api_errors = Counter(
    "zombied_api_errors",
    "Failed API requests, by verb and HTTP status code (0 for transport failures).",
    ["verb", "code"],
)
_zombies_known = Gauge(
    "zombied_zombies_known",
    "Pods in the cache that match a rule (due or not yet due) and are not yet deleted.",
)
_watch_last_event_age = Gauge(
    "zombied_watch_last_event_age_seconds",
    "Seconds since the watch of a scope last received an event or (re)connected; "
    "computed at scrape time.",
    ["scope"],
)
_build_info = Gauge(
    "zombied_build_info",
    "Always 1; the version label says which zombied is running.",
    ["version"],
)
_leader = Gauge(
    "zombied_leader",
    "1 while this replica holds the lease and may delete (always 1 without leader election).",
)
_leader_transitions = Counter(
    "zombied_leader_transitions",
    "Times this replica gained or lost leadership.",
)
_scope_synced = Gauge(
    "zombied_scope_synced",
    "1 while the scope's cache is in step with the API server (listed, or watched since), "
    "0 before its first LIST and while its LIST or WATCH is refused.",
    ["scope"],
)
_delete_rate = Gauge(
    "zombied_delete_rate",
    "The DELETE rate limit in requests per second right now: --qps, or less while the "
    "API server pushes back (429, 5xx, timeouts), rising back by a step per quiet second.",
)
_events_dropped = Counter(
    "zombied_events_dropped",
    "Reaped Events not written, by why: queue_full (more reaps than the Event budget "
    "carries), failed (the API answered an error), shutdown (still queued at exit).",
    ["reason"],
)
_events_queued = Gauge(
    "zombied_events_queued",
    "Reaped Events waiting to be written (at most 1,000; the rest are dropped).",
)


#: Past due by this much a zombie is overdue: a healthy storm never counts.
OVERDUE_MARGIN: Final = 60.0

_zombies_overdue = Gauge(
    "zombied_zombies_overdue",
    "Zombies past their rule's min age by more than 60 s and still not deleted, by rule; "
    "computed at scrape time.",
    ["rule"],
)
_watch_timeout = Gauge(
    "zombied_watch_timeout_seconds",
    "Server-side timeout of the scope's current watch request; a watch silent for longer "
    "has not reconnected when it should have.",
    ["scope"],
)
_delete_rate_limit_waiting = Gauge(
    "zombied_delete_rate_limit_waiting",
    "Delete workers waiting for a rate-limit token, computed at scrape time; above zero at "
    "every scrape means --qps, not the API server, sets the pace.",
)

_build_info.labels(version=__version__).set(1)


def reference() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name as exposed, type, label names, help) for every metric, for the README."""
    rows: list[tuple[str, str, tuple[str, ...], str]] = []
    metrics = [value for value in globals().values() if isinstance(value, MetricWrapperBase)]
    for metric in metrics:
        (family,) = metric.describe()
        name = f"{family.name}_total" if family.type == "counter" else family.name
        # prometheus_client has no public accessor for the label names of a wrapper.
        labels = tuple(str(label) for label in metric._labelnames)
        rows.append((name, family.type, labels, family.documentation))
    return rows


queue_depth_changed = _queue_depth.set
queue_waited = _queue_wait.observe
zombies_known = _zombies_known.set
delete_rate_changed = _delete_rate.set
events_queued = _events_queued.set
rate_limit_waiting = _delete_rate_limit_waiting.set


def delete_answered(rule: str, outcome: str, code: int, seconds: float | None) -> None:
    """One delete attempt ended with ``outcome`` after ``seconds`` (None: nothing sent)."""
    _pods_reaped.labels(rule=rule, outcome=outcome).inc()
    if seconds is not None:
        _delete_duration.observe(seconds)


def api_failed(verb: str, code: int) -> None:
    _api_errors.labels(verb=verb, code=str(code)).inc()


def scope_synced(scope: str, synced: bool) -> None:
    """The scope's cache is (or no longer is: refused) in step with the API server."""
    _scope_synced.labels(scope=scope).set(1 if synced else 0)


def watch_restarted(scope: str, relist: bool = False) -> None:
    """A watch of ``scope`` ended and starts again; ``relist`` after a 410 Gone."""
    if relist:
        _watch_relists.labels(scope=scope).inc()
    _watch_restarts.labels(scope=scope).inc()


def watch_ages(ages: Mapping[str, float]) -> None:
    for scope, age in ages.items():
        _watch_last_event_age.labels(scope=scope).set(max(0.0, age))


def leading(now: bool, *, changed: bool = True) -> None:
    """This replica leads (or not); ``changed`` counts a gain or loss."""
    _leader.set(1 if now else 0)
    if changed:
        _leader_transitions.inc()


def events_dropped(reason: str, count: int = 1) -> None:
    _events_dropped.labels(reason=reason).inc(count)


def overdue_by_rule(
    rules: Iterable[str],
    zombies: Iterable[tuple[str | None, datetime | None]],
    now: datetime,
    margin: float = OVERDUE_MARGIN,
) -> dict[str, int]:
    """Count the zombies, given as ``(rule, due)``, past due by more than ``margin``;
    every rule gets a count, so an alert sees 0 rather than nothing while all is well."""
    counts = dict.fromkeys(rules, 0)
    for rule, due in zombies:
        if rule is not None and due is not None and (now - due).total_seconds() > margin:
            counts[rule] = counts.get(rule, 0) + 1
    return counts


def zombies_overdue(counts: Mapping[str, int]) -> None:
    for rule, count in counts.items():
        _zombies_overdue.labels(rule=rule).set(count)


def watch_timeouts(timeouts: Mapping[str, float]) -> None:
    for scope, timeout in timeouts.items():
        _watch_timeout.labels(scope=scope).set(timeout)
