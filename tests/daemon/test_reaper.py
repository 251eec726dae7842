"""The one delete path against the simulator: preconditions, dry runs, outcomes, Events."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import parse_qs

import anyio
import pytest
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


def delete_queries(sim: Simulator) -> list[dict[str, list[str]]]:
    return [parse_qs(r.query) for r in sim.requests if r.verb == "delete"]


async def test_deletes_with_uid_precondition_and_records_event(
    sim: Simulator, kubeconfig: Path
) -> None:
    obj = sim.store.create("pods", zombie("web-1", node="spot-3"))
    snapshot = parse_pod(obj)
    answers = Answers()
    async with (
        open_kube(str(kubeconfig)) as api,
        EventRecorder(api, identity="test-replica") as events,
    ):
        reaper = Reaper(api, qps=100, burst=10, events=events, on_answer=answers)
        with captured_logs() as logs:
            outcome = await reaper.delete(snapshot, "node-shutdown")
    assert outcome.outcome == "deleted"
    assert sim.store.get("pods", "team-a", "web-1") is None
    (record,) = sim.deleted
    assert record.obj["metadata"]["uid"] == snapshot.uid
    assert not record.dry_run
    assert answers == [("node-shutdown", "deleted", 200)]
    (line,) = [entry for entry in logs if entry["event"] == "pod.reaped"]
    assert line["namespace"] == "team-a"
    assert line["pod"] == "web-1"
    assert line["uid"] == snapshot.uid
    assert line["rule"] == "node-shutdown"
    assert line["node"] == "spot-3"
    assert line["age_s"] >= 59
    (event,) = sim.store.list("events", "team-a")
    assert event["reason"] == "Reaped"
    assert event["type"] == "Normal"
    assert event["reportingComponent"] == "zombied"
    assert event["involvedObject"]["uid"] == snapshot.uid
    assert event["involvedObject"]["kind"] == "Pod"
    assert "node-shutdown" in event["message"]
    assert "spot-3" in event["message"]
    assert "imminent node shutdown" in event["message"]


async def test_replacement_with_same_name_survives(sim: Simulator, kubeconfig: Path) -> None:
    old = parse_pod(sim.store.create("pods", zombie("db-0", owner=("StatefulSet", "db"))))
    sim.store.delete("pods", "team-a", "db-0")
    sim.store.create("pods", pod("db-0", owner=("StatefulSet", "db")))
    async with open_kube(str(kubeconfig)) as api:
        with captured_logs() as logs:
            outcome = await Reaper(api).delete(old, "node-shutdown")
    assert outcome.outcome == "conflict"
    assert outcome.action is Action.DONE
    replacement = sim.store.get("pods", "team-a", "db-0")
    assert replacement is not None
    assert replacement["metadata"]["uid"] != old.uid
    assert [entry["event"] for entry in logs] == ["pod.conflict"]
    body_uids = [r.obj["metadata"]["uid"] for r in sim.deleted]
    assert replacement["metadata"]["uid"] not in body_uids


async def test_server_dry_run_deletes_nothing(sim: Simulator, kubeconfig: Path) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("dry")))
    async with open_kube(str(kubeconfig)) as api:
        with captured_logs() as logs:
            outcome = await Reaper(api, dry_run=DryRun.SERVER).delete(snapshot, "node-shutdown")
    assert outcome.outcome == "dry_run"
    assert sim.store.get("pods", "team-a", "dry") is not None
    assert [record.dry_run for record in sim.deleted] == [True]
    # The option travels in the body: beside a body, a query option would be ignored.
    assert delete_queries(sim) == [{}]
    assert sim.store.list("events", "team-a") == []
    assert any(e["event"] == "pod.dry_run" and e["mode"] == "server" for e in logs)


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
    assert outcomes[0].action is Action.ABANDONED
    assert sim.store.get("pods", "team-a", "slow") is not None


async def test_workers_re_evaluate_the_newest_snapshot(sim: Simulator, kubeconfig: Path) -> None:
    rules = RuleSet((Rule("node-shutdown", 0.0), Rule("evicted", 3600.0)))
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(rules, queue)
    due = parse_pod(sim.store.create("pods", zombie("due")))
    kept = parse_pod(sim.store.create("pods", zombie("kept")))
    later = parse_pod(sim.store.create("pods", evicted("later")))
    async with open_kube(str(kubeconfig)) as api:
        reaper = Reaper(api)
        for snapshot in (due, kept, later):
            cache.upsert(snapshot)
        # The newest state of "kept" carries the opt-out annotation.
        cache.upsert(
            parse_pod(
                {
                    **sim.store.get("pods", "team-a", "kept"),
                    "metadata": {
                        **sim.store.get("pods", "team-a", "kept")["metadata"],
                        "annotations": {"zombied.io/keep": "true"},
                    },
                }
            )
        )
        assert (await reaper.process("team-a/due", cache, queue)).outcome == "deleted"
        with captured_logs() as logs:
            assert await reaper.process("team-a/kept", cache, queue) is None
        assert logs[0]["event"] == "pod.skipped"
        assert logs[0]["why"] == "keep-annotation"
        assert await reaper.process("team-a/later", cache, queue) is None
        assert "team-a/later" in queue
        assert await reaper.process("team-a/unknown", cache, queue) is None
    assert [r.obj["metadata"]["name"] for r in sim.deleted] == ["due"]
    assert kept.uid


@pytest.mark.parametrize(("status", "retry_after"), [(429, 1), (429, None), (503, None)])
async def test_pushback_lowers_the_delete_rate_at_once(
    sim: Simulator, kubeconfig: Path, status: int, retry_after: float | None
) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("z")))
    sim.faults.add_error("delete", "pods", status=status, retry_after=retry_after, count=1)
    async with open_kube(str(kubeconfig)) as api:
        rates: list[float] = []
        reaper = Reaper(api, qps=20, burst=20, on_rate=rates.append)
        outcome = await reaper.delete(snapshot, "node-shutdown")
        assert outcome.code == status
        assert reaper.bucket.rate() == pytest.approx(14)
        assert rates == [20, pytest.approx(14)]
        # The next answer is a success: no further cut, the pod goes.
        assert (await reaper.delete(snapshot, "node-shutdown")).outcome == "deleted"
        assert reaper.bucket.pace is not None
        assert reaper.bucket.pace.cuts == 1


async def test_a_conflict_or_gone_does_not_slow_down(sim: Simulator, kubeconfig: Path) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("z")))
    sim.store.delete("pods", "team-a", "z")
    async with open_kube(str(kubeconfig)) as api:
        reaper = Reaper(api, qps=20, burst=20)
        assert (await reaper.delete(snapshot, "node-shutdown")).outcome == "gone"
        assert reaper.bucket.rate() == 20


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
