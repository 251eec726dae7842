"""The lean HTTP/1.1 pool of the delete path, against real sockets.

A scripted server (one asyncio server, its answers chosen by each test) shows what the
pool does with keep-alive, closed and broken connections, slow servers and big
answers; the simulator over TLS shows a DELETE through `zombied.kube.send` with the
kubeconfig's credentials.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web
from yarl import URL
from zombied.http1 import ConnectionPool
from zombied.kube import KubeClient, open_api_client, send
from zombied.pod import parse_pod
from zombied.reaper import delete_options

from kubesim import Simulator
from tests.daemon.pods import zombie
from tests.helpers import eventually, self_signed, signed_by

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

#: What the server does with the n-th request (from 0) on the c-th connection (from 0):
#: bytes to answer, or None to close the connection without answering.
Script = Callable[[int, int], bytes | None]


@dataclass
class ScriptedServer:
    script: Script
    connections: int = 0
    requests: list[tuple[int, bytes]] = field(default_factory=list)  # (connection, head)
    open_now: int = 0
    most_open: int = 0
    hold: asyncio.Event | None = None  # when set, answers wait for it
    close_after: bool = False  # close the connection after each answer

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self.connections
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            for number in range(1_000):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                self.requests.append((connection, head))
                if self.hold is not None:
                    await self.hold.wait()
                answer = self.script(connection, number)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.open_now -= 1
            writer.close()


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[tuple[ScriptedServer, URL]]:
    server = ScriptedServer(script)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield server, URL(f"http://127.0.0.1:{port}")
    finally:
        listening.close()
        await listening.wait_closed()


async def delete(pool: ConnectionPool, name: str = "p", *, deadline: float = 5.0) -> int:
    answer = await pool.request(
        "DELETE", f"/api/v1/namespaces/ns/pods/{name}", {"Accept": "json"}, b"{}", deadline=deadline
    )
    return answer.status


async def test_requests_reuse_one_keep_alive_connection() -> None:
    async with scripted(lambda c, n: OK) as (server, url):
        pool = ConnectionPool(url, ssl_context=None, size=4)
        assert [await delete(pool, f"p{i}") for i in range(5)] == [200] * 5
        await pool.close()
    assert server.connections == 1
    first = server.requests[0][1].decode()
    assert first.startswith("DELETE /api/v1/namespaces/ns/pods/p0 HTTP/1.1\r\n")
    assert f"Host: {url.raw_authority}\r\n" in first
    assert "Content-Length: 2\r\n" in first


async def test_an_error_answer_keeps_status_reason_headers_and_body() -> None:
    throttled = (
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\nContent-Length: 17\r\n\r\n"
        b'{"kind":"Status"}'
    )
    async with scripted(lambda c, n: throttled) as (_, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        answer = await pool.request("DELETE", "/x", {}, b"", deadline=5.0)
        await pool.close()
    assert (answer.status, answer.reason) == (429, "Too Many Requests")
    assert answer.headers["Retry-After"] == "3"
    assert answer.body == b'{"kind":"Status"}'


async def test_a_chunked_answer_is_read_whole() -> None:
    async def chunks(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b'{"a":', b"1", b"}"):
            await response.write(part)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("DELETE", "/x", chunks)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        pool = ConnectionPool(
            URL(f"http://127.0.0.1:{runner.addresses[0][1]}"), ssl_context=None, size=1
        )
        answer = await pool.request("DELETE", "/x", {}, b"", deadline=5.0)
        await pool.close()
    finally:
        await runner.cleanup()
    assert orjson.loads(answer.body) == {"a": 1}


async def test_connection_close_in_the_answer_means_a_new_connection_next_time() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    async with scripted(lambda c, n: closing) as (server, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        assert [await delete(pool) for _ in range(3)] == [200] * 3
        await pool.close()
    assert server.connections == 3


async def test_a_reused_connection_closed_by_the_server_is_retried_once_on_a_new_one() -> None:
    # The server drops every connection at its second request, unanswered: what a
    # request meets when the server closed an idle connection as it was sent.
    async with scripted(lambda c, n: OK if n == 0 else None) as (server, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        assert [await delete(pool, f"p{i}") for i in range(3)] == [200] * 3
        await pool.close()
    assert [connection for connection, _ in server.requests] == [0, 0, 1, 1, 2]


async def test_a_new_connection_closed_unanswered_fails_without_a_retry() -> None:
    async with scripted(lambda c, n: None) as (server, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        with pytest.raises(ConnectionError, match="closed before the answer"):
            await delete(pool)
        await pool.close()
    assert len(server.requests) == 1


async def test_an_answer_cut_by_a_closed_connection_is_a_connection_error() -> None:
    cut = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"kind"'
    async with scripted(lambda c, n: cut) as (server, url):
        server.close_after = True
        pool = ConnectionPool(url, ssl_context=None, size=1)
        with pytest.raises(ConnectionError, match="closed before the answer"):
            await delete(pool)
        await pool.close()
    assert len(server.requests) == 1


async def test_a_server_that_does_not_answer_times_out_and_its_connection_is_dropped() -> None:
    async with scripted(lambda c, n: OK) as (server, url):
        server.hold = asyncio.Event()
        pool = ConnectionPool(url, ssl_context=None, size=1)
        with pytest.raises(TimeoutError):
            await delete(pool, deadline=0.2)
        server.hold.set()
        assert await delete(pool) == 200
        await pool.close()
    assert server.connections == 2


async def test_garbage_instead_of_http_is_a_connection_error() -> None:
    async with scripted(lambda c, n: b"SSH-2.0-OpenSSH_9.2\r\n\r\n") as (_, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        with pytest.raises(ConnectionError, match="unparsable HTTP answer"):
            await delete(pool)
        await pool.close()


async def test_an_answer_over_the_body_limit_is_refused() -> None:
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 2048\r\n\r\n" + b" " * 2048
    async with scripted(lambda c, n: big) as (_, url):
        pool = ConnectionPool(url, ssl_context=None, size=1, max_body=1024)
        with pytest.raises(ConnectionError, match="over 1024 bytes"):
            await delete(pool)
        await pool.close()


async def test_requests_in_flight_never_exceed_the_pool_size() -> None:
    async with scripted(lambda c, n: OK) as (server, url):
        server.hold = asyncio.Event()
        pool = ConnectionPool(url, ssl_context=None, size=2)
        requests = [asyncio.create_task(delete(pool, f"p{i}")) for i in range(6)]
        await eventually(lambda: len(server.requests) == 2)
        assert server.open_now == 2
        server.hold.set()
        assert await asyncio.gather(*requests) == [200] * 6
        await pool.close()
    assert server.most_open == 2


async def test_a_refused_connection_is_a_connection_error() -> None:
    async with scripted(lambda c, n: OK) as (_, url):
        pass  # closed: nothing listens on the port any more
    pool = ConnectionPool(url, ssl_context=None, size=1)
    with pytest.raises(ConnectionError):
        await delete(pool)


async def test_after_close_requests_fail() -> None:
    async with scripted(lambda c, n: OK) as (_, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        assert await delete(pool) == 200
        await pool.close()
        with pytest.raises(ConnectionError, match="closed"):
            await delete(pool)


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with scripted(lambda c, n: OK) as (server, url):
        pool = ConnectionPool(url, ssl_context=None, size=1)
        with pytest.raises(ValueError, match="line break"):
            await pool.request(
                "DELETE", "/x", {"Authorization": "Bearer t\r\nX-Evil: 1"}, b"", deadline=5.0
            )
        await pool.close()
    assert server.connections == 0


def test_only_http_and_https_servers() -> None:
    with pytest.raises(ValueError, match="not an http"):
        ConnectionPool(URL("unix:///run/kube.sock"), ssl_context=None, size=1)


# -- over TLS, with the kubeconfig's credentials -----------------------------------------


@pytest.fixture
async def tls_sim() -> AsyncIterator[Simulator]:
    async with Simulator(tls=True) as simulator:
        yield simulator


async def test_send_deletes_over_tls_with_the_kubeconfig_token(
    tls_sim: Simulator, tmp_path: Path
) -> None:
    pod = parse_pod(tls_sim.store.create("pods", zombie("z")))
    kubeconfig = tls_sim.write_kubeconfig(tmp_path / "kubeconfig")
    async with open_api_client(str(kubeconfig), None) as api:
        assert isinstance(api, KubeClient)
        assert api.lean is not None
        body = orjson.dumps(delete_options(pod, dry_run=False))
        answer = await send(
            api,
            "DELETE",
            f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
            body=body,
            deadline=5.0,
        )
    assert answer.status == 200
    assert orjson.loads(answer.body)["metadata"]["uid"] == pod.uid
    assert [r.verb for r in tls_sim.requests if r.resource == "pods"][-1] == "delete"


async def test_a_server_certificate_nobody_signed_is_a_connection_error(
    tls_sim: Simulator,
) -> None:
    pool = ConnectionPool(URL(tls_sim.url), ssl_context=ssl.create_default_context(), size=1)
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await delete(pool)
    await pool.close()


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all by the CA."""
    ca = self_signed(tmp_path, "ca", common_name="test-ca", hosts=())
    signed_by(ca, tmp_path, "server", common_name="127.0.0.1", hosts=["127.0.0.1"])
    signed_by(ca, tmp_path, "client", common_name="zombied-test")
    return tmp_path


