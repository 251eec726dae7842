"""A hostile API server's watch stream: every bad line is a logged skip, never a dead watch.

The simulator never sends such lines, so a tiny aiohttp server here serves a
hand-written LIST and WATCH to the real `Watcher` over the real kubernetes_asyncio
client: malformed JSON, unknown event types, objects without metadata or status,
wrong types, a 1 MiB annotation, invalid UTF-8, and ERROR events carrying Status
objects with unexpected codes. After every hostile line comes a valid zombie; all of
them must reach the cache and the queue.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml
from aiohttp import web
from structlog.testing import capture_logs
from zombied.backoff import Backoff
from zombied.cache import PodCache
from zombied.kube import open_api_client
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet
from zombied.watch import Scope, Watcher

from tests.helpers import eventually

RULES = RuleSet((Rule("node-shutdown", 0.0),))


def zombie(name: str, rv: int, **extra_meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            **extra_meta,
        },
        "spec": {"nodeName": "spot-1"},
        "status": {
            "phase": "Failed",
            "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown.",
            "containerStatuses": [
                {"name": "app", "state": {"terminated": {"finishedAt": "2024-05-01T10:00:00Z"}}}
            ],
        },
    }


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


# (line, logged as a skip?) in the order the first stream sends them.
HOSTILE: list[tuple[bytes, bool]] = [
    (b"{not json", True),
    (b"\xff\xfe\x00garbage", True),
    (b"[]", True),
    (b"null", True),
    (b'"just a string"', True),
    (event("EXPLODED", zombie("unknown-type", 1)), True),
    (json.dumps({"type": 42, "object": {}}).encode(), True),
    (json.dumps({"object": zombie("no-type", 1)}).encode(), True),
    (json.dumps({"type": "ADDED"}).encode(), True),
    (event("ADDED", "not an object"), True),
    (event("ADDED", {"kind": "Pod"}), True),  # no metadata
    (event("ADDED", {"metadata": "x", "status": {"phase": "Failed"}}), True),
    (event("MODIFIED", {"metadata": {"name": 7, "namespace": "team-a", "uid": "u"}}), True),
    (event("MODIFIED", {"metadata": {"name": "a/../b", "namespace": "team-a", "uid": "u"}}), True),
    (event("ADDED", {"metadata": {"name": "no-uid", "namespace": "team-a"}}), True),
    (event("DELETED", {}), True),
    (event("DELETED", {"metadata": ["x"]}), True),
    (event("BOOKMARK", {"metadata": {}}), True),
    (event("BOOKMARK", {"metadata": {"resourceVersion": 12}}), True),
    # Parsed, but with nothing that makes a zombie (no status at all, wrong types inside):
    # not terminal, so skipped with a line that names the pod.
    (
        event("ADDED", {"metadata": {"name": "no-status", "namespace": "team-a", "uid": "u1"}}),
        True,
    ),
    (
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
        True,
    ),
]
HUGE = zombie("huge-annotation", 150, annotations={"blob": "x" * (1024 * 1024)})


@dataclass
class Script:
    """What the stub server sends on each WATCH request, in order."""

    streams: list[list[bytes]]
    listed: list[dict[str, Any]] = field(default_factory=list)
    watches: list[str] = field(default_factory=list)
    lists: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)


def build_script() -> tuple[Script, list[str]]:
    first: list[bytes] = []
    good: list[str] = []
    rv = 100
    for i, (line, _) in enumerate(HOSTILE):
        first.append(line)
        rv += 1
        good.append(f"good-{i}")
        first.append(event("ADDED", zombie(f"good-{i}", rv)))
    first.append(event("ADDED", HUGE))
    good.append("huge-annotation")
    first.append(event("ERROR", status(500, "InternalError")))
    streams = [
        first,
        # A Status with a code of the wrong type, then one with a code nobody expects.
        [event("ADDED", zombie("after-500", 200)), event("ERROR", status("teapot"))],
        [event("ADDED", zombie("after-teapot", 201)), event("ERROR", status(418))],
        [event("ADDED", zombie("after-418", 202)), event("ERROR", {"kind": "NotAStatus"})],
        [event("ADDED", zombie("after-not-a-status", 203))],
    ]
    good += ["after-500", "after-teapot", "after-418", "after-not-a-status"]
    return Script(streams), good


@asynccontextmanager
async def stub_server(script: Script, tmp_path: Path) -> AsyncIterator[Path]:
    """Serve ``script`` as the pods LIST/WATCH; yield a kubeconfig pointing at it."""

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "True", "1"):
            script.lists += 1
            return web.json_response(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "100"},
                    "items": [],
                }
            )
        script.watches.append(request.query.get("resourceVersion", ""))
        index = len(script.watches) - 1
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if index < len(script.streams):
            for line in script.streams[index]:
                await response.write(line + b"\n")
        if index >= len(script.streams) - 1:
            script.done.set()
            with anyio.move_on_after(30):
                await anyio.sleep_forever()  # an idle, healthy watch until the client leaves
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


async def test_hostile_lines_are_skipped_and_the_watch_goes_on(tmp_path: Path) -> None:
    script, good = build_script()
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    with capture_logs() as logs:
        async with (
            stub_server(script, tmp_path) as kubeconfig,
            open_api_client(str(kubeconfig), None, pool_size=4) as api,
        ):
            watcher = Watcher(
                api,
                Scope(None),
                cache,
                timeout_min=20,
                timeout_max=20,
                backoff=Backoff(initial=0.01, cap=0.02, jitter=0.0),
            )
            async with anyio.create_task_group() as tg:
                await tg.start(watcher.run)
                await eventually(
                    lambda: all(f"team-a/{name}" in cache for name in good),
                    timeout=20,
                    message="every valid pod after a hostile line to be cached",
                )
                await eventually(script.done.is_set, timeout=10)
                tg.cancel_scope.cancel()
    for name in good:
        assert f"team-a/{name}" in queue, name
    for name in ("no-status", "bad-types", "no-uid", "unknown-type", "no-type"):
        assert f"team-a/{name}" not in cache, name
    # One skip per hostile line that is not an event zombied can use.
    skips = [entry for entry in logs if entry["event"] == "watch.skipped"]
    assert len(skips) >= sum(1 for _, logged in HOSTILE if logged), skips
    not_terminal = {entry.get("pod") for entry in skips if entry["why"] == "pod not terminal"}
    assert {"no-status", "bad-types"} <= not_terminal, skips
    # Every ERROR Status ended a stream and the watch resumed where it was, without a
    # relist: the five streams, each from the last resourceVersion seen.
    assert script.lists == 1
    assert script.watches == ["100", "150", "200", "201", "202"]
    errors = [entry for entry in logs if entry["event"] == "watch.error"]
    assert {entry["code"] for entry in errors} >= {500, 418, 0}
