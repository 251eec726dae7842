"""Small pure helpers of the shells: ages and times, metrics reference, usage."""

from datetime import datetime, timedelta, timezone

from zombied import metrics, report
from zombied.cli import usage


def test_ages_like_kubectl() -> None:
    assert report.age(None) == "<unknown>"
    assert report.age(-3) == "0s"
    assert report.age(42.9) == "42s"
    assert report.age(60) == "1m"
    assert report.age(119 * 60) == "119m"
    assert report.age(3 * 3600) == "3h"
    assert report.age(5 * 86400) == "5d"


def test_times_to_the_second_in_utc() -> None:
    moment = datetime(2026, 1, 1, 12, 0, 0, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert report.stamp(moment) == "2026-01-01T10:00:00Z"
    assert report.until(moment + timedelta(seconds=90), moment) == "in 1m30s"
    assert report.until(moment - timedelta(seconds=5), moment) == "5s ago"


def test_metrics_reference_covers_every_metric_with_help() -> None:
    rows = metrics.reference()
    names = {name for name, _, _, _ in rows}
    assert {
        "zombied_pods_reaped_total",
        "zombied_delete_duration_seconds",
        "zombied_queue_depth",
        "zombied_queue_wait_seconds",
        "zombied_watch_restarts_total",
        "zombied_watch_relists_total",
        "zombied_api_errors_total",
        "zombied_zombies_known",
        "zombied_watch_last_event_age_seconds",
        "zombied_build_info",
        "zombied_leader",
        "zombied_leader_transitions_total",
        "zombied_scope_synced",
        "zombied_delete_rate",
        "zombied_events_dropped_total",
        "zombied_events_queued",
        "zombied_zombies_overdue",
        "zombied_watch_timeout_seconds",
        "zombied_delete_rate_limit_waiting",
    } == names
    assert all(help_text for _, _, _, help_text in rows)
    labels = {name: label_names for name, _, label_names, _ in rows}
    assert labels["zombied_pods_reaped_total"] == ("rule", "outcome")
    assert all("pod" not in label_names for label_names in labels.values())


def test_usage_lists_commands() -> None:
    text = usage()
    for command in ("run", "scan", "version"):
        assert command in text
    assert "sim" not in text
