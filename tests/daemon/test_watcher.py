"""The list-watch loop: against the simulator (cache, queue, relists, faults, RBAC, lines
too long), and against a scripted server on loop time (silent streams, bookmarks,
Retry-After, and hostile lines: every bad line a logged skip, never a dead watch)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from structlog.testing import capture_logs
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.kube import ApiError, Request
from zombied.queue import WorkQueue
from zombied.ratelimit import MAX_RETRY_AFTER
from zombied.rules import Rule, RuleSet, Selection
from zombied.watch import (
    BOOKMARK_PERIOD,
    TERMINAL_FIELD_SELECTOR,
    UNHEARD_TIMEOUT,
    Scope,
)

from kubesim import PolicyRule, Simulator
from kubesim.requestlog import RequestRecord
from tests.daemon.conftest import watching
from tests.daemon.pods import pod, zombie
from tests.daemon.scripted import HANG, ScriptedApi, bookmark, event, scripted
from tests.helpers import eventually

RULES = RuleSet((Rule("node-shutdown", 0.0),))


def query(record: RequestRecord) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(record.query).items()}


SCOPE = Scope(None, Selection(exclude_namespaces=("kube-system",)))


async def test_lists_pages_then_watches(sim: Simulator, kubeconfig: Path) -> None:
    for i in range(5):
        sim.store.create("pods", zombie(f"old-{i}"))
    sim.store.create("pods", pod("running"))
    sim.store.create("pods", zombie("sys", "kube-system"))
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    async with watching(kubeconfig, cache, SCOPE, page_size=2) as watcher:
        await eventually(lambda: watcher.state.synced)
        listed_at = watcher.resource_version
        assert sorted(entry.snapshot.name for entry in cache.entries()) == [
            f"old-{i}" for i in range(5)
        ]
        assert cache.zombies == 5
        assert len(queue) == 5
        sim.store.create("pods", zombie("new"))
        await eventually(lambda: "team-a/new" in cache)
        sim.faults.cut_watches()  # a watch is logged once it ends
        await eventually(lambda: any(r.verb == "watch" for r in sim.requests))
    lists = [r for r in sim.requests if r.verb == "list" and r.resource == "pods"]
    assert len(lists) == 3  # 5 terminal pods in pages of 2
    selectors = {query(r)["fieldSelector"] for r in lists}
    assert selectors == {f"{TERMINAL_FIELD_SELECTOR},metadata.namespace!=kube-system"}
    assert [query(r).get("limit") for r in lists] == ["2", "2", "2"]
    watches = [query(r) for r in sim.requests if r.verb == "watch"]
    assert watches
    assert watches[0]["allowWatchBookmarks"] == "true"
    assert int(watches[0]["timeoutSeconds"]) > 0
    assert watches[0]["resourceVersion"] == listed_at


async def test_relists_and_reconciles_after_410(sim: Simulator, kubeconfig: Path) -> None:
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    async with watching(kubeconfig, cache, SCOPE, timeout_min=2, timeout_max=3) as watcher:
        await eventually(lambda: watcher.state.synced)
        sim.store.create("pods", zombie("stays"))
        sim.store.create("pods", zombie("vanishes"))
        await eventually(lambda: len(cache) == 2)
        with capture_logs() as logs:
            # Cut the stream first so the deletion and the new pod are only seen by a relist.
            sim.faults.add_error("watch", "pods", status=503, count=1)
            sim.faults.cut_watches()
            sim.store.delete("pods", "team-a", "vanishes")
            sim.store.create("pods", zombie("appears"))
            sim.compact()
            await eventually(lambda: "team-a/appears" in cache, message=str(watcher.state))
            await eventually(lambda: "team-a/vanishes" not in cache)
        assert "team-a/vanishes" not in queue
        assert "team-a/stays" in cache
        assert any(entry["event"] == "watch.relist" for entry in logs)


async def test_each_cut_of_an_established_watch_is_one_failure_not_a_series(
    sim: Simulator, kubeconfig: Path
) -> None:
    """Without a reset of the backoff on success, ten cuts push the wait before the next
    watch towards the 30 s cap."""
    backoff = Backoff(initial=0.01, cap=30.0, jitter=0.0)
    cache = PodCache(RULES, WorkQueue())
    options = {"timeout_min": 30, "timeout_max": 30, "backoff": backoff, "pool_size": 2}
    async with watching(kubeconfig, cache, **options):
        for _ in range(10):
            await eventually(lambda: sim.store.watcher_count() == 1, timeout=5)
            sim.faults.cut_watches()
            await eventually(lambda: sim.store.watcher_count() == 0)
        await eventually(lambda: sim.store.watcher_count() == 1, timeout=5)
        assert backoff.failures <= 1


async def test_a_refused_watch_is_unsynced_until_a_watch_works_again(
    sim: Simulator, tmp_path: Path
) -> None:
    read = PolicyRule(("",), ("pods",), ("list",))
    token = sim.add_token("watcher", [read])
    kubeconfig = sim.write_kubeconfig(tmp_path / "watcher", token=token)
    synced: list[bool] = []
    cache = PodCache(RULES, WorkQueue())
    options = {
        "backoff": Backoff(initial=0.05, cap=0.1),
        "on_synced": lambda _s, on: synced.append(on),
    }
    async with watching(kubeconfig, cache, SCOPE, **options):
        await eventually(lambda: synced[-2:] == [True, False])  # listed, then refused
        sim.authorizer.add_user(
            "watcher", [read, PolicyRule(("",), ("pods",), ("watch",))], token=token
        )
        await eventually(lambda: synced[-1])
    # In step again by the watch alone: no second LIST.
    assert sum(1 for r in sim.requests if r.verb == "list") == 1


# -- a watch against a scripted server, on loop time --------------------------------------


@pytest.mark.looptime
async def test_a_silent_stream_of_a_server_without_bookmarks_is_cut_by_the_watchs_end() -> None:
    api = ScriptedApi([(0.0, HANG)], [(0.0, HANG)])
    with capture_logs() as logs:
        async with scripted(api, PodCache(RULES, WorkQueue())):
            await eventually(lambda: len(api.opened) == 2, timeout=3600)
    (opened, query), (reopened, again) = api.opened
    assert int(query["timeoutSeconds"]) <= UNHEARD_TIMEOUT
    assert reopened - opened <= UNHEARD_TIMEOUT + 10 + 2  # the margin, and a backoff
    assert again["resourceVersion"] == query["resourceVersion"] == "1"  # resumed, no relist
    assert api.lists == 1
    assert [entry["event"] for entry in logs if entry["event"] == "watch.inactive"]


@pytest.mark.looptime
async def test_a_server_that_sends_bookmarks_gets_long_watches_and_silence_is_cut_sooner() -> None:
    periodic = [(BOOKMARK_PERIOD, bookmark(2)), (10.0, b"")]  # the server ends it after
    api = ScriptedApi(periodic, [(BOOKMARK_PERIOD, bookmark(3)), (0.0, HANG)], periodic)
    async with scripted(api, PodCache(RULES, WorkQueue())) as watcher:
        await eventually(lambda: len(api.opened) == 3, timeout=3600)
    (_, first), (heard_at, second), (cut_at, third) = api.opened
    assert int(first["timeoutSeconds"]) <= UNHEARD_TIMEOUT
    assert int(second["timeoutSeconds"]) >= 300  # --watch-timeout: bookmarks prove life
    last_bookmark = heard_at + BOOKMARK_PERIOD
    assert cut_at - last_bookmark <= BOOKMARK_PERIOD + 10 + 2
    assert (second["resourceVersion"], third["resourceVersion"]) == ("2", "3")
    # After a cut, short watches again until the server shows its bookmarks once more.
    assert int(third["timeoutSeconds"]) <= UNHEARD_TIMEOUT
    assert not watcher.heartbeat


@pytest.mark.looptime
async def test_a_busy_stream_is_never_cut_for_silence_on_loop_time() -> None:
    busy = [(1.0, bookmark(rv)) for rv in range(2, 60)]
    api = ScriptedApi([*busy, (0.0, b"")], [(0.0, HANG)])
    with capture_logs() as logs:
        async with scripted(api, PodCache(RULES, WorkQueue()), timeout_min=5, timeout_max=5):
            await eventually(lambda: len(api.opened) == 2, timeout=3600)
    assert api.opened[1][0] - api.opened[0][0] >= len(busy)
    assert "watch.inactive" not in [entry["event"] for entry in logs]


@pytest.mark.parametrize("retry_after", [math.nan, 3600.0])
@pytest.mark.looptime
async def test_a_throttled_watch_waits_retry_after_capped_as_the_reaper_does(
    retry_after: float,
) -> None:
    throttled = ApiError(Request("watch", "pods"), 429, "TooManyRequests", retry_after=retry_after)
    api = ScriptedApi([(0.0, throttled)], [(0.0, HANG)])
    async with scripted(api, PodCache(RULES, WorkQueue())):
        await eventually(lambda: len(api.opened) == 2, timeout=3600)
    assert api.opened[1][0] - api.opened[0][0] <= MAX_RETRY_AFTER


# -- hostile streams ----------------------------------------------------------------


def versioned(name: str, rv: int, **extra_meta: Any) -> dict[str, Any]:
    """A zombie as a server sends it: with a uid and a resourceVersion."""
    obj = zombie(name)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion=str(rv), **extra_meta)
    return obj


def status(code: object, reason: str = "Weird") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
    }


# One line of each kind the watch cannot use, in the order the first stream sends them;
# each must be logged as one skip. (Which objects are no usable pod is test_pod's.)
HOSTILE: list[bytes] = [
    b"{not json",
    b"[]",
    event("EXPLODED", versioned("unknown-type", 1)),
    json.dumps({"type": "ADDED"}).encode(),  # no object
    event("ADDED", {"kind": "Pod"}),  # no metadata: no pod to name
    event("BOOKMARK", {"metadata": {}}),  # no resourceVersion to resume from
    # Parsed, but with no status: not terminal, so skipped with a line naming the pod.
    event("ADDED", {"metadata": {"name": "no-status", "namespace": "team-a", "uid": "u1"}}),
]


@pytest.mark.looptime
async def test_hostile_lines_are_skipped_and_the_watch_goes_on() -> None:
    first: list[Any] = []
    for i, line in enumerate(HOSTILE):
        first += [line.rstrip(b"\n") + b"\n", versioned(f"good-{i}", 101 + i)]
    # A finalizer holds this one: it lingers with a deletionTimestamp, no DELETED yet,
    # and leaves the cache and the queue at once.
    first += [versioned("good-0", 149, deletionTimestamp="2026-01-01T00:00:00Z")]
    first += [versioned("end", 150)]
    first.append(event("ERROR", status(500, "InternalError")))  # resume from 150
    api = ScriptedApi(
        first,
        # A Status with a code of the wrong type: nothing to act on, resume from 200.
        [versioned("after-500", 200), event("ERROR", status("teapot"))],
        # A 4xx the server will never take back: relist, then watch from the LIST's 201.
        [versioned("after-teapot", 201), event("ERROR", status(418))],
        [versioned("after-418", 202), event("ERROR", {"kind": "NotAStatus"})],
        # Silence: only the inactivity guard ends this one.
        [versioned("before-silence", 203), HANG],
        [versioned("after-silence", 204), HANG],
    )
    good = [f"good-{i}" for i in range(1, len(HOSTILE))] + ["end", "after-500", "after-teapot"]
    good += ["after-418", "before-silence", "after-silence"]
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    backoff = Backoff(initial=0.01, cap=0.02, jitter=0.0)
    options = {"backoff": backoff, "timeout_min": 1, "timeout_max": 1, "inactivity_margin": 0.5}
    with capture_logs() as logs:
        async with scripted(api, cache, **options):
            await eventually(lambda: "team-a/after-silence" in cache, timeout=3600)
    assert sorted(entry.snapshot.name for entry in cache.entries()) == sorted(good)
    assert all(f"team-a/{name}" in queue for name in good)
    assert "team-a/good-0" not in queue
    # One skip per hostile line, naming the pod when there is one.
    skips = [entry for entry in logs if entry["event"] == "watch.skipped"]
    assert len(skips) == len(HOSTILE), skips
    not_terminal = {entry.get("pod") for entry in skips if entry["why"] == "pod not terminal"}
    assert not_terminal == {"no-status"}
    # Every ERROR Status and the silence ended a stream, and the watch resumed from the
    # last resourceVersion seen; only the 418 made it relist.
    resumed = [query["resourceVersion"] for _, query in api.opened]
    assert resumed == ["1", "150", "200", "201", "202", "203"]
    assert api.lists == 2
    errors = [entry["code"] for entry in logs if entry["event"] == "watch.error"]
    assert errors[:4] == [500, 0, 418, 0]
    assert any(entry["event"] == "watch.inactive" for entry in logs)


def pod_finished_at_the_end_of_time() -> dict[str, Any]:
    pod = versioned("finished-in-9999", 1)
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = (
        "9999-12-31T23:59:59Z"
    )
    return pod


@pytest.mark.parametrize(
    ("hostile", "warned"),
    [
        pytest.param(
            versioned("big", 1, annotations={"blob": "x" * 2**20}), False, id="line-of-a-mebibyte"
        ),
        pytest.param(
            versioned("huge", 1, annotations={"blob": "x" * 5 * 2**20}),
            True,
            id="line-over-the-read-buffer",
        ),
        pytest.param(
            pod_finished_at_the_end_of_time(),
            False,
            id="finished-at-the-end-of-the-calendar",
        ),
    ],
)
async def test_an_event_zombied_cannot_handle_does_not_end_the_watch(
    sim: Simulator, kubeconfig: Path, hostile: dict[str, Any], warned: bool
) -> None:
    sim.store.create(
        "namespaces", {"metadata": {"name": "team-a"}, "spec": {}, "status": {"phase": "Active"}}
    )
    cache = PodCache(RuleSet(), WorkQueue())  # the default rules and min ages
    with capture_logs() as logs:
        async with watching(kubeconfig, cache, timeout_min=30, timeout_max=30) as watcher:
            await eventually(lambda: watcher.state.synced)
            sim.store.create("pods", hostile)
            sim.store.create("pods", versioned("after", 1))
            await eventually(lambda: "team-a/after" in cache, timeout=10)
            assert watcher.state.alive
    # A line too long for the stream's buffer is read by the relist it makes.
    assert f"team-a/{hostile['metadata']['name']}" in cache
    assert any(entry["log_level"] == "warning" for entry in logs) is warned
