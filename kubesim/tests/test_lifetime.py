"""The simulator closes every connection it accepted, whenever the client arrived.

A client that connects while the simulator stops must see its connection end (EOF or
reset) once the simulator has stopped; a server-side socket left open is found only
later by the garbage collector, as an "unclosed transport" in some unrelated test.
"""

from __future__ import annotations

import asyncio
import socket

import anyio
import pytest

from kubesim import Simulator


async def ended(client: socket.socket) -> bool:
    """True once the server closed (or reset) ``client``'s connection; reads what came first."""
    with anyio.move_on_after(5):
        while True:
            await anyio.wait_readable(client)
            try:
                if client.recv(65536) == b"":
                    return True
            except ConnectionResetError:
                return True
    return False


def connect(sim: Simulator) -> socket.socket:
    """A connection established before the loop runs again (loopback: no wait)."""
    client = socket.create_connection((sim.host, sim.port), timeout=5)
    client.setblocking(False)
    return client


# The accept and the set-up of a connection happen a loop iteration or two apart;
# stopping the simulator after each number of iterations hits every window between.
@pytest.mark.parametrize("iterations", range(6))
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_a_connection_accepted_while_stopping_is_closed(iterations: int, tls: bool) -> None:
    sim = Simulator(tls=tls)
    await sim.__aenter__()
    try:
        client = connect(sim)
        for _ in range(iterations):
            await asyncio.sleep(0)
    finally:
        await sim.__aexit__(None, None, None)
    with client:
        assert await ended(client), f"server kept the connection open ({iterations} iterations)"


@pytest.mark.parametrize("iterations", range(6))
async def test_a_connection_accepted_while_restarting_is_cut(
    sim: Simulator, iterations: int
) -> None:
    client = connect(sim)
    for _ in range(iterations):
        await asyncio.sleep(0)
    await sim.restart(down_for=0.01)
    with client:
        assert await ended(client), f"restart kept the connection open ({iterations} iterations)"
    with connect(sim) as after:
        request = f"GET /healthz HTTP/1.1\r\nHost: {sim.host}\r\nConnection: close\r\n\r\n"
        await asyncio.get_running_loop().sock_sendall(after, request.encode())
        with anyio.fail_after(5):
            await anyio.wait_readable(after)
        assert after.recv(64).startswith(b"HTTP/1.1 200")


async def test_open_connections_are_closed_on_exit() -> None:
    async with Simulator() as sim:
        idle = connect(sim)
        busy = connect(sim)
        request = (
            "GET /api/v1/namespaces/default/pods?watch=1 HTTP/1.1\r\n"
            f"Host: {sim.host}\r\nAuthorization: Bearer {sim.admin_token}\r\n\r\n"
        )
        await asyncio.get_running_loop().sock_sendall(busy, request.encode())
        with anyio.fail_after(5):
            await anyio.wait_readable(busy)  # the watch is open: its headers arrived
    with idle, busy:
        assert await ended(idle)
        assert await ended(busy)
