"""A reverse proxy in front of the real kube-apiserver that can hold back watch events.

A client's watch lags behind the server in real life (a busy watch cache, a slow
network); here a test makes it lag on purpose, deterministically: every watch
stream's events pass through :attr:`WatchGate.allow`, and the first event it refuses
holds that stream (and everything after it, in order) until a new predicate lets it
through. Everything else is passed on unchanged. It speaks plain HTTP to the client
(on loopback) and HTTPS with the client's own token to the apiserver; it never
changes, drops or reorders an event.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import anyio
from aiohttp import web

from tests.realserver.cluster import ADMIN, RealCluster

Event = dict[str, Any]
_FORWARDED = ("Authorization", "Content-Type", "Accept")


class WatchGate:
    """``async with WatchGate(cluster) as gate``: a proxy on a free loopback port."""

    def __init__(self, cluster: RealCluster) -> None:
        self.cluster = cluster
        self._allow: Callable[[Event], bool] = lambda _event: True
        self._changed = anyio.Event()
        self._ssl = ssl.create_default_context(cadata=cluster.ca_pem.decode())
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    def allow(self, predicate: Callable[[Event], bool]) -> None:
        """From now on, pass watch events while ``predicate`` holds for them."""
        self._allow = predicate
        self._changed.set()
        self._changed = anyio.Event()

    def kubeconfig(self, path: Path, user: str = ADMIN) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gate", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": user, "user": {"token": self.cluster.tokens[user]}}],
            "contexts": [{"name": "gate", "context": {"cluster": "gate", "user": user}}],
            "current-context": "gate",
        }
        path.write_text(json.dumps(config))
        return path

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # Open watches end with the proxy: no waiting for them to finish by themselves.
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: request.headers[k] for k in _FORWARDED if k in request.headers}
        body = await request.read()
        async with self._session.request(
            request.method,
            self.cluster.url + request.path_qs,
            headers=headers,
            data=body or None,
            ssl=self._ssl,
        ) as upstream:
            watching = request.query.get("watch") not in (None, "", "0", "false")
            if not watching or upstream.status != 200:
                return web.Response(
                    status=upstream.status,
                    body=await upstream.read(),
                    content_type=upstream.content_type,
                )
            response = web.StreamResponse(headers={"Content-Type": upstream.content_type})
            response.enable_chunked_encoding()
            await response.prepare(request)
            async for line in upstream.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                while not self._allow(event):
                    await self._changed.wait()
                await response.write(line)
            await response.write_eof()
            return response
