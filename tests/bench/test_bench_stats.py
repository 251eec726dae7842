"""The benchmark's statistics: percentiles, audits of the delete log, API cost."""

from __future__ import annotations

import math
from typing import Any

import pytest
from bench.stats import (
    LatencySummary,
    Zombie,
    audit_deletes,
    clear_time,
    cost_by_verb,
    expected_cron_latency,
    is_node_shutdown_zombie,
    peak,
    per_minute,
    percentile,
    project_remaining,
    rate_limit_floor,
    rate_limited_schedule,
    ratio,
    total_cost,
)


def pod(
    uid: str,
    *,
    name: str = "web-0",
    namespace: str = "team-a",
    phase: str = "Failed",
    reason: str = "Terminated",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "status": {"phase": phase, "reason": reason}}


def deleted(obj: dict[str, Any], at: float, **extra: Any) -> dict[str, Any]:
    return {"obj": obj, "time": at, "dry_run": False, "user": "admin", **extra}


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),
        (list(map(float, range(101))), 99, 99.0),
        ([0.0, 10.0], 99, 9.9),
    ],
)
def test_percentile_interpolates_between_closest_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan_not_zero() -> None:
    assert math.isnan(percentile([], 50))


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_latency_summary() -> None:
    summary = LatencySummary.of([0.1, 0.2, 0.3, 0.4])
    assert summary.count == 4
    assert summary.p50 == pytest.approx(0.25)
    assert summary.max == pytest.approx(0.4)
    assert summary.mean == pytest.approx(0.25)
    assert math.isnan(LatencySummary.of([]).p99)


@pytest.mark.parametrize(
    ("num", "den", "expected"),
    [(1.0, 4.0, 0.25), (1.0, 0.0, None), (None, 1.0, None), (math.nan, 1.0, None)],
)
def test_ratio(num: float | None, den: float | None, expected: float | None) -> None:
    assert ratio(num, den) == expected


@pytest.mark.parametrize(
    ("obj", "zombie"),
    [
        (pod("u"), True),
        (pod("u", reason="Shutdown"), True),
        (pod("u", reason="NodeShutdown"), True),
        (pod("u", phase="Succeeded", reason="Terminated"), True),
        (pod("u", reason="Error"), False),
        (pod("u", reason="Evicted"), False),
        (pod("u", phase="Running", reason=""), False),
        (pod("u", annotations={"zombied.io/keep": "true"}), False),
    ],
)
def test_node_shutdown_rule(obj: dict[str, Any], zombie: bool) -> None:
    assert is_node_shutdown_zombie(obj) is zombie


def test_pod_being_deleted_is_not_a_zombie() -> None:
    obj = pod("u")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not is_node_shutdown_zombie(obj)


def test_audit_measures_latency_from_status_change_to_delete() -> None:
    zombies = [
        Zombie("team-a", "a", "u1", failed_at=100.0, group="storm"),
        Zombie("team-a", "b", "u2", failed_at=100.5, group="trickle"),
    ]
    log = [deleted(pod("u1", name="a"), 100.25), deleted(pod("u2", name="b"), 101.0)]
    audit = audit_deletes(zombies, log)
    assert audit.latencies == {"storm": [0.25], "trickle": [0.5]}
    assert audit.missed == []
    assert audit.wrong == []
    assert sorted(audit.all_latencies) == [0.25, 0.5]


def test_audit_counts_misses() -> None:
    zombies = [Zombie("team-a", "a", "u1", 1.0, "storm"), Zombie("team-a", "b", "u2", 1.0, "x")]
    audit = audit_deletes(zombies, [deleted(pod("u1", name="a"), 2.0)])
    assert [z.uid for z in audit.missed] == ["u2"]
    assert audit.missed_in({"x"}) == 1
    assert audit.missed_in({"storm"}) == 0


def test_audit_flags_replacement_that_reused_the_name() -> None:
    zombies = [Zombie("team-a", "web-0", "old", 1.0, "storm")]
    replacement = pod("new", name="web-0", phase="Running", reason="")
    audit = audit_deletes(zombies, [deleted(pod("old"), 2.0), deleted(replacement, 3.0)])
    assert len(audit.wrong) == 1
    assert audit.wrong[0].uid == "new"
    assert audit.missed == []


def test_audit_flags_pods_failed_for_other_reasons() -> None:
    audit = audit_deletes([], [deleted(pod("job", name="job-x", reason="Error"), 1.0)])
    assert [(w.name, w.reason) for w in audit.wrong] == [("job-x", "Error")]


def test_audit_flags_known_uid_that_no_longer_matches() -> None:
    zombies = [Zombie("team-a", "a", "u1", 1.0, "storm")]
    kept = pod("u1", name="a", annotations={"zombied.io/keep": "true"})
    audit = audit_deletes(zombies, [deleted(kept, 2.0)])
    assert len(audit.wrong) == 1
    assert len(audit.missed) == 1


