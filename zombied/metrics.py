"""Prometheus metrics of zombied, defined once, at module level.

This module owns every metric object and its help text; the README's metrics reference is
generated from :func:`reference`. Label values are bounded sets (rule, outcome, scope,
verb, status code): pod names and uids never become labels, because they would grow the
series count with every pod ever reaped. Nothing here does I/O or keeps state besides the
metric objects themselves.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.metrics import MetricWrapperBase

from zombied import __version__

# The ``*_created`` series double the exposition for timestamps nobody alerts on.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Every outcome a delete attempt can have, as counted in ``zombied_pods_reaped_total``.
OUTCOMES = ("deleted", "gone", "conflict", "dry_run", "error")

pods_reaped = Counter(
    "zombied_pods_reaped",
    "Delete attempts on zombie pods, by the rule that matched and the outcome "
    "(deleted, gone, conflict, dry_run, error).",
    ["rule", "outcome"],
)
delete_duration = Histogram(
    "zombied_delete_duration_seconds",
    "Duration of DELETE requests for zombie pods, including the wait for the answer.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
queue_depth = Gauge(
    "zombied_queue_depth",
    "Keys waiting in the work queue, due or not yet due.",
)
queue_wait = Histogram(
    "zombied_queue_wait_seconds",
    "Time a key waited in the work queue between becoming due and being handed to a worker.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0),
)
watch_restarts = Counter(
    "zombied_watch_restarts",
    "Watch requests started again after the previous one ended (expiry, error or cut), by scope.",
    ["scope"],
)
watch_relists = Counter(
    "zombied_watch_relists",
    "Full relists after the API server answered 410 Gone (history compacted), by scope.",
    ["scope"],
)
api_errors = Counter(
    "zombied_api_errors",
    "Failed API requests, by verb and HTTP status code (0 for transport failures).",
    ["verb", "code"],
)
zombies_known = Gauge(
    "zombied_zombies_known",
    "Pods in the cache that match a rule (due or not yet due) and are not yet deleted.",
)
watch_last_event_age = Gauge(
    "zombied_watch_last_event_age_seconds",
    "Seconds since the watch of a scope last received an event or (re)connected; "
    "computed at scrape time.",
    ["scope"],
)
build_info = Gauge(
    "zombied_build_info",
    "Always 1; the version label says which zombied is running.",
    ["version"],
)
leader = Gauge(
    "zombied_leader",
    "1 while this replica holds the lease and may delete (always 1 without leader election).",
)
leader_transitions = Counter(
    "zombied_leader_transitions",
    "Times this replica gained or lost leadership.",
)
scope_synced = Gauge(
    "zombied_scope_synced",
    "1 once the first LIST of a scope completed, 0 before or while it is forbidden.",
    ["scope"],
)

build_info.labels(version=__version__).set(1)

_ALL: tuple[MetricWrapperBase, ...] = (
    pods_reaped,
    delete_duration,
    queue_depth,
    queue_wait,
    watch_restarts,
    watch_relists,
    api_errors,
    zombies_known,
    watch_last_event_age,
    build_info,
    leader,
    leader_transitions,
    scope_synced,
)


def reference() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name as exposed, type, label names, help) for every metric, for the README."""
    rows: list[tuple[str, str, tuple[str, ...], str]] = []
    for metric in _ALL:
        (family,) = metric.describe()
        name = f"{family.name}_total" if family.type == "counter" else family.name
        # prometheus_client has no public accessor for the label names of a wrapper.
        labels = tuple(str(label) for label in metric._labelnames)
        rows.append((name, family.type, labels, family.documentation))
    return rows
