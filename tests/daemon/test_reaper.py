"""The one delete path against the simulator: preconditions, dry runs, outcomes, Events."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import REGISTRY
from zombied import metrics
from zombied.cache import PodCache
from zombied.config import DryRun
from zombied.events import EventRecorder
from zombied.kube import open_kube
from zombied.leader import Leadership
from zombied.pod import parse_pod
from zombied.queue import WorkQueue
from zombied.ratelimit import RETRY_JITTER
from zombied.reaper import Action, Reaper
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.conftest import captured_logs
from tests.daemon.pods import evicted, pod, zombie
from tests.helpers import eventually


class Answers(list[tuple[str, str, int]]):
    """The ``on_answer`` callback of a reaper: (rule, outcome, code) of each attempt."""

    def __call__(self, rule: str, outcome: str, code: int, _seconds: float | None) -> None:
        self.append((rule, outcome, code))


async def test_deletes_with_uid_precondition_and_records_event(
    sim: Simulator, kubeconfig: Path
) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("web-1", node="spot-3")))
    answers = Answers()
    async with open_kube(str(kubeconfig)) as api, EventRecorder(api) as events:
        reaper = Reaper(api, events=events, on_answer=answers)
        with captured_logs() as logs:
            assert (await reaper.delete(snapshot, "node-shutdown")).outcome == "deleted"
    (record,) = sim.deleted
    assert (record.obj["metadata"]["uid"], record.dry_run) == (snapshot.uid, False)
    assert answers == [("node-shutdown", "deleted", 200)]
    (line,) = [entry for entry in logs if entry["event"] == "pod.reaped"]
    assert {key: line[key] for key in ("namespace", "pod", "uid", "rule", "node")} == {
        "namespace": "team-a",
        "pod": "web-1",
        "uid": snapshot.uid,
        "rule": "node-shutdown",
        "node": "spot-3",
    }
    assert line["age_s"] >= 59
    (event,) = sim.store.list("events", "team-a")
    assert (event["reason"], event["type"], event["reportingComponent"]) == (
        "Reaped",
        "Normal",
        "zombied",
    )
    involved = event["involvedObject"]
    assert (involved["kind"], involved["uid"]) == ("Pod", snapshot.uid)
    assert all(word in event["message"] for word in ("node-shutdown", "spot-3", "node shutdown"))


def annotate_keep(sim: Simulator, name: str) -> None:
    current = sim.store.get("pods", "team-a", name)
    current["metadata"]["annotations"] = {"zombied.io/keep": "true"}
    sim.store.update("pods", current, check_rv=False)


def replace(sim: Simulator, name: str) -> None:
    sim.store.delete("pods", "team-a", name)
    sim.store.create("pods", pod(name, owner=("StatefulSet", "db")))


@pytest.mark.parametrize("change", [annotate_keep, replace], ids=["changed", "replaced"])
async def test_a_pod_changed_or_replaced_since_it_was_judged_survives(
    sim: Simulator, kubeconfig: Path, change: Any
) -> None:
    """The uid precondition guards a new pod under the old name (even with no
    resourceVersion to send), the resourceVersion one a pod changed (here: protected)
    since it was judged."""
    judged = parse_pod(sim.store.create("pods", zombie("db-0", owner=("StatefulSet", "db"))))
    if change is replace:
        judged = dataclasses.replace(judged, resource_version="")
    change(sim, "db-0")
    async with open_kube(str(kubeconfig)) as api:
        with captured_logs() as logs:
            outcome = await Reaper(api).delete(judged, "node-shutdown")
    assert (outcome.outcome, outcome.action) == ("conflict", Action.DONE)
    assert sim.store.get("pods", "team-a", "db-0") is not None
    assert not [record for record in sim.deleted if record.user]  # only the test's own
    assert [entry["event"] for entry in logs] == ["pod.conflict"]


def dry_runs() -> float:
    labels = {"rule": "node-shutdown", "outcome": "dry_run"}
    return REGISTRY.get_sample_value("zombied_pods_reaped_total", labels) or 0.0


@pytest.mark.parametrize("mode", [DryRun.CLIENT, DryRun.SERVER])
async def test_a_dry_run_deletes_nothing(sim: Simulator, kubeconfig: Path, mode: DryRun) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("dry")))
    before = dry_runs()
    async with open_kube(str(kubeconfig)) as api, EventRecorder(api) as events:
        reaper = Reaper(api, dry_run=mode, events=events, on_answer=metrics.delete_answered)
        with captured_logs() as logs:
            assert (await reaper.delete(snapshot, "node-shutdown")).outcome == "dry_run"
    assert sim.store.get("pods", "team-a", "dry") is not None
    assert dry_runs() == before + 1
    # Server: dryRun travels in the body (beside a body, a query option would be ignored).
    assert [record.dry_run for record in sim.deleted] == ([True] if mode is DryRun.SERVER else [])
    assert {r.query for r in sim.requests if r.verb == "delete"} <= {""}
    assert sim.store.list("events", "team-a") == []
    assert any(e["event"] == "pod.dry_run" and e["mode"] == str(mode) for e in logs)


async def test_losing_leadership_cancels_in_flight_delete(sim: Simulator, kubeconfig: Path) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("slow")))
    sim.faults.add_latency("delete", "pods", 30.0)
    leadership = Leadership(True)
    async with open_kube(str(kubeconfig)) as api:
        reaper = Reaper(api, leadership=leadership)
        outcomes = []

        async def attempt() -> None:
            outcomes.append(await reaper.delete(snapshot, "node-shutdown"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(attempt)
            await eventually(lambda: leadership.in_flight)
            leadership.end_term()
        # Leadership is checked last, after the wait for a token: a standby sends nothing.
        outcomes.append(await reaper.delete(snapshot, "node-shutdown"))
        # A standby never deletes: the key goes back to the queue.
        queue: WorkQueue[str] = WorkQueue()
        cache = PodCache(RuleSet((Rule("node-shutdown", 0.0),)), queue)
        cache.upsert(snapshot)
        key = await queue.get()
        assert await reaper.process(key, cache, queue) is None
        queue.done(key)
        assert key in queue
    assert [outcome.action for outcome in outcomes] == [Action.ABANDONED] * 2
    assert len(sim.requests.filter("delete")) <= 1  # the one cut off in flight
    assert sim.store.get("pods", "team-a", "slow") is not None


async def test_workers_re_evaluate_the_newest_snapshot(sim: Simulator, kubeconfig: Path) -> None:
    rules = RuleSet((Rule("node-shutdown", 0.0), Rule("evicted", 3600.0)))
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(rules, queue)
    for obj in (zombie("due"), zombie("kept"), evicted("later")):
        cache.upsert(parse_pod(sim.store.create("pods", obj)))
    # The newest state of "kept" carries the opt-out annotation.
    annotate_keep(sim, "kept")
    cache.upsert(parse_pod(sim.store.get("pods", "team-a", "kept")))
    async with open_kube(str(kubeconfig)) as api:
        reaper = Reaper(api)
        assert (await reaper.process("team-a/due", cache, queue)).outcome == "deleted"
        with captured_logs() as logs:
            assert await reaper.process("team-a/kept", cache, queue) is None
        assert (logs[0]["event"], logs[0]["why"]) == ("pod.skipped", "keep-annotation")
        assert await reaper.process("team-a/later", cache, queue) is None
        assert "team-a/later" in queue
        assert await reaper.process("team-a/unknown", cache, queue) is None
    assert [r.obj["metadata"]["name"] for r in sim.deleted] == ["due"]


@pytest.mark.parametrize(("status", "rate"), [(429, 14), (503, 14), (404, 20)])
async def test_pushback_and_only_pushback_lowers_the_delete_and_event_rates_at_once(
    sim: Simulator, kubeconfig: Path, status: int, rate: float
) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("z")))
    if status == 404:
        sim.store.delete("pods", "team-a", "z")
    else:
        retry_after = 1 if status == 429 else None
        sim.faults.add_error("delete", "pods", status=status, retry_after=retry_after, count=1)
    async with open_kube(str(kubeconfig)) as api, EventRecorder(api) as events:
        rates: list[float] = []
        before = events.bucket.rate()
        reaper = Reaper(api, qps=20, burst=20, events=events, on_rate=rates.append)
        assert (await reaper.delete(snapshot, "node-shutdown")).code == status
        assert reaper.bucket.rate() == pytest.approx(rate)
        assert rates == [20, pytest.approx(rate)][: 1 + (rate != 20)]
        # Events yield to deletes: they slow down with them.
        assert (events.bucket.rate() < before) is (rate != 20)
        if status != 404:  # the next answer is a success: no further cut
            assert (await reaper.delete(snapshot, "node-shutdown")).outcome == "deleted"
            assert reaper.bucket.pace is not None
            assert reaper.bucket.pace.cuts == 1


async def test_a_throttled_key_comes_back_after_retry_after_plus_jitter(
    sim: Simulator, kubeconfig: Path
) -> None:
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RuleSet((Rule("node-shutdown", 0.0),)), queue)
    cache.upsert(parse_pod(sim.store.create("pods", zombie("z"))))
    sim.faults.add_error("delete", "pods", status=429, retry_after=2, count=1)
    key = await queue.get()
    async with open_kube(str(kubeconfig)) as api:
        sent = asyncio.get_running_loop().time()
        outcome = await Reaper(api).process(key, cache, queue)
        answered = asyncio.get_running_loop().time()
    queue.done(key)
    assert outcome is not None
    assert outcome.action is Action.RETRY_AFTER
    due = queue.due_at(key)
    assert due is not None
    # Never before the server's Retry-After, at most half of it later.
    assert due - sent >= 2
    assert due - answered <= 2 * (1 + RETRY_JITTER)
