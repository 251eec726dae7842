"""The benchmark's markdown rendering and the CronJob script's pure parts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from bench.cronjob import CronJob, batch_names, parse_listing
from bench.report import (
    CRONJOB,
    ZOMBIED,
    PhaseResult,
    comparison_rows,
    fmt_bytes,
    fmt_ratio,
    fmt_seconds,
    markdown_table,
    memory_rows,
    render_document,
    rss_growth,
    targets_rows,
)
from bench.stats import LatencySummary, VerbCost


def result(reaper: str, pods: int, scenario: str, **values: object) -> PhaseResult:
    base = PhaseResult(
        reaper=reaper, pods=pods, nodes=pods // 30, scenario=scenario, setting="s", window_s=60.0
    )
    for name, value in values.items():
        setattr(base, name, value)
    return base


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0123, "12 ms"), (0.0012, "1.2 ms"), (2.25, "2.2 s"), (90.0, "90.0 s"), (900.0, "15.0 min")],
)
def test_fmt_seconds(value: float, text: str) -> None:
    assert fmt_seconds(value) == text


def test_formatters_show_unknown_as_a_dash() -> None:
    assert fmt_seconds(math.nan) == "-"
    assert fmt_bytes(None) == "-"
    assert fmt_ratio(None) == "-"


@pytest.mark.parametrize(
    ("value", "text"), [(512, "512 B"), (2048, "2.0 KiB"), (3 * 1024 * 1024, "3.0 MiB")]
)
def test_fmt_bytes(value: float, text: str) -> None:
    assert fmt_bytes(value) == text


@pytest.mark.parametrize(
    ("value", "text"), [(0.5, "0.50x"), (0.02, "0.020x"), (0.0001, "1.0e-04x"), (250.0, "250x")]
)
def test_fmt_ratio(value: float, text: str) -> None:
    assert fmt_ratio(value) == text


def test_markdown_table_aligns_and_escapes() -> None:
    table = markdown_table(["a", "b"], [["x|y", "1"]])
    assert table.splitlines() == ["| a | b |", "| --- | ---: |", "| x\\|y | 1 |"]


def test_comparison_rows_put_zombied_over_cronjob() -> None:
    results = [
        result(ZOMBIED, 1000, "storm", latencies=[0.01, 0.02], zombies=2),
        result(CRONJOB, 1000, "storm", latencies=[30.0, 40.0], zombies=2),
    ]
    rows = {row[1]: row for row in comparison_rows(results, "storm")}
    assert rows["reap latency max"][2:] == ["20 ms", "40.0 s", "5.0e-04x"]
    assert rows["zombies"][4] == ""
    assert rows["wrong deletes"][2:4] == ["0", "0"]


def test_requests_per_zombie_uses_the_zombies_the_cost_covers() -> None:
    cron = result(CRONJOB, 1000, "storm", zombies=10, cost_zombies=20)
    cron.costs = {"delete": VerbCost(requests=20), "get": VerbCost(requests=20)}
    assert cron.requests_per_zombie == pytest.approx(2.0)


def test_memory_rows_and_growth() -> None:
    results = [
        result(ZOMBIED, 1000, "steady", peak_rss_bytes=100.0),
        result(ZOMBIED, 100000, "steady", peak_rss_bytes=105.0),
    ]
    assert [row[:2] for row in memory_rows(results)] == [["steady", "1,000"], ["steady", "100,000"]]
    assert rss_growth(results, "steady") == pytest.approx(1.05)
    assert rss_growth(results, "storm") is None


def test_targets_judge_latency_lists_and_memory() -> None:
    results = [
        result(
            ZOMBIED,
            1000,
            "trickle",
            latencies=[0.01, 0.3],
            setting="default limits",
            extra={"floor_p50": 0.0, "floor_p99": 0.0, "floor_max": 0.0},
        ),
        result(
            ZOMBIED,
            1000,
            "storm",
            latencies=[0.01, 2.05],
            extra={"floor_p50": 0.0, "floor_p99": 2.0, "floor_max": 2.0},
        ),
        result(ZOMBIED, 1000, "steady", peak_rss_bytes=100.0, extra={"open_watches": 1.0}),
        result(ZOMBIED, 10000, "steady", peak_rss_bytes=150.0, costs={"list": VerbCost(1)}),
    ]
    rows = targets_rows(results)
    verdicts = {row[0].split(",")[0].split(" from")[0]: row[3] for row in rows}
    latency = {row[0].split(", ")[3].split()[0]: row[3] for row in rows if "latency" in row[0]}
    assert latency["trickle"].startswith("missed: p99")
    assert latency["storm"] == "met"
    assert verdicts["no periodic LIST (after the first list"] == "missed"
    assert verdicts["one open watch per scope (cluster-wide: 1)"] == "met"
    assert verdicts["flat RSS"].startswith("missed by 40.0")


def test_document_mentions_the_machine_and_the_default_period_model() -> None:
    results = [
        result(ZOMBIED, 1000, "storm", latencies=[0.01], zombies=1),
        result(CRONJOB, 1000, "storm", latencies=[9.0], zombies=1, extra={"clear_run_s": 1.0}),
    ]
    text = render_document(
        results,
        facts={"CPU": "Test CPU"},
        plan={
            "sizes": [1000],
            "pods_per_node": 30,
            "namespaces": 10,
            "steady_s": 3.0,
            "storm_fraction": 0.1,
            "trickle_nodes": 3,
            "trickle_interval_s": 1.0,
            "cron_period_s": 8.0,
        },
        elapsed_s=42.0,
        picture="results.png",
        generated="today",
        command="make bench",
        model=lambda run_s: LatencySummary(0, 30.0 + run_s, 59.4 + run_s, 60.0 + run_s, 30.0),
    )
    assert "| CPU | Test CPU |" in text
    assert "![" in text
    assert "results.png" in text
    assert "default period of 60 s (model)" in text
    assert "| 1,000 pods | 31.0 s | 60.4 s | 61.0 s |" in text


def test_batch_names_respects_the_command_line_limit() -> None:
    names = [f"pod/n{i}" for i in range(10)]  # 6 characters + separator each
    batches = batch_names(names, prefix_chars=10, max_chars=10 + 7 * 4)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [n for b in batches for n in b] == names
    assert batch_names(["pod/" + "x" * 50], prefix_chars=0, max_chars=10) == [["pod/" + "x" * 50]]


def test_parse_listing_groups_by_namespace() -> None:
    text = "team-a  web-0\nteam-b   job-1\nteam-a web-1\n\n"
    assert parse_listing(text) == {"team-a": ["web-0", "web-1"], "team-b": ["job-1"]}


def test_cron_schedule_slots() -> None:
    cron = CronJob(kubeconfig=Path("k"), period=60.0, first=100.0)
    assert cron.next_slot(50.0) == 100.0
    assert cron.next_slot(100.0) == 100.0
    assert cron.next_slot(100.1) == 160.0
    assert cron.next_slot(160.0) == 160.0
    assert cron.next_slot(161.0) == 220.0


def test_phase_results_survive_the_json_round_trip() -> None:
    original = result(
        CRONJOB,
        1000,
        "storm",
        latencies=[0.123456, 2.0],
        costs={"delete": VerbCost(3, 300, 0.5)},
        extra={"projected": 2.0},
    )
    again = PhaseResult.from_json(original.to_json())
    assert again.latencies == [0.1235, 2.0]
    assert again.costs["delete"].bytes == 300
    assert again.projected == 2.0
