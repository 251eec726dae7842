"""A client leaving mid-response is normal: the simulator ends quietly and keeps serving."""

from __future__ import annotations

import logging
import socket
import struct
from typing import Any

import aiohttp
import anyio
import pytest
from anyio.abc import SocketAttribute
from testkit import eventually
from yarl import URL

from kubesim import Simulator

# About 70 MB of LIST or initial watch events: more than loopback socket buffers
# hold (tens of MB at most), so the server is still writing when the client leaves.
PODS = 3000
PADDING = "x" * 24_000


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"padding": PADDING}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
    }


async def leave(sim: Simulator, path: str, *, read: int) -> None:
    """Ask for ``path``, read ``read`` bytes of the answer, then reset the connection."""
    url = URL(sim.url)
    assert url.host is not None
    assert url.port is not None
    stream = await anyio.connect_tcp(url.host, url.port)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {url.host}\r\n"
        f"Authorization: Bearer {sim.admin_token}\r\n\r\n"
    )
    await stream.send(request.encode())
    received = 0
    with anyio.fail_after(10):
        while received < read:
            received += len(await stream.receive())
    raw = stream.extra(SocketAttribute.raw_socket)
    # Linger zero: close with a reset, as a killed client does, not a polite FIN.
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


def gone(sim: Simulator, path: str) -> bool:
    return any(r.path == path and r.status == 499 for r in sim.requests)


@pytest.mark.parametrize(
    ("path", "query", "read"),
    [
        ("/api/v1/namespaces/ns/pods", "", 1),
        ("/api/v1/namespaces/ns/pods", "?watch=1&timeoutSeconds=30", 1),
        ("/api/v1/namespaces/ns/pods", "?watch=1&timeoutSeconds=30", 0),
        ("/api/v1/namespaces/ns/pods", "", 0),
    ],
    ids=["list-mid-body", "watch-mid-body", "watch-before-headers", "list-before-headers"],
)
async def test_client_reset_mid_response_is_quiet(
    sim: Simulator,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    path: str,
    query: str,
    read: int,
) -> None:
    for i in range(PODS):
        sim.store.create("pods", pod(f"p{i:05}"))
    caplog.set_level(logging.DEBUG)
    await leave(sim, path + query, read=read)
    await eventually(lambda: gone(sim, path), message=f"{path}{query} recorded as 499")
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not noisy, [r.getMessage() for r in noisy]
    async with http.get(path, params={"limit": "1"}) as resp:
        assert resp.status == 200
        assert len((await resp.json())["items"]) == 1
