"""Watch streams no simulator sends: hostile, silent, or split anywhere.

A tiny aiohttp server serves a hand-written LIST and WATCH to the real `Watcher` over
the real `Kube` client: malformed JSON, unknown event types, objects without metadata
or status, wrong types, invalid UTF-8, ERROR events with unexpected codes, a stream that
goes silent without ending, events cut into arbitrary chunks. Every bad line is a logged
skip, never a dead watch.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from aiohttp import web
from structlog.testing import capture_logs
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon import pods
from tests.daemon.conftest import watching as daemon_watching
from tests.helpers import eventually

RULES = RuleSet((Rule("node-shutdown", 0.0),))


def zombie(name: str, rv: int, **extra_meta: Any) -> dict[str, Any]:
    obj = pods.zombie(name)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion=str(rv), **extra_meta)
    return obj


def event(kind: str, obj: object) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


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
#: A stream that sends nothing more and never ends: only the inactivity guard cuts it.
SILENCE = b""


@dataclass
class Script:
    """What the stub server sends on each WATCH request, in order: raw lines, or pods
    (sent as ADDED and listed by every later LIST), in chunks of ``chunk`` bytes if set."""

    streams: list[list[bytes | dict[str, Any]]]
    chunk: int | None = None
    listed: dict[str, dict[str, Any]] = field(default_factory=dict)
    resource_version: str = "100"
    watches: list[str] = field(default_factory=list)
    lists: int = 0


def build_script() -> tuple[Script, list[str]]:
    first: list[bytes | dict[str, Any]] = []
    for i, line in enumerate(HOSTILE):
        first += [line, zombie(f"good-{i}", 101 + i)]
    first += [
        zombie("huge-annotation", 150, annotations={"blob": "x" * (1024 * 1024)}),
        event("ERROR", status(500, "InternalError")),  # resume from 150
    ]
    streams = [
        first,
        # A Status with a code of the wrong type: nothing to act on, resume from 200.
        [zombie("after-500", 200), event("ERROR", status("teapot"))],
        # A 4xx the server will never take back: relist, then watch from the LIST's 201.
        [zombie("after-teapot", 201), event("ERROR", status(418))],
        [zombie("after-418", 202), event("ERROR", {"kind": "NotAStatus"})],
        [zombie("before-silence", 203), SILENCE],
        [zombie("after-silence", 204)],
    ]
    good = [f"good-{i}" for i in range(len(HOSTILE))] + [
        "huge-annotation",
        "after-500",
        "after-teapot",
        "after-418",
        "before-silence",
        "after-silence",
    ]
    return Script(streams), good


@asynccontextmanager
async def stub_server(script: Script, tmp_path: Path) -> AsyncIterator[Path]:
    """Serve ``script`` as the pods LIST/WATCH; yield a kubeconfig pointing at it."""

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            script.lists += 1
            return web.json_response(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": script.resource_version},
                    "items": list(script.listed.values()),
                }
            )
        script.watches.append(request.query.get("resourceVersion", ""))
        index = len(script.watches) - 1
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        lines = script.streams[index] if index < len(script.streams) else [SILENCE]
        pending = b""
        for line in lines:
            if line == SILENCE:
                with anyio.move_on_after(30):
                    await anyio.sleep_forever()  # until the client leaves
            elif isinstance(line, dict):
                script.listed[line["metadata"]["name"]] = line
                script.resource_version = line["metadata"]["resourceVersion"]
                pending += event("ADDED", line) + b"\n"
            else:
                pending += line + b"\n"
            size = script.chunk or len(pending)
            while len(pending) >= size > 0:
                await response.write(pending[:size])
                pending = pending[size:]
        await response.write(pending)
        await response.write_eof()
        return response

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "s", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        yield kubeconfig
    finally:
        await runner.cleanup()


def watching(kubeconfig: Path, cache: PodCache, **options: Any) -> Any:
    """The real `Watcher` of every namespace, retrying at once."""
    backoff = Backoff(initial=0.01, cap=0.02, jitter=0.0)
    return daemon_watching(kubeconfig, cache, pool_size=4, backoff=backoff, **options)


async def test_hostile_lines_are_skipped_and_the_watch_goes_on(tmp_path: Path) -> None:
    script, good = build_script()
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    with capture_logs() as logs:
        async with (
            stub_server(script, tmp_path) as kubeconfig,
            # A short watch timeout: the silent stream is cut 1.5 s after it opens.
            watching(kubeconfig, cache, timeout_min=1, timeout_max=1, inactivity_margin=0.5),
        ):
            await eventually(
                lambda: all(f"team-a/{name}" in cache for name in good),
                timeout=20,
                message="every valid pod after a hostile line to be cached",
            )
    assert all(f"team-a/{name}" in queue for name in good)
    assert not {"no-status", "bad-types", "no-uid", "unknown-type", "no-type"} & {
        entry.snapshot.name for entry in cache.entries()
    }
    # One skip per hostile line, naming the pod when there is one.
    skips = [entry for entry in logs if entry["event"] == "watch.skipped"]
    assert len(skips) == len(HOSTILE), skips
    not_terminal = {entry.get("pod") for entry in skips if entry["why"] == "pod not terminal"}
    assert not_terminal == {"no-status", "bad-types"}
    # Every ERROR Status and the silence ended a stream, and the watch resumed from the
    # last resourceVersion seen; only the 418 made it relist.
    assert script.watches[:6] == ["100", "150", "200", "201", "202", "203"]
    assert script.lists == 2
    errors = [entry["code"] for entry in logs if entry["event"] == "watch.error"]
    assert errors[:4] == [500, 0, 418, 0]
    assert any(entry["event"] == "watch.inactive" for entry in logs)


async def test_events_split_anywhere_across_chunks_are_read_whole(tmp_path: Path) -> None:
    names = [f"z{i}" for i in range(4)]
    # A finalizer holds z0: it lingers with a deletionTimestamp, no DELETED yet, and
    # leaves the cache and the queue at once.
    deleting = event("MODIFIED", zombie("z0", 105, deletionTimestamp="2026-01-01T00:00:00Z"))
    stream = [*(zombie(name, 101 + i) for i, name in enumerate(names)), deleting]
    script = Script([[*stream, zombie("after", 106)]], chunk=7)
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    with capture_logs() as logs:
        async with stub_server(script, tmp_path) as kubeconfig, watching(kubeconfig, cache):
            await eventually(lambda: "team-a/after" in cache)
            assert "team-a/z0" not in queue
    assert sorted(entry.snapshot.name for entry in cache.entries()) == ["after", "z1", "z2", "z3"]
    assert not [entry for entry in logs if entry["event"] == "watch.skipped"]


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
    if warned:
        assert any(entry["log_level"] == "warning" for entry in logs)