async def test_send_presents_the_kubeconfig_client_certificate(
    certificates: Path, tmp_path: Path
) -> None:
    seen: list[str] = []

    async def delete_pod(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        seen.append(subject.get("commonName", ""))
        return web.json_response({"kind": "Pod"})

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=certificates / "ca.crt")
    server_tls.load_cert_chain(certificates / "server.crt", certificates / "server.key")
    server_tls.verify_mode = ssl.CERT_REQUIRED
    app = web.Application()
    app.router.add_route("DELETE", "/api/v1/namespaces/ns/pods/p", delete_pod)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls).start()
    port = runner.addresses[0][1]

    def data(name: str) -> str:
        return base64.b64encode((certificates / name).read_bytes()).decode()

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "certificate-authority-data": data("ca.crt"),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "client-certificate-data": data("client.crt"),
                            "client-key-data": data("client.key"),
                        },
                    }
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    try:
        async with open_api_client(str(kubeconfig), None) as api:
            assert isinstance(api, KubeClient)
            assert api.lean is not None
            answer = await send(
                api, "DELETE", "/api/v1/namespaces/ns/pods/p", body=b"{}", deadline=5.0
            )
    finally:
        await runner.cleanup()
    assert answer.status == 200
    assert seen == ["zombied-test"]


async def test_send_skips_verification_when_the_kubeconfig_says_insecure(
    tls_sim: Simulator, tmp_path: Path
) -> None:
    pod = parse_pod(tls_sim.store.create("pods", zombie("z")))
    config = json.loads(
        json.dumps(yaml.safe_load(tls_sim.write_kubeconfig(tmp_path / "kubeconfig").read_text()))
    )
    cluster = config["clusters"][0]["cluster"]
    del cluster["certificate-authority-data"]
    cluster["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "insecure"
    insecure.write_text(json.dumps(config))
    async with open_api_client(str(insecure), None) as api:
        body = orjson.dumps(delete_options(pod, dry_run=False))
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        assert (await send(api, "DELETE", path, body=body, deadline=5.0)).status == 200
