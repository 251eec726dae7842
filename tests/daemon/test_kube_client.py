"""The API client: zombied's User-Agent on every request, proxies read once, no netrc,
every request and stream within its deadline."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import anyio.abc
import pytest
import yaml
from aiohttp import web
from zombied.kube import ApiError, Kind, Request, open_kube, user_agent
from zombied.pod import parse_pod
from zombied.reaper import Reaper

from kubesim import Simulator
from tests.daemon.pods import zombie


class RecordingProxy:
    """A plain HTTP forward proxy that records each request's method, path and User-Agent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.url = ""
        self._session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        self.seen.append((request.method, request.path, request.headers.get("User-Agent", "")))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        async with self._session.request(
            request.method, str(request.url), headers=headers, data=await request.read()
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, headers=upstream.headers)
            response.headers.pop("Content-Length", None)
            response.headers.pop("Transfer-Encoding", None)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def run(self) -> AsyncIterator[RecordingProxy]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            self._session = session
            try:
                yield self
            finally:
                await runner.cleanup()


@pytest.fixture
async def proxy() -> AsyncIterator[RecordingProxy]:
    async for running in RecordingProxy().run():
        yield running


@pytest.mark.parametrize("no_proxy", [None, "127.0.0.1"])
async def test_every_request_carries_the_user_agent_and_honours_http_proxy(
    sim: Simulator,
    kubeconfig: Path,
    proxy: RecordingProxy,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str | None,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", no_proxy or "")
    snapshot = parse_pod(sim.store.create("pods", zombie("z")))
    async with open_kube(str(kubeconfig)) as kube:
        await kube.request(Request("list", "pods", "team-a"), timeout=10)
        query = {"watch": "true", "timeoutSeconds": 1}
        async with kube.stream(
            Request("watch", "pods", "team-a"), query=query, timeout=10
        ) as lines:
            await lines.read()
        assert (await Reaper(kube).delete(snapshot, "node-shutdown")).outcome == "deleted"
    if no_proxy:  # the API server is excluded
        assert (proxy.seen, len(sim.requests)) == ([], 3)
        return
    assert [(method, path) for method, path, _ in proxy.seen] == [
        ("GET", "/api/v1/namespaces/team-a/pods"),
        ("GET", "/api/v1/namespaces/team-a/pods"),
        ("DELETE", "/api/v1/namespaces/team-a/pods/z"),
    ]
    (agent,) = {agent for _, _, agent in proxy.seen}
    assert agent == user_agent()
    assert re.fullmatch(
        r"zombied/\S+ \((linux|darwin)/[a-z0-9_]+\) kubernetes_asyncio/\d+\.\d+\.\d+", agent
    )


async def test_a_netrc_entry_for_the_api_server_is_not_read(
    sim: Simulator, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With aiohttp's trust_env, this entry's Basic auth would collide with the bearer
    # token and fail every request.
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n", encoding="utf-8")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    async with open_kube(str(kubeconfig)) as kube:
        pods = await kube.request(Request("list", "pods", "team-a"), timeout=10)
    assert pods["items"] == []


async def test_an_answer_that_never_begins_fails_at_the_deadline(
    sim: Simulator, tmp_path: Path
) -> None:
    """A server (or a proxy before it) that takes the request and never answers."""
    held: list[anyio.abc.SocketStream] = []

    async def hold(stream: anyio.abc.SocketStream) -> None:
        held.append(stream)
        async with stream:
            await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    document = sim.kubeconfig()
    document["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(document), encoding="utf-8")
    watch = Request("watch", "pods", "team-a")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hold)
        async with open_kube(str(kubeconfig)) as kube:
            with anyio.fail_after(10):  # a bound for a hang, not a measure
                with pytest.raises(ApiError) as stream_failed:
                    async with kube.stream(watch, query={"watch": "true"}, timeout=0.2):
                        pass
                with pytest.raises(ApiError) as request_failed:
                    await kube.request(watch, timeout=0.2)
        tg.cancel_scope.cancel()
    assert stream_failed.value.kind is request_failed.value.kind is Kind.TRANSIENT
    assert len(held) == 2
