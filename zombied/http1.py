"""A lean HTTP/1.1 keep-alive client for the one request a storm repeats: DELETE.

A storm sends one DELETE per zombie, thousands a minute, and aiohttp's general-purpose
request path (cookie jar, tracing, redirects, per-request URL parsing and header
merging) costs four times the CPU of the request itself. This module is the narrow
path instead: a pool of persistent connections (TLS on the API client's own SSL
context), one request at a time per connection, the response parsed by httptools
(llhttp, the parser behind uvicorn). It sends what it is given and returns status,
headers and body; credentials, paths and what an answer means belong to the callers
(`zombied.kube.send`). It speaks plain HTTP/1.1 to the server only: a proxy between
zombied and the API server makes the caller use aiohttp instead.

Failures are the ones callers already retry: `ConnectionError` (refused, reset, closed
mid-answer, unparsable answer) and `TimeoutError`. A request that fails on a reused
connection before any byte of an answer arrived is sent once more on a new one, as
browsers and Go's transport do: the server may have closed the idle connection just
as the request left, and a repeated DELETE carries the same preconditions.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Final, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

__all__ = ["Answer", "ConnectionPool"]

#: Bodies larger than this are refused: a DELETE answer is one object (etcd caps them).
MAX_BODY: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Answer:
    """One complete HTTP response."""

    status: int
    reason: str
    headers: CIMultiDictProxy[str]
    body: bytes


class _Connection(asyncio.Protocol):
    """One persistent connection; one request at a time."""

    def __init__(self, max_body: int) -> None:
        self._max_body = max_body
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[Answer] | None = None
        self._reason = ""
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._size = 0
        self.received = False  # a byte of the current answer arrived
        self.open = False
        self.reused = False

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio's.
        self._transport = cast(asyncio.Transport, transport)
        self.open = True

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            why = (
                f"answer body over {self._max_body} bytes" if self._size > self._max_body else None
            )
            self._fail(ConnectionError(why or f"unparsable HTTP answer: {exc}"))
            self.close()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail(ConnectionError(f"connection closed before the answer was complete: {exc}"))

    # -- httptools callbacks ------------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self._reason = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body:
            raise httptools.HttpParserError  # reported by data_received
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = Answer(
            status=self._parser.get_status_code(),
            reason=self._reason,
            headers=CIMultiDictProxy(self._headers),
            body=b"".join(self._body),
        )
        if not self._parser.should_keep_alive():
            self.close()
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(answer)

    # -- the request --------------------------------------------------------------------

    async def exchange(self, request: bytes, expires: float) -> Answer:
        """Send ``request`` (head and body) and wait for the whole answer until loop
        time ``expires``; `TimeoutError` after it."""
        assert self._transport is not None
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        self._answer = answer
        self._reason, self._headers, self._body, self._size = "", CIMultiDict(), [], 0
        self.received = False
        self._transport.write(request)
        # One timer on the answer itself: an asyncio.timeout around the exchange (its
        # task bookkeeping on entry and exit) cost a tenth of a storm's DELETE.
        timer = loop.call_at(expires, self._expire)
        try:
            return await answer
        finally:
            timer.cancel()
            self._answer = None

    def close(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.abort()

    def _expire(self) -> None:
        self._fail(TimeoutError("no complete answer before the deadline"))

    def _fail(self, exc: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)


class ConnectionPool:
    """Up to ``size`` persistent connections to the server at ``url``."""

    def __init__(
        self,
        url: URL,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        size: int,
        max_body: int = MAX_BODY,
    ) -> None:
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"not an http(s) server URL: {url}")
        self._host = url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._authority = url.raw_authority
        self._base_path = url.raw_path.rstrip("/")
        self._ssl = ssl_context if url.scheme == "https" else None
        self._server_hostname = (server_hostname or url.host) if self._ssl else None
        self._max_body = max_body
        self._slots = asyncio.Semaphore(size)
        self._idle: deque[_Connection] = deque()
        self._busy: set[_Connection] = set()
        self._closed = False

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes, *, deadline: float
    ) -> Answer:
        """Send one request with ``body`` and return the answer; ``deadline`` in seconds.

        ``target`` is the path (already quoted) below the server URL's own path.
        """
        head = [f"{method} {self._base_path}{target} HTTP/1.1", f"Host: {self._authority}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                # As aiohttp: a line break would end the header early (request splitting).
                raise ValueError(f"line break in the value of HTTP header {name!r}")
            head.append(f"{name}: {value}")
        head.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        expires = asyncio.get_running_loop().time() + deadline
        # The pool is sized for every request in flight, so a slot is almost always
        # free at once; only a wait for one needs a timeout of its own.
        if self._slots.locked():
            async with asyncio.timeout_at(expires):
                await self._slots.acquire()
        else:
            await self._slots.acquire()
        try:
            if self._closed:
                raise ConnectionError("the connection pool is closed")
            connection = await self._connection(expires)
            try:
                return await self._exchange(connection, request, expires)
            except ConnectionError:
                if not (connection.reused and not connection.received):
                    raise
            # The server closed an idle connection as the request left: once more.
            return await self._exchange(await self._connect(expires), request, expires)
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Close every connection; requests after this fail."""
        self._closed = True
        for connection in (*self._idle, *self._busy):
            connection.close()
        self._idle.clear()
        self._busy.clear()

    async def _exchange(self, connection: _Connection, request: bytes, expires: float) -> Answer:
        self._busy.add(connection)
        try:
            answer = await connection.exchange(request, expires)
        except BaseException:
            connection.close()  # a half-read answer leaves it unusable
            raise
        finally:
            self._busy.discard(connection)
        if connection.open and not self._closed:
            connection.reused = True
            self._idle.append(connection)
        return answer

    async def _connection(self, expires: float) -> _Connection:
        while self._idle:
            connection = self._idle.pop()  # the most recently used is the likeliest alive
            if connection.open:
                return connection
        return await self._connect(expires)

    async def _connect(self, expires: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(expires):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self._max_body),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                )
        except (ConnectionError, TimeoutError):
            raise
        except OSError as exc:  # name resolution, TLS verification, unreachable network
            raise ConnectionError(f"cannot connect to {self._authority}: {exc}") from exc
        return connection
