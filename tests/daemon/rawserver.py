"""A tiny API server for pods whose watch streams a test writes byte by byte.

The simulator only ever sends well-formed events; a proxy or a broken server may not.
LIST answers no pods at resourceVersion 7; the n-th WATCH (from 0) is served by the
test's ``watch(n, response)``, which writes what it likes and may hold the stream open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

WatchScript = Callable[[int, web.StreamResponse], Awaitable[None]]


@asynccontextmanager
async def pod_server(watch: WatchScript, watches: list[str]) -> AsyncIterator[int]:
    """Serve on a free port (yielded); ``watches`` collects each WATCH's query string."""

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") is None:
            body = {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []}
            return web.json_response(body)
        watches.append(request.query_string)
        response = web.StreamResponse()
        await response.prepare(request)
        await watch(len(watches) - 1, response)
        return response

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
