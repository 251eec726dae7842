"""The simulator's listening sockets and every connection they accepted.

This module owns :class:`Listener`: it binds the port, accepts connections itself and
hands each one to the HTTP protocol, keeping a reference to every connection until it
is lost, so closing the simulator closes every connection it ever accepted.

Why not ``loop.create_server``: an ``asyncio.Server`` closed while a connection it has
just accepted is still being set up (the accept and the set-up run in different loop
iterations) fails that set-up on an internal assertion and drops the accepted socket
without closing it (CPython 3.11). A client that connects as the simulator stops
therefore left a server-side socket open until the garbage collector found it.
Accepting with ``sock_accept`` and ``connect_accepted_socket`` leaves no such window:
an accept that has not returned is cancelled cleanly, and a connection set up after
the listener closed is aborted on arrival.

It never reads or writes HTTP; the protocol it is given does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

log = logging.getLogger(__name__)

ProtocolFactory = Callable[[], asyncio.Protocol]

#: Connection backlog of each listening socket (the default of ``create_server``).
BACKLOG = 100
#: After an accept fails (out of file descriptors), listen again after this long.
ACCEPT_RETRY_DELAY = 1.0
#: Loop iterations ``aclose`` waits for aborted connections to close their sockets.
CLOSE_ITERATIONS = 100


class _Tracked(asyncio.Protocol):
    """Forwards every callback to the HTTP protocol and tells the listener when it ends."""

    def __init__(self, inner: asyncio.Protocol, listener: Listener, generation: int) -> None:
        self._inner = inner
        self._listener = listener
        self.generation = generation
        self._made = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self._listener.admit(self, transport):
            transport.abort()
            return
        self._made = True
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.lost(self)
        if self._made:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class Listener:
    """Listening sockets on one port, and the connections accepted on them.

    ``start`` binds (again after ``stop_accepting``, for a simulated restart);
    ``close_connections`` cuts the open ones; ``aclose`` stops accepting, aborts every
    connection and returns once each is closed.
    """

    def __init__(self, factory: ProtocolFactory, *, ssl_context: ssl.SSLContext | None) -> None:
        self._factory = factory
        self._ssl = ssl_context
        self._sockets: list[socket.socket] = []
        self._accepted: set[socket.socket] = set()  # accepted, protocol not yet connected
        self._setups: set[asyncio.Task[None]] = set()
        self._connections: dict[_Tracked, asyncio.Transport] = {}
        # Bumped by close_connections: a connection accepted before, set up after, is cut.
        self._generation = 0
        self._closed = False

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host``:``port`` (0: a free port); return the port."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                # Every address family on one port: the first socket's when port is 0.
                chosen = sockets[0].getsockname()[1] if len(sockets) > 1 else address[1]
                sock.bind((address[0], chosen, *address[2:]))
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        self._closed = False
        self._sockets = sockets
        for sock in sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)
        return int(sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        """Close the listening sockets: new connections are refused."""
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets = []

    def close_connections(self) -> None:
        """Close every open connection, flushing what was written.

        A connection accepted but not yet set up is cut as it arrives.
        """
        self._generation += 1
        for transport in list(self._connections.values()):
            transport.close()

    async def aclose(self) -> None:
        """Stop accepting, abort every connection and wait until each one is closed."""
        self._closed = True
        self.stop_accepting()
        setups = list(self._setups)
        for task in setups:
            task.cancel()
        await asyncio.gather(*setups, return_exceptions=True)
        # A set-up cancelled before it started never took ownership of its socket.
        for conn in self._accepted:
            conn.close()
        self._accepted.clear()
        for transport in list(self._connections.values()):
            transport.abort()
        # An aborted transport closes its socket on a later loop iteration.
        for _ in range(CLOSE_ITERATIONS):
            if not self._connections:
                break
            await asyncio.sleep(0)

    # ---------------------------------------------------------------- internal

    def admit(self, protocol: _Tracked, transport: asyncio.Transport) -> bool:
        """A connection is set up: track it, or refuse it once the listener is closed."""
        if self._closed or protocol.generation < self._generation:
            return False
        self._connections[protocol] = transport
        return True

    def lost(self, protocol: _Tracked) -> None:
        self._connections.pop(protocol, None)

    def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(BACKLOG):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of file descriptors or similar: pause accepting, keep serving.
                log.warning("accept failed, listening again in %s s: %s", ACCEPT_RETRY_DELAY, exc)
                loop.remove_reader(sock.fileno())
                loop.call_later(ACCEPT_RETRY_DELAY, self._resume, sock)
                return
            conn.setblocking(False)
            self._accepted.add(conn)
            task = loop.create_task(self._set_up(conn, self._generation))
            self._setups.add(task)
            task.add_done_callback(self._setups.discard)

    def _resume(self, sock: socket.socket) -> None:
        if sock in self._sockets:
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept, sock)

    async def _set_up(self, conn: socket.socket, generation: int) -> None:
        # From here on the transport owns the socket, and closes it on every failure.
        self._accepted.discard(conn)
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _Tracked(self._factory(), self, generation), conn, ssl=self._ssl
            )
        except (OSError, ssl.SSLError) as exc:
            # A client that left, or failed the TLS handshake, before the set-up finished.
            log.debug("connection set-up failed: %s", exc)
