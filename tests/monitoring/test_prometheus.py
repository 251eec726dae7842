"""A real Prometheus scrapes a running ``zombied run`` through a storm on the simulator.

`bench.monitoring_plot.scraped_storm` (which also draws the README's picture) runs
Debian's Prometheus 2.42 with the alert rules while zombied clears a backlog and a storm,
with DELETEs refused and throttled and every Event refused. Then every dashboard query
and alert expression must answer with the shape its panel or alert relies on.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.monitoring_plot import RULES, Run, Scale, Target, dashboard_targets, scraped_storm

from tests.monitoring.conftest import require

# One storm, one Prometheus: every test of the module runs in the process holding them.
pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("prometheus"),
]

#: Alerts whose condition this storm makes true at some moment (when, below).
EXPECTED_TRUE = {"ZombiedDeleteForbidden", "ZombiedEventsForbidden", "ZombiedZombiesOverdue"}


@pytest.fixture(scope="module")
def storm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    require("prometheus")
    with scraped_storm(tmp_path_factory.mktemp("monitoring"), Scale()) as run:
        yield run


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def probe_of(expr: str) -> str:
    """The alert's value expression: its threshold comparison or ``absent()`` removed."""
    expr = " ".join(expr.split())
    absent = re.fullmatch(r"absent\((.*)\)", expr)
    if absent:
        return absent.group(1)
    compared = re.fullmatch(r"(.*\S)\s*(>|<|>=|<=|==|!=)\s*[\d.]+", expr)
    assert compared, f"no threshold to strip in {expr!r}"
    return compared.group(1)


def test_the_storm_was_reaped_and_scraped(storm: Run) -> None:
    assert storm.deleted == storm.zombies
    reaped = storm.prometheus.query(
        'sum(max_over_time(zombied_pods_reaped_total{job="zombied",outcome="deleted"}[5m]))'
    )["result"]
    assert float(reaped[0]["value"][1]) == storm.zombies
    assert storm.prometheus.scrapes() >= 10


@pytest.mark.parametrize("target", dashboard_targets(), ids=lambda t: f"{t.panel}/{t.ref}")
def test_every_dashboard_query_returns_its_series(storm: Run, target: Target) -> None:
    answer = storm.prometheus.query_range(target.promql, storm.start, storm.end, 1.0)
    assert answer["resultType"] == "matrix"
    assert answer["result"], f"{target.promql} returned no series"
    for series in answer["result"]:
        missing = set(target.legend_labels) - set(series["metric"])
        assert not missing, f"{target.promql}: series {series['metric']} lacks {missing}"
        assert series["values"]
        # An aggregation without labels in its legend must be one series, not many.
    if not target.legend_labels:
        assert len(answer["result"]) == 1, answer["result"]


def test_the_panels_show_what_happened(storm: Run) -> None:
    def peak(expr: str) -> float:
        answer = storm.prometheus.query_range(expr, storm.start, storm.end, 1.0)
        return max(float(v) for series in answer["result"] for _, v in series["values"])

    assert peak('max(zombied_zombies_overdue{job="zombied"})') >= storm.backlog / 2
    assert peak('sum(zombied_leader{job="zombied"})') == 1
    assert peak('max(zombied_delete_rate_limit_waiting{job="zombied"})') >= 1
    codes = storm.prometheus.query('sum by (verb, code) (zombied_api_errors_total{job="zombied"})')[
        "result"
    ]
    seen = {(series["metric"]["verb"], series["metric"]["code"]) for series in codes}
    assert {("create", "403"), ("delete", "429")} <= seen


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_every_alert_expression_runs_on_the_scraped_series(
    storm: Run, rule: dict[str, Any]
) -> None:
    prometheus = storm.prometheus
    name = rule["alert"]
    labels = set(re.findall(r"\$labels\.(\w+)", yaml.safe_dump(rule["annotations"])))
    # The value the alert compares exists, with the labels its annotations print.
    probe = prometheus.query(probe_of(rule["expr"]), at=storm.end)
    assert probe["resultType"] == "vector"
    assert probe["result"], f"{name}: {probe_of(rule['expr'])} returned nothing"
    for series in probe["result"]:
        assert labels <= set(series["metric"]), (name, series["metric"])
    # The condition itself: true when this storm provokes it, else quiet at the end.
    at = storm.backlog_seen + 2 if name == "ZombiedZombiesOverdue" else storm.end
    condition = prometheus.query(" ".join(rule["expr"].split()), at=at)
    assert condition["resultType"] == "vector"
    if name in EXPECTED_TRUE:
        assert condition["result"], f"{name} should hold at {at - storm.start:.0f}s"
    else:
        assert condition["result"] == [], f"{name} holds on a healthy run: {condition}"


def test_prometheus_evaluates_every_rule_without_error(storm: Run) -> None:
    rules = storm.prometheus.rules()
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in alert_rules()}
    for rule in rules:
        assert rule["health"] == "ok", rule
    pending = {rule["name"] for rule in rules if rule["state"] in ("pending", "firing")}
    assert "ZombiedEventsForbidden" in pending


def test_promtool_accepts_the_metrics_zombied_serves(storm: Run, tmp_path: Path) -> None:
    promtool = require("promtool")
    result = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=storm.metrics_text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
