"""The real-server benchmark's CronJob schedules: scoping, stopping, judging, rendering."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from bench.cronjob import CronJob, CronRun, Invocation, listing_argv
from bench.realserver import (
    RealResult,
    cron_user,
    first_slot,
    interleave,
    judge,
    judge_schedule,
    render,
    schedule_label,
    schedule_over,
)


def event(user: str, verb: str, name: str, code: int, done: float, **extra: Any) -> dict[str, Any]:
    return {
        "user": {"username": user},
        "userAgent": extra.get("agent", "kubectl/v1.32.4 (linux/amd64)"),
        "verb": verb,
        "objectRef": {
            "resource": "pods",
            "namespace": extra.get("namespace", "cron-a"),
            "name": name,
        },
        "responseStatus": {"code": code},
        "_done": done,
    }


def run(
    started: float, finished: float, *, cut_at: float | None = None, order: Sequence[str] = ()
) -> CronRun:
    made = CronRun(scheduled=started, started=started, finished=finished, cut_at=cut_at)
    made.order = list(order)
    return made


def test_the_listing_is_cluster_wide_unless_scoped_to_a_namespace() -> None:
    base = ["kubectl", "--kubeconfig=k"]
    everywhere = listing_argv(base)
    assert everywhere[:4] == ["kubectl", "--kubeconfig=k", "get", "pods"]
    assert "-A" in everywhere
    assert "-n" not in everywhere
    scoped = listing_argv(base, "cron-a")
    assert "-A" not in scoped
    assert scoped[scoped.index("-n") + 1] == "cron-a"
    assert "--field-selector=status.phase==Failed" in scoped


def test_a_schedule_runs_in_its_namespace_and_ends_when_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str | None, float | None]] = []

    def fake_run_once(kubeconfig: Path, **kwargs: Any) -> CronRun:
        seen.append((kwargs["namespace"], kwargs["deadline_s"]))
        return run(kwargs["scheduled"], kwargs["scheduled"])

    monkeypatch.setattr("bench.cronjob.run_once", fake_run_once)
    asked: list[int] = []

    def stop_after(runs: Sequence[CronRun]) -> bool:
        asked.append(len(runs))
        return len(runs) == 2

    cron = CronJob(
        Path("k"),
        period=0.001,
        first=0.0,
        deadline_s=5.0,
        namespace="cron-a",
        stop_after=stop_after,
    )
    with cron:
        assert cron.join(timeout=10)  # it ends on its own after the second run
        assert not cron.running
    assert seen == [("cron-a", 5.0), ("cron-a", 5.0)]
    assert asked == [1, 2]
    assert len(cron.completed_runs()) == 2


def test_a_halted_schedule_starts_no_run() -> None:
    cron = CronJob(Path("k"), period=60.0, first=time.time() + 3600.0)
    with cron:
        cron.halt()
        assert cron.join(timeout=10)
    assert cron.completed_runs() == []


def test_the_storm_lands_halfway_through_each_period() -> None:
    assert first_slot(1000.0, 540.0) == 1270.0
    assert first_slot(1000.0, 60.0) == 1030.0
    cron = CronJob(Path("k"), period=60.0, first=first_slot(1000.0, 60.0))
    assert cron.next_slot(1000.0) == 1030.0
    assert cron.next_slot(1030.5) == 1090.0


def test_interleave_alternates_the_storms() -> None:
    assert interleave([["a0", "a1", "a2"], ["b0", "b1"]]) == ["a0", "b0", "a1", "b1", "a2"]
    assert interleave([]) == []


@pytest.mark.parametrize(
    ("runs", "left", "now", "over"),
    [
        ([], None, 1e9, False),  # nothing ran yet
        ([run(0.0, 100.0)], 0, 100.0, True),  # cleared by its first run
        ([run(0.0, 240.0, cut_at=240.0)], None, 240.0, True),  # first run cut: projected
        ([run(0.0, 100.0)], 3, 120.0, False),  # zombies left: a period for another run
        ([run(0.0, 100.0)], None, 159.0, False),
        ([run(0.0, 100.0), run(120.0, 130.0)], 1, 160.0, True),  # that period is over
        ([run(0.0, 100.0), run(120.0, 130.0)], 0, 130.0, True),
    ],
)
def test_when_a_schedule_stops(
    runs: list[CronRun], left: int | None, now: float, over: bool
) -> None:
    assert schedule_over(runs, left, period=60.0, now=now) is over


def test_judge_tells_two_schedules_apart_by_user() -> None:
    a, b = cron_user(540.0), cron_user(60.0)
    events = [
        event(a, "list", "", 200, 10.0),
        event(a, "delete", "web-0", 200, 12.0),
        event(a, "delete", "evicted-0", 200, 12.5),
        event(b, "list", "", 200, 1.0, namespace="cron-b"),
        event(b, "delete", "web-0", 200, 2.0, namespace="cron-b"),
        event(b, "delete", "web-1", 404, 2.5, namespace="cron-b"),
        event("admin", "list", "", 200, 3.0, agent="zombied-bench-kubelet"),
    ]
    first = RealResult(reaper="kubectl", zombies=1, decoys=1, schedule_s=540.0)
    judge(
        first,
        events,
        user=a,
        namespace="cron-a",
        written={"web-0": 0.0},
        decoy_names={"evicted-0"},
    )
    assert first.requests == {"delete pods 200": 2, "list pods 200": 1}
    assert (first.wrong, first.missed, first.clear_after_last_write_s) == (1, 0, 12.0)
    second = RealResult(reaper="kubectl", zombies=2, decoys=0, schedule_s=60.0)
    judge(
        second,
        events,
        user=b,
        namespace="cron-b",
        written={"web-0": 0.0, "web-1": 0.0},
        decoy_names=set(),
    )
    assert second.requests == {"delete pods 200": 1, "delete pods 404": 1, "list pods 200": 1}
    assert (second.wrong, second.missed, second.cleared) == (0, 1, False)


def test_judge_by_user_and_agent_both_must_match() -> None:
    events = [
        event("zombied", "delete", "web-0", 200, 1.0, agent="zombied/0.2.0"),
        event("zombied", "get", "", 200, 1.0, agent="curl/8"),
    ]
    result = RealResult(reaper="zombied", zombies=1, decoys=0)
    judge(
        result,
        events,
        user="zombied",
        agent_prefix="zombied/",
        namespace="cron-a",
        written={"web-0": 0.5},
        decoy_names=set(),
    )
    assert result.requests == {"delete pods 200": 1}


def test_a_schedule_sums_its_runs_and_projects_a_cut_one_from_its_start() -> None:
    written = {f"web-{i}": 0.0 for i in range(20)}
    # The schedule's run starts at 30 s (its slot), deletes 10 zombies at 5/s, then its
    # deadline cuts it: the other ten follow at the same rate.
    events = [event(cron_user(60.0), "delete", f"web-{i}", 200, 31.0 + i / 5) for i in range(10)]
    cut = run(30.0, 40.0, cut_at=40.0, order=[f"cron-a/web-{i}" for i in range(20)])
    cut.invocations = [
        Invocation("get pods -n", 1.0, 0.25, 50 << 20, 0),
        Invocation("delete --wait=false -n", 9.0, 1.5, 80 << 20, -9),
    ]
    result = RealResult(reaper="kubectl", zombies=20, decoys=0, schedule_s=60.0)
    judge_schedule(result, events, [cut], namespace="cron-a", written=written, decoy_names=set())
    assert result.runs == 1
    assert result.cpu_s == pytest.approx(1.75)
    assert result.peak_rss_bytes == 80 << 20
    assert result.projected == 10
    assert result.cleared
    # The last real delete at 32.8 s, then ten more at 5/s.
    assert result.clear_after_last_write_s == pytest.approx(32.8 + 10 / 5)
    assert result.latency_p50_s > 30.0  # the wait for the slot counts


def test_a_cut_run_that_deleted_nothing_is_projected_from_its_own_start() -> None:
    written = {"web-0": 0.0, "web-1": 0.0}
    cut = run(270.0, 275.0, cut_at=275.0, order=["cron-a/web-0", "cron-a/web-1"])
    result = RealResult(reaper="kubectl", zombies=2, decoys=0, schedule_s=540.0)
    judge_schedule(result, [], [cut], namespace="cron-a", written=written, decoy_names=set())
    assert result.clear_after_last_write_s == pytest.approx(270.0 + 2 / 5)


@pytest.mark.parametrize(
    ("period", "text"), [(540.0, "every 9 min"), (60.0, "every 1 min"), (20.0, "every 20 s")]
)
def test_schedule_label(period: float, text: str) -> None:
    assert schedule_label(period) == text


def test_results_written_before_the_schedules_still_load() -> None:
    old = {"reaper": "kubectl", "zombies": 200, "decoys": 10, "clear_after_last_write_s": 40.0}
    result = RealResult(**old)  # type: ignore[arg-type]
    assert result.schedule_s == 0.0
    assert result.label == "kubectl, one run"
    assert RealResult(**result.to_json()) == result


def real(reaper: str, zombies: int, clear: float, **values: Any) -> RealResult:
    made = RealResult(reaper=reaper, zombies=zombies, decoys=10, clear_after_last_write_s=clear)
    made.latency_p50_s = made.latency_p99_s = clear
    made.cpu_s, made.peak_rss_bytes = 1.0, float(64 << 20)
    for name, value in values.items():
        setattr(made, name, value)
    return made


def test_render_has_one_row_per_reaper_and_schedule() -> None:
    results = [
        real("zombied", 200, 4.5),
        real("zombied", 1000, 42.0),
        real("kubectl", 1000, 471.0, schedule_s=540.0, runs=1),
        real("kubectl", 1000, 231.0, schedule_s=60.0, runs=1),
        real(
            "kubectl",
            10000,
            2269.0,
            schedule_s=540.0,
            runs=1,
            projected=8840,
            note="8,840 deletes projected at 5.0/s",
        ),
    ]
    results[2].requests = {"delete pods 200": 1010, "list pods 200": 3}
    lines = render(results, kubectl_deadline_s=240.0)
    rows = [line for line in lines if line.startswith(("| zombied", "| kubectl"))]
    assert [row.split(" | ")[0] for row in rows] == [
        "| zombied",
        "| zombied",
        "| kubectl every 9 min",
        "| kubectl every 1 min",
        "| kubectl every 9 min",
    ]
    assert "4.5 s (target 10 s: met)" in rows[0]
    assert "471.0 s (1 run) |" in rows[2]
    assert "| 1,013 | delete pods 200 1,010, list pods 200 3 |" in rows[2]
    assert "(1 run; 8,840 deletes projected at 5.0/s)" in rows[4]
    assert "target" not in rows[2] + rows[4]
    text = " ".join(lines)
    assert "every 9 min and every 1 min" in text
    assert "mid-period" in text
    assert "longer than 240 s is cut" in text
    assert "by user" in text
    assert "storms of 1,000 and 10,000 zombies only" in text
    assert "model" not in text


def test_render_of_nothing_is_empty() -> None:
    assert render([]) == []
