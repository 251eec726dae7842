"""A TLS middlebox in front of the real kube-apiserver that black-holes idle connections.

Load balancers and NAT gateways between a controller and its API server forget a flow
that carried nothing for a while (Azure's load balancer after 4 minutes, AWS NLB after
350 s) and from then on drop its packets without a reset: the client's next request on
that connection is never answered. This middlebox does the same on loopback, quickly:
it terminates TLS with a certificate of its own, forwards the bytes to the apiserver
over TLS, and a connection that carried nothing for ``idle`` seconds stops forwarding
in both directions while staying open: not even the server's end of it reaches the
client. Watch connections are spared by the idle rule (they hold one long request, and
a real middlebox sees their TCP keep-alives, which it answers itself), so a test
measures what happens to the requests a controller sends between quiet spells; a test
black-holes them on purpose with `Middlebox.black_hole_watches`.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.streams.tls import TLSListener, TLSStream

from tests.helpers import Certificate, self_signed

_CHUNK = 65536
_TIMEOUT = re.compile(rb"[?&]timeoutSeconds=(\d+)")


@dataclass
class _Flow:
    last: float = field(default_factory=anyio.current_time)
    watch: bool = False
    dead: bool = False
    closed: bool = False
    client_closed: bool = False
    #: When each watch request began and the timeoutSeconds it asked for.
    watches: list[tuple[float, int]] = field(default_factory=list)
    #: When each bookmark passed.
    bookmarks: list[float] = field(default_factory=list)


class Middlebox:
    """``async with Middlebox(cluster_url, ca_pem, workdir, idle=20) as box``."""

    def __init__(self, upstream: str, upstream_ca: bytes, workdir: Path, *, idle: float) -> None:
        parts = urlsplit(upstream)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 443
        self._upstream_ssl = ssl.create_default_context(cadata=upstream_ca.decode())
        self.certificate: Certificate = self_signed(workdir, "middlebox", common_name="middlebox")
        self.idle = idle
        self.flows: list[_Flow] = []
        self.port = 0
        self._listener: TLSListener | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def black_holed(self) -> int:
        """Connections whose packets are dropped now."""
        return sum(flow.dead for flow in self.flows)

    def watches(self) -> list[_Flow]:
        """The open watch connections that carry data."""
        return [flow for flow in self.flows if flow.watch and not (flow.dead or flow.closed)]

    def black_hole_watches(self) -> list[_Flow]:
        """Forget the open watch connections, as a middlebox that lost their state."""
        held = self.watches()
        for flow in held:
            flow.dead = True
        return held

    def quiet_for(self) -> float:
        """Seconds since any connection but a watch carried a byte."""
        flows = [flow.last for flow in self.flows if not flow.watch]
        return anyio.current_time() - max(flows, default=anyio.current_time())

    async def __aenter__(self) -> Self:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certificate.cert, self.certificate.key)
        tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = tcp.extra(anyio.abc.SocketAttribute.local_port)
        self._listener = TLSListener(tcp, context, standard_compatible=False)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._listener.serve, self._handle)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        assert self._listener is not None
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            # Serving never closes the listening socket: its owner does.
            await self._listener.aclose()

    async def _handle(self, client: TLSStream) -> None:
        flow = _Flow()
        self.flows.append(flow)
        # The client's stream is ours once accepted: closed also when the upstream
        # cannot be reached.
        async with client:
            try:
                await self._forward(client, flow)
            finally:
                flow.closed = True

    async def _forward(self, client: TLSStream, flow: _Flow) -> None:
        async with (
            await anyio.connect_tcp(
                self._host,
                self._port,
                ssl_context=self._upstream_ssl,
                tls_standard_compatible=False,
            ) as server,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._pump, client, server, flow, True)
            tg.start_soon(self._pump, server, client, flow, False)
            tg.start_soon(self._watch_idle, flow)

    async def _pump(
        self,
        source: anyio.abc.ByteStream,
        sink: anyio.abc.ByteStream,
        flow: _Flow,
        from_client: bool,
    ) -> None:
        try:
            while True:
                data = await source.receive(_CHUNK)
                if flow.dead:
                    continue  # dropped on the floor, as a middlebox that forgot the flow
                now = flow.last = anyio.current_time()
                if from_client and b"watch=true" in data:
                    flow.watch = True
                    asked = _TIMEOUT.search(data)
                    flow.watches.append((now, int(asked[1]) if asked else 0))
                flow.bookmarks += [now] * data.count(b'"type":"BOOKMARK"')
                await sink.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            flow.client_closed = flow.client_closed or from_client
            # A forgotten flow carries nothing, its end included: only the client's own
            # close of its socket ends it.
            if from_client or not flow.dead:
                await sink.aclose()

    async def _watch_idle(self, flow: _Flow) -> None:
        while not flow.dead:
            await anyio.sleep(0.25)
            if not flow.watch and anyio.current_time() - flow.last >= self.idle:
                flow.dead = True
