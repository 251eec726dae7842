"""The overdue count behind ZombiedZombiesOverdue, and the gauges set at scrape time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY
from zombied import metrics

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_overdue_counts_zombies_past_due_by_more_than_the_margin() -> None:
    margin = timedelta(seconds=metrics.OVERDUE_MARGIN)
    zombies = [
        ("node-shutdown", NOW - margin - timedelta(seconds=1)),  # overdue
        ("node-shutdown", NOW - margin),  # exactly at the margin: not yet
        ("node-shutdown", NOW + timedelta(minutes=5)),  # not due yet
        ("evicted", NOW - timedelta(hours=2)),  # overdue
        ("failed", None),  # no due time known
        (None, NOW - timedelta(hours=1)),  # no rule
    ]
    rules = ("node-shutdown", "evicted", "failed", "admission-rejected")
    assert metrics.overdue_by_rule(rules, zombies, NOW) == {
        "node-shutdown": 1,
        "evicted": 1,
        "failed": 0,
        "admission-rejected": 0,
    }


def test_the_scrape_time_gauges_expose_every_series() -> None:
    metrics.zombies_overdue({"node-shutdown": 2, "evicted": 0})
    metrics.watch_timeouts({"_cluster": 321.0})
    metrics.rate_limit_waiting(3)
    sample = REGISTRY.get_sample_value
    assert sample("zombied_zombies_overdue", {"rule": "node-shutdown"}) == 2
    assert sample("zombied_zombies_overdue", {"rule": "evicted"}) == 0
    assert sample("zombied_watch_timeout_seconds", {"scope": "_cluster"}) == 321.0
    assert sample("zombied_delete_rate_limit_waiting") == 3
