"""Watch streams no simulator sends: silent, hostile, or trickling byte by byte."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web
from zombied.cache import PodCache
from zombied.kube import open_kube
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet
from zombied.watch import Scope, Watcher

from tests.daemon.capture import captured_logs
from tests.daemon.pods import zombie
from tests.daemon.rawserver import WatchScript, kubeconfig_for, pod_server
from tests.helpers import eventually


@asynccontextmanager
async def watching(
    script: WatchScript, tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[Watcher, PodCache, list[str]]]:
    watches: list[str] = []
    async with pod_server(script, watches) as port:
        kubeconfig = kubeconfig_for(port, tmp_path / "kubeconfig")
        cache = PodCache(RuleSet((Rule("node-shutdown", 0.0),)), WorkQueue())
        async with open_kube(str(kubeconfig)) as kube:
            watcher = Watcher(kube, Scope(None), cache, **options)
            async with anyio.create_task_group() as tg:
                await tg.start(watcher.run)
                yield watcher, cache, watches
                tg.cancel_scope.cancel()


def event(kind: str, obj: dict[str, Any], rv: int) -> bytes:
    obj = {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{rv}", "resourceVersion": str(rv)}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


async def hold(response: web.StreamResponse) -> None:
    """Keep the stream open, sending nothing that could count as an event."""
    while True:
        await response.write(b" ")
        await anyio.sleep(0.05)


async def test_silent_stream_is_cut_and_reopened(tmp_path: Path) -> None:
    async def silent(_n: int, response: web.StreamResponse) -> None:
        await hold(response)

    with captured_logs() as logs:
        options = {"timeout_min": 1, "timeout_max": 1, "inactivity_margin": 0.2}
        async with watching(silent, tmp_path, **options) as (_, _, watches):
            await eventually(lambda: len(watches) >= 2, timeout=15)
    assert any(entry["event"] == "watch.inactive" for entry in logs)
    assert all("resourceVersion=7" in query for query in watches)


async def test_malformed_lines_and_pods_are_skipped(tmp_path: Path) -> None:
    broken = zombie("broken")
    broken_line = event("MODIFIED", broken, 8).replace(b'"uid-8"', b"42")

    async def hostile(n: int, response: web.StreamResponse) -> None:
        if n == 0:
            await response.write(broken_line)
            await response.write(b"garbage\n")
            await response.write(b'{"type":"DELETED","object":{"metadata":{}}}\n')
            await response.write(event("ADDED", zombie("fine"), 9))
        await hold(response)

    with captured_logs() as logs:
        async with watching(hostile, tmp_path) as (watcher, cache, watches):
            await eventually(lambda: "team-a/fine" in cache)
            assert watcher.state.alive
            assert watcher.resource_version == "9"
            assert len(watches) == 1  # skipped lines never end the stream
    skipped = [entry["why"] for entry in logs if entry["event"] == "watch.skipped"]
    assert len(skipped) == 3
    assert "team-a/broken" not in cache


async def test_events_split_anywhere_across_chunks_are_read_whole(tmp_path: Path) -> None:
    names = [f"z{i}" for i in range(4)]
    stream = b"".join(event("ADDED", zombie(name), 10 + i) for i, name in enumerate(names))

    async def trickle(n: int, response: web.StreamResponse) -> None:
        if n == 0:
            # One byte at a time for the first event, then the rest in uneven slices.
            first = stream.index(b"\n") + 1
            for i in range(first):
                await response.write(stream[i : i + 1])
            for start in range(first, len(stream), 97):
                await response.write(stream[start : start + 97])
        await hold(response)

    with captured_logs() as logs:
        async with watching(trickle, tmp_path) as (watcher, cache, watches):
            await eventually(lambda: len(cache) == len(names))
            assert sorted(entry.snapshot.name for entry in cache.entries()) == names
            assert watcher.resource_version == "13"
            assert len(watches) == 1
    assert not [entry for entry in logs if entry["event"] == "watch.skipped"]


async def test_a_pod_being_deleted_leaves_the_cache_at_once(tmp_path: Path) -> None:
    # A finalizer holds the pod: it lingers with a deletionTimestamp, no DELETED yet.
    z = zombie("z")
    deleting = {**z, "metadata": {**z["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    release = anyio.Event()

    async def stream(n: int, response: web.StreamResponse) -> None:
        if n == 0:
            await response.write(event("ADDED", z, 8))
            await release.wait()
            await response.write(event("MODIFIED", deleting, 9).replace(b"uid-9", b"uid-8"))
        await hold(response)

    async with watching(stream, tmp_path) as (_, cache, _):
        await eventually(lambda: "team-a/z" in cache.queue)
        assert cache.zombies == 1
        release.set()
        await eventually(lambda: "team-a/z" not in cache)
        assert "team-a/z" not in cache.queue
        assert cache.zombies == 0
