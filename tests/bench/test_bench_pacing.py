"""The pacing and real-server sections of the benchmark: judging and rendering."""

from __future__ import annotations

from typing import Any

import pytest
from bench.pacing import PacingResult, render
from bench.realserver import RealResult, judge, project_cut_run


def audit(agent: str, verb: str, name: str, code: int, done: float) -> dict[str, Any]:
    return {
        "userAgent": agent,
        "verb": verb,
        "objectRef": {"resource": "pods", "namespace": "storm", "name": name},
        "responseStatus": {"code": code},
        "_done": done,
    }


def test_judge_counts_by_verb_and_code_and_finds_wrong_deletes() -> None:
    result = RealResult(reaper="kubectl", zombies=2, decoys=1)
    events = [
        audit("kubectl/v1.32.4 (linux/amd64)", "list", "", 200, 10.0),
        audit("kubectl/v1.32.4 (linux/amd64)", "delete", "web-0", 200, 12.0),
        audit("kubectl/v1.32.4 (linux/amd64)", "delete", "web-1", 200, 13.0),
        audit("kubectl/v1.32.4 (linux/amd64)", "delete", "evicted-0", 200, 13.5),
        audit("zombied/0.2.0 (linux/amd64) kubernetes_asyncio/36.1.0", "delete", "x", 200, 1.0),
    ]
    judge(
        result,
        events,
        agent_prefix="kubectl",
        namespace="storm",
        written={"web-0": 10.0, "web-1": 11.0},
        decoy_names={"evicted-0"},
    )
    assert result.requests == {"delete pods 200": 3, "list pods 200": 1}
    assert result.wrong == 1
    assert result.missed == 0
    assert result.clear_after_last_write_s == 2.0
    assert result.latency_p50_s == 2.0


def test_judge_a_storm_not_cleared_has_no_clear_time() -> None:
    result = RealResult(reaper="zombied", zombies=2, decoys=0)
    judge(
        result,
        [audit("zombied/0.2.0", "delete", "web-0", 200, 12.0)],
        agent_prefix="zombied/",
        namespace="storm",
        written={"web-0": 10.0, "web-1": 11.0},
        decoy_names=set(),
    )
    assert result.missed == 1
    assert not result.cleared
    assert result.clear_after_last_write_s != result.clear_after_last_write_s  # NaN


def test_render_compares_the_pushback_run_with_its_clean_twin() -> None:
    clean = PacingResult("storm", 1000, "", 60.0, clear_after_last_write_s=40.0)
    clean.requests = {"delete pods 200": 1000, "create events 201": 1000}
    pushed = PacingResult("storm, 429", 1000, "error:...", None, clear_after_last_write_s=150.0)
    pushed.requests = {"delete pods 200": 1000, "delete pods 429": 250, "create events 201": 1000}
    text = "\n".join(render([clean, pushed], picture="pacing.png"))
    assert "1.12x the clean run" in text
    assert "40.0 s (target 60.0 s) (target met)" in text


def test_a_cut_kubectl_run_is_projected_at_its_rate() -> None:
    result = RealResult(reaper="kubectl", zombies=20, decoys=1)
    written = {f"web-{i:02d}": 0.0 for i in range(20)}
    order = ["evicted-0", *written]
    # Ten deletes (one decoy, nine zombies) at 5/s, then the deadline.
    deleted = {name: 1.0 + i / 5 for i, name in enumerate(order[:10])}
    project_cut_run(result, order, deleted, started=0.0, written=written, decoy_names={"evicted-0"})
    assert result.projected == 11
    assert result.missed == 0
    # The last real delete at 2.8 s, then eleven more at 5/s.
    assert result.clear_after_last_write_s == pytest.approx(2.8 + 11 / 5)
    assert "11 deletes projected at 5.0/s" in result.note