def test_audit_ignores_dry_runs_and_other_users() -> None:
    zombies = [Zombie("team-a", "a", "u1", 1.0, "storm")]
    log = [
        deleted(pod("u1", name="a"), 2.0, dry_run=True),
        deleted(pod("u1", name="a"), 3.0, user="someone"),
    ]
    audit = audit_deletes(zombies, log, user="admin")
    assert len(audit.missed) == 1
    assert audit.wrong == []


def test_audit_counts_a_uid_once_and_never_negative() -> None:
    zombies = [Zombie("team-a", "a", "u1", 5.0, "storm")]
    log = [deleted(pod("u1", name="a"), 4.9), deleted(pod("u1", name="a"), 6.0)]
    assert audit_deletes(zombies, log).latencies == {"storm": [0.0]}


def request(verb: str, at: float, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "verb": verb,
        "path": "/api/v1/pods",
        "bytes": 100,
        "duration": 0.0,
        "user": "admin",
        "time": at,
    }
    record.update(extra)
    return record


def test_cost_by_verb_windows_by_start_and_skips_control_api() -> None:
    records = [
        request("list", 1.0),
        request("delete", 5.0, bytes=50, duration=0.5),
        request("delete", 6.0, bytes=50),
        # A watch opened at 2 s, answered (closed) at 20 s: placed at its start.
        request("watch", 20.0, duration=18.0, bytes=0),
        request("get", 5.0, path="/_sim/deleted"),
        request("get", 50.0),
    ]
    costs = cost_by_verb(records, since=1.5, until=10.0)
    assert list(costs) == ["delete", "watch"]
    assert costs["delete"].requests == 2
    assert costs["delete"].bytes == 100
    assert costs["delete"].seconds == pytest.approx(0.5)
    total = total_cost(costs)
    assert (total.requests, total.bytes) == (3, 100)


def test_cost_by_verb_filters_users() -> None:
    records = [request("delete", 1.0, user="zombied"), request("delete", 1.0, user="kubectl")]
    assert cost_by_verb(records, users={"zombied"})["delete"].requests == 1


def test_rates_peaks_and_clear_time() -> None:
    assert per_minute(10, 30.0) == pytest.approx(20.0)
    assert math.isnan(per_minute(1, 0.0))
    samples = [(1.0, 10.0), (2.0, 30.0), (3.0, 20.0)]
    assert peak(samples, 2.5, 3.0) == 20.0
    assert math.isnan(peak(samples, 5.0, 6.0))
    assert clear_time([1.0, 2.0], [3.0, 7.5]) == pytest.approx(6.5)
    assert math.isnan(clear_time([], [1.0]))


def test_expected_cron_latency_is_dominated_by_the_period() -> None:
    model = expected_cron_latency(60.0, 2.0)
    assert model.p50 == pytest.approx(32.0)
    assert model.p99 == pytest.approx(61.4)
    assert model.max == pytest.approx(62.0)


def test_projection_continues_at_the_measured_rate() -> None:
    order = [f"ns/p{i}" for i in range(20)]
    deleted_at = {f"ns/p{i}": 100.0 + i * 0.2 for i in range(10)}  # 5 per second
    projection = project_remaining(order, deleted_at, start=99.0, fallback_rate=1.0)
    assert projection.rate == pytest.approx(5.0)
    assert set(projection.times) == {f"ns/p{i}" for i in range(10, 20)}
    assert projection.times["ns/p10"] == pytest.approx(101.8 + 0.2)
    assert projection.times["ns/p19"] == pytest.approx(101.8 + 2.0)


def test_projection_without_deletes_uses_the_fallback_rate_from_the_start() -> None:
    projection = project_remaining(["a", "b"], {}, start=10.0, fallback_rate=5.0)
    assert projection.times == {"a": pytest.approx(10.2), "b": pytest.approx(10.4)}


def test_rate_limit_floor_is_zero_within_the_burst() -> None:
    assert rate_limit_floor([0.0] * 10, qps=5.0, burst=10) == [0.0] * 10


def test_rate_limit_floor_queues_beyond_the_burst_at_qps() -> None:
    floor = rate_limit_floor([0.0] * 12, qps=5.0, burst=10)
    assert floor[10] == pytest.approx(0.2)
    assert floor[11] == pytest.approx(0.4)


def test_rate_limit_floor_refills_between_arrivals() -> None:
    # 30 at once, then 30 more after the bucket had 10 s to refill.
    floor = rate_limit_floor([0.0] * 30 + [10.0] * 30, qps=5.0, burst=10)
    assert floor[29] == pytest.approx(4.0)
    assert floor[30] == pytest.approx(0.0)
    assert floor[59] == pytest.approx(4.0)


def test_rate_limit_schedule_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="qps"):
        rate_limited_schedule([1.0], qps=0.0, burst=1)


def test_audit_measures_from_the_send_when_the_delete_beat_the_answer() -> None:
    zombies = [Zombie("team-a", "a", "u1", failed_at=10.0, group="storm", sent_at=9.0)]
    audit = audit_deletes(zombies, [deleted(pod("u1", name="a"), 9.5)])
    assert audit.latencies == {"storm": [pytest.approx(0.5)]}
