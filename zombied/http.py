"""The probe and metrics endpoints: ``/healthz``, ``/readyz`` and ``/metrics``.

An aiohttp ``AppRunner`` without signal handling (the daemon owns signals), and the
event-loop heartbeat that tells a wedged process from a busy one. What healthy and
ready mean is the caller's; an address it cannot listen on is a `ListenError`.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Self

import anyio
from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

# Imported for its side effect: the metric objects register with the default registry.
from zombied import metrics as _metrics  # noqa: F401
from zombied.errors import ListenError
from zombied.log import get_logger

log = get_logger(__name__)

#: A probe: ``(ok, why)``; ``why`` is the response body.
Check = Callable[[], tuple[bool, str]]

_HEARTBEAT: Final = 0.5


@dataclass
class LoopMonitor:
    """Measures event-loop lag (how late a periodic sleep wakes up); a stall is still
    reported ``hold`` seconds after it ended, for the probe that arrives after it."""

    interval: float = _HEARTBEAT
    stall_after: float = 10.0
    hold: float = 60.0
    _last_beat: float | None = field(default=None, init=False)
    _stall: tuple[float, float] | None = field(default=None, init=False)  # (loop time seen, lag)

    async def run(self) -> None:
        while True:
            before = anyio.current_time()
            self._last_beat = before
            await anyio.sleep(self.interval)
            self.record(anyio.current_time() - before - self.interval)

    def record(self, lag: float) -> None:
        if lag > self.stall_after:
            self._stall = (anyio.current_time(), lag)

    def check(self) -> tuple[bool, str]:
        """Unhealthy during and shortly after a stall, or while the next beat is overdue."""
        now = anyio.current_time()
        if self._last_beat is not None:
            overdue = now - self._last_beat - self.interval
            if overdue > self.stall_after:
                return False, f"event loop stalled for {overdue:.1f}s"
        if self._stall is not None and now - self._stall[0] <= self.hold:
            return False, f"event loop stalled for {self._stall[1]:.1f}s"
        return True, "ok"


class HttpServer:
    """Serves the probes and metrics on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        health: Check,
        ready: Check,
        before_scrape: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        self.requested_port = port
        self._health = health
        self._ready = ready
        self._before_scrape = before_scrape
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> Self:
        app = web.Application()
        metrics_handler = make_aiohttp_handler()

        async def scrape(request: web.Request) -> web.StreamResponse:
            if self._before_scrape is not None:
                self._before_scrape()
            return await metrics_handler(request)

        app.router.add_get("/healthz", self._probe(self._health))
        app.router.add_get("/readyz", self._probe(self._ready))
        app.router.add_get("/metrics", scrape)
        # Probes and scrapes every few seconds would drown the logs in access lines.
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.requested_port)
            await site.start()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()
            if isinstance(exc, OSError):
                raise ListenError(_listen_problem(self.host, self.requested_port, exc)) from None
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])  # (host, port, ...) of the TCP socket
        log.info("http.listening", host=self.host, port=self.port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()

    @staticmethod
    def _probe(check: Check) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(_request: web.Request) -> web.StreamResponse:
            ok, why = check()
            return web.Response(status=200 if ok else 503, text=why + "\n")

        return handler


def _listen_problem(host: str, port: int, exc: OSError) -> str:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        what = "address already in use: another process listens there; stop it, or"
    elif exc.errno == errno.EACCES:
        what = "permission denied (ports below 1024 need privileges);"
    elif exc.errno == errno.EADDRNOTAVAIL:
        what = "not an address of this machine;"
    else:
        reason = exc.strerror or str(exc)
        what = f"cannot listen: {reason};"
    return f"--listen {address}: {what} choose another HOST:PORT (port 0 picks a free one)"
