"""A loopback proxy that adds the bearer token kubectl will not send over plain HTTP.

kubectl (client-go's clientcmd) only sends a kubeconfig's credentials over TLS, and
the simulator serves plain HTTP on 127.0.0.1, so the CronJob's kubectl talks to this
proxy, which forwards every request unchanged to the simulator with an
`Authorization: Bearer` header added. It runs as its own process (so its CPU is not
the harness's), buffers bodies (kubectl never watches here), and must only ever listen
on and forward to 127.0.0.1.

    python bench/authproxy.py --port P --upstream http://127.0.0.1:S --token-file F
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import aiohttp
from aiohttp import web

LOOPBACK: Final = "127.0.0.1"
# Headers that describe one hop, not the request.
HOP_HEADERS: Final = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "content-length",
        "transfer-encoding",
        "authorization",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    }
)


def forward_headers(headers: object, token: str) -> dict[str, str]:
    kept = {
        name: value
        for name, value in dict(headers).items()  # type: ignore[call-overload]
        if name.lower() not in HOP_HEADERS
    }
    kept["Authorization"] = f"Bearer {token}"
    return kept


def build_app(upstream: str, token: str) -> web.Application:
    app = web.Application()
    sessions: list[aiohttp.ClientSession] = []

    async def session_context(_: web.Application) -> object:
        connector = aiohttp.TCPConnector(limit=32)
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        sessions.append(session)
        yield
        await session.close()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with sessions[0].request(
            request.method,
            upstream + request.path_qs,
            headers=forward_headers(request.headers, token),
            data=body or None,
            allow_redirects=False,
        ) as answer:
            payload = await answer.read()
            headers = {
                name: value
                for name, value in answer.headers.items()
                if name.lower() not in HOP_HEADERS and name.lower() != "content-encoding"
            }
            return web.Response(status=answer.status, body=payload, headers=headers)

    app.cleanup_ctx.append(session_context)  # type: ignore[arg-type]
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def serve(port: int, upstream: str, token: str) -> None:
    runner = web.AppRunner(build_app(upstream, token), handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="token-adding loopback proxy for kubectl")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    args = parser.parse_args(argv)
    if not args.upstream.startswith(f"http://{LOOPBACK}:"):
        print(f"upstream must be http://{LOOPBACK}:PORT", file=sys.stderr)
        return 2
    token = args.token_file.read_text().strip()
    asyncio.run(serve(args.port, args.upstream.rstrip("/"), token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
