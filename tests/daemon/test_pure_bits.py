"""Small pure helpers of the shells: ages and times, the metrics reference."""

from datetime import datetime, timedelta, timezone

from prometheus_client import REGISTRY
from zombied import metrics, report


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
    registered = {m.name for m in REGISTRY.collect() if m.name.startswith("zombied_")}
    assert {name.removesuffix("_total") for name, *_ in rows} == registered
    assert all(help_text for *_, help_text in rows)
    labels = {name: label_names for name, _, label_names, _ in rows}
    assert labels["zombied_pods_reaped_total"] == ("rule", "outcome")
    assert all("pod" not in label_names for label_names in labels.values())
