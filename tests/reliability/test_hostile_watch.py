"""Watch streams no simulator sends: hostile lines, ERROR events, silence.

A scripted pods API plays hand-written streams to the real `Watcher` on loop time:
malformed JSON, unknown event types, objects without metadata or status, wrong types,
invalid UTF-8, ERROR events with unexpected codes, a stream that goes silent without
ending. Every bad line is a logged skip, never a dead watch. Lines a real API server
can carry but zombied cannot use go through the simulator and the real client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon import pods
from tests.daemon.conftest import watching
from tests.daemon.scripted import HANG, ScriptedApi, event, scripted
from tests.helpers import eventually

RULES = RuleSet((Rule("node-shutdown", 0.0),))


def zombie(name: str, rv: int, **extra_meta: Any) -> dict[str, Any]:
    obj = pods.zombie(name)
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


# In the order the first stream sends them; each must be logged as one skip.
HOSTILE: list[bytes] = [
    b"{not json",
    b"\xff\xfe\x00garbage",
    b"[]",
    b"null",
    b'"just a string"',
    event("EXPLODED", zombie("unknown-type", 1)),
    json.dumps({"type": 42, "object": {}}).encode(),
    json.dumps({"object": zombie("no-type", 1)}).encode(),
    json.dumps({"type": "ADDED"}).encode(),
    event("ADDED", "not an object"),
    event("ADDED", {"kind": "Pod"}),  # no metadata
    event("ADDED", {"metadata": "x", "status": {"phase": "Failed"}}),
    event("MODIFIED", {"metadata": {"name": 7, "namespace": "team-a", "uid": "u"}}),
    event("MODIFIED", {"metadata": {"name": "a/../b", "namespace": "team-a", "uid": "u"}}),
    event("ADDED", {"metadata": {"name": "no-uid", "namespace": "team-a"}}),
    event("DELETED", {}),
    event("DELETED", {"metadata": ["x"]}),
    event("BOOKMARK", {"metadata": {}}),
    event("BOOKMARK", {"metadata": {"resourceVersion": 12}}),
    # Parsed, but with nothing that makes a zombie (no status at all, wrong types inside):
    # not terminal, so skipped with a line that names the pod.
    event("ADDED", {"metadata": {"name": "no-status", "namespace": "team-a", "uid": "u1"}}),
    event(
        "ADDED",
        {
            "metadata": {"name": "bad-types", "namespace": "team-a", "uid": "u2", "labels": 5},
            "spec": [],
            "status": {
                "phase": ["Failed"],
                "reason": {"x": 1},
                "conditions": "DisruptionTarget",
                "containerStatuses": [{"state": {"terminated": {"finishedAt": 3}}}, None],
            },
        },
    ),
]


@pytest.mark.looptime
async def test_hostile_lines_are_skipped_and_the_watch_goes_on() -> None:
    first: list[Any] = []
    for i, line in enumerate(HOSTILE):
        first += [line.rstrip(b"\n") + b"\n", zombie(f"good-{i}", 101 + i)]
    # A finalizer holds this one: it lingers with a deletionTimestamp, no DELETED yet,
    # and leaves the cache and the queue at once.
    first += [zombie("good-0", 149, deletionTimestamp="2026-01-01T00:00:00Z")]
    first += [zombie("end", 150)]
    first.append(event("ERROR", status(500, "InternalError")))  # resume from 150
    api = ScriptedApi(
        first,
        # A Status with a code of the wrong type: nothing to act on, resume from 200.
        [zombie("after-500", 200), event("ERROR", status("teapot"))],
        # A 4xx the server will never take back: relist, then watch from the LIST's 201.
        [zombie("after-teapot", 201), event("ERROR", status(418))],
        [zombie("after-418", 202), event("ERROR", {"kind": "NotAStatus"})],
        # Silence: only the inactivity guard ends this one.
        [zombie("before-silence", 203), HANG],
        [zombie("after-silence", 204), HANG],
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
    assert not_terminal == {"no-status", "bad-types"}
    # Every ERROR Status and the silence ended a stream, and the watch resumed from the
    # last resourceVersion seen; only the 418 made it relist.
    resumed = [query["resourceVersion"] for _, query in api.opened]
    assert resumed == ["1", "150", "200", "201", "202", "203"]
    assert api.lists == 2
    errors = [entry["code"] for entry in logs if entry["event"] == "watch.error"]
    assert errors[:4] == [500, 0, 418, 0]
    assert any(entry["event"] == "watch.inactive" for entry in logs)


def pod_finished_at_the_end_of_time() -> dict[str, Any]:
    pod = zombie("finished-in-9999", 1)
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = (
        "9999-12-31T23:59:59Z"
    )
    return pod


@pytest.mark.parametrize(
    ("hostile", "warned"),
    [
        pytest.param(
            zombie("big", 1, annotations={"blob": "x" * 2**20}), False, id="line-of-a-mebibyte"
        ),
        pytest.param(
            zombie("huge", 1, annotations={"blob": "x" * 5 * 2**20}),
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
            sim.store.create("pods", zombie("after", 1))
            await eventually(lambda: "team-a/after" in cache, timeout=10)
            assert watcher.state.alive
    # A line too long for the stream's buffer is read by the relist it makes.
    assert f"team-a/{hostile['metadata']['name']}" in cache
    assert any(entry["log_level"] == "warning" for entry in logs) is warned
