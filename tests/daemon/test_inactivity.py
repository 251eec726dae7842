"""A watch stream that stays open but says nothing useful is cut by the inactivity guard.

The simulator always honours ``timeoutSeconds``; a proxy or a broken server may not.
This tiny server answers LIST normally and then holds every WATCH open forever,
trickling spaces (no newline, so no event and no read timeout).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from aiohttp import web
from zombied.kube import open_api_client
from zombied.queue import WorkQueue
from zombied.rules import RuleSet
from zombied.watch import PodCache, Scope, Watcher

from tests.daemon.capture import captured_logs
from tests.helpers import eventually


@asynccontextmanager
async def silent_server(watches: list[str]) -> AsyncIterator[int]:
    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") is None:
            body = {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []}
            return web.json_response(body)
        watches.append(request.query_string)
        response = web.StreamResponse()
        await response.prepare(request)
        while True:
            await response.write(b" ")
            await anyio.sleep(0.05)

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def kubeconfig_for(port: int, path: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(json.dumps(config))
    return path


async def test_silent_stream_is_cut_and_reopened(tmp_path: Path) -> None:
    watches: list[str] = []
    async with silent_server(watches) as port:
        kubeconfig = kubeconfig_for(port, tmp_path / "kubeconfig")
        cache = PodCache(RuleSet(), WorkQueue())
        with captured_logs() as logs:
            async with open_api_client(str(kubeconfig), None) as api:
                watcher = Watcher(
                    api, Scope(None), cache, timeout_min=1, timeout_max=1, inactivity_margin=0.2
                )
                async with anyio.create_task_group() as tg:
                    await tg.start(watcher.run)
                    await eventually(lambda: len(watches) >= 2, timeout=15)
                    tg.cancel_scope.cancel()
    assert any(entry["event"] == "watch.inactive" for entry in logs)
    assert all("resourceVersion=7" in query for query in watches)
