"""Small pure helpers of the shells: table rendering, ages, metrics reference, usage."""

from datetime import UTC, datetime, timedelta

from zombied import metrics
from zombied.cli import usage
from zombied.pod import PodSnapshot
from zombied.scan import COLUMNS, Zombie, format_age, render_table


def test_format_age_like_kubectl() -> None:
    assert format_age(None) == "<unknown>"
    assert format_age(-3) == "0s"
    assert format_age(42.9) == "42s"
    assert format_age(60) == "1m"
    assert format_age(119 * 60) == "119m"
    assert format_age(3 * 3600) == "3h"
    assert format_age(5 * 86400) == "5d"


def test_table_has_the_documented_columns() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    pod = PodSnapshot(
        namespace="team-a",
        name="web-0",
        uid="u1",
        phase="Failed",
        reason="Terminated",
        node="node-1",
        owner_kind="StatefulSet",
        owner_name="web",
    )
    bare = PodSnapshot(namespace="b", name="p", uid="u2", phase="Failed")
    table = render_table(
        [Zombie(pod, "node-shutdown", now - timedelta(minutes=5)), Zombie(bare, "failed", None)],
        now,
    )
    header, first, second = table.splitlines()
    assert header.split() == list(COLUMNS)
    assert first.split() == [
        "team-a",
        "web-0",
        "node-shutdown",
        "Terminated",
        "node-1",
        "StatefulSet/web",
        "5m",
    ]
    assert second.split() == ["b", "p", "failed", "<none>", "<none>", "<none>", "<unknown>"]


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
