"""The API server under contract: the simulator and the real kube-apiservers, or any cluster.

Every contract test runs against ``kubesim`` imitating each release it knows and
against the real kube-apiservers v1.20.2 and v1.37.2 with etcd (``tests/realserver``);
the test id names the server (``[kubesim-1.20]``, ``[kubesim-current]``,
``[kube-apiserver-v1.20.2]``, ``[kube-apiserver-v1.37.2]``). Set
``ZOMBIED_CONTRACT_KUBECONFIG`` to run the contract against any other cluster instead
(id ``[external]``). Tests that need fault injection, compaction or the request log ask
for ``sim_only`` and skip on a real server.

Where server versions differ, a test states what holds on all of them, or what each
version answers with :func:`by_version`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from kubesim import VERSIONS, Simulator
from tests.helpers import eventually
from tests.realserver.cluster import RELEASES
from tests.realserver.fixtures import on_release

ENV = "ZOMBIED_CONTRACT_KUBECONFIG"
SIM = "kubesim"
#: One simulator param per version it imitates: ``kubesim-1.20``, ``kubesim-current``.
SIMS = {f"{SIM}-{name}": name for name in VERSIONS}
EXTERNAL = "external"
#: The real servers by the name the test ids give them.
REAL = {release.name: version for version, release in RELEASES.items()}
#: The simulator mode each real server's answers match: the one imitating its release.
_MODE_OF_RELEASE = {version.git_version: version.name for version in VERSIONS.values()}
REAL_BEHAVES_AS = {name: _MODE_OF_RELEASE[v] for name, v in REAL.items()}


@dataclass
class Server:
    kubeconfig: Path
    sim: Simulator | None
    #: How the test report names it: ``kubesim-1.20``, ``kube-apiserver-v1.37.2``, ``external``.
    name: str = SIM

    @property
    def real(self) -> bool:
        return self.sim is None

    @property
    def imitates(self) -> str | None:
        """Whose answers to expect where releases differ: ``"1.20"`` or ``"current"``
        (the simulator's mode, or the real server's release); None for another cluster."""
        if self.sim is not None:
            return self.sim.version.name
        return REAL_BEHAVES_AS.get(self.name)


def server_params() -> list[Any]:
    """The servers every contract test runs against, as pytest params (id = name)."""
    if os.environ.get(ENV):
        return [pytest.param(EXTERNAL, id=EXTERNAL)]
    # The tests of one real server run in one process (under pytest-xdist): one server.
    sims = [pytest.param(name, id=name) for name in SIMS]
    real = [pytest.param(name, id=name, marks=on_release(v)) for name, v in REAL.items()]
    return [*sims, *real]


def real_kubeconfig(request: pytest.FixtureRequest) -> Path | None:
    """The kubeconfig of the param's real server; None for the simulator."""
    if request.param == EXTERNAL:
        return Path(os.environ[ENV])
    if request.param in REAL:
        cluster = request.getfixturevalue("real_servers").get(REAL[request.param])
        kubeconfig: Path = cluster.admin_kubeconfig
        return kubeconfig
    return None


@pytest.fixture(params=server_params())
def server_kubeconfig(request: pytest.FixtureRequest) -> tuple[str, Path | None]:
    return request.param, real_kubeconfig(request)


@asynccontextmanager
async def serving(name: str, kubeconfig: Path | None, directory: Path) -> AsyncIterator[Server]:
    """The param's real server, or a simulator whose kubeconfig is written to ``directory``."""
    if kubeconfig is not None:
        yield Server(kubeconfig, None, name)
        return
    async with Simulator(bookmark_interval=0.2, tls=True, imitate=SIMS[name]) as sim:
        yield Server(sim.write_kubeconfig(directory / "kubeconfig"), sim, name)


@pytest.fixture
async def server(
    server_kubeconfig: tuple[str, Path | None], tmp_path: Path
) -> AsyncIterator[Server]:
    async with serving(*server_kubeconfig, tmp_path) as served:
        yield served


def by_version(server: Server, *, v1_20: Any, current: Any) -> set[Any]:
    """The answer ``server``'s release gives (either of them on another cluster)."""
    if server.imitates is None:
        return {v1_20, current}
    return {v1_20 if server.imitates == "1.20" else current}


@pytest.fixture
def sim_only(server: Server) -> Simulator:
    """The simulator behind ``server``; skips against a real cluster."""
    if server.sim is None:
        pytest.skip(f"needs the simulator (fault injection / internals), not {server.name}")
    return server.sim


@pytest.fixture
async def api(server: Server) -> AsyncIterator[ApiClient]:
    async with await config.new_client_from_config(str(server.kubeconfig)) as api_client:
        yield api_client


@pytest.fixture
async def unprivileged(
    request: pytest.FixtureRequest, server: Server, tmp_path: Path
) -> AsyncIterator[tuple[str, ApiClient]]:
    """A user the server grants nothing, and a client signed in as that user."""
    if server.sim is not None:
        user = "unprivileged"
        token = server.sim.add_token(user, [])
        kubeconfig = server.sim.write_kubeconfig(tmp_path / "unprivileged", token=token)
    elif server.name in REAL:
        cluster = request.getfixturevalue("real_servers").get(REAL[server.name])
        user, kubeconfig = cluster.unprivileged_kubeconfig()
    else:
        pytest.skip(f"no user without permissions on {server.name}")
    async with await config.new_client_from_config(str(kubeconfig)) as api_client:
        yield user, api_client


@pytest.fixture
def core(api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def coordination(api: ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api)


@asynccontextmanager
async def fresh_namespace(core: client.CoreV1Api) -> AsyncIterator[str]:
    """A new namespace, deleted afterwards."""
    name = "zc-" + secrets.token_hex(4)
    await core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        try:
            await core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
async def namespace(core: client.CoreV1Api) -> AsyncIterator[str]:
    async with fresh_namespace(core) as name:
        yield name


def pod_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "contract"}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}],
            "terminationGracePeriodSeconds": 1,
            **spec,
        },
    }


async def make_pod(
    core: client.CoreV1Api, namespace: str, name: str, phase: str | None = None, **spec: Any
) -> dict[str, Any]:
    """Create a pod (unscheduled unless ``nodeName`` given), optionally setting its phase."""
    resp = await core.create_namespaced_pod(
        namespace, pod_manifest(name, **spec), _preload_content=False
    )
    obj = await checked(resp)
    if phase is not None:
        obj = await set_phase(core, namespace, name, phase)
    return obj


async def set_phase(
    core: client.CoreV1Api, namespace: str, name: str, phase: str
) -> dict[str, Any]:
    resp = await core.patch_namespaced_pod_status(
        name, namespace, {"status": {"phase": phase}}, _preload_content=False
    )
    return await checked(resp)


async def request(
    api: ApiClient, method: str, path: str, query: list[tuple[str, str]], **kw: Any
) -> Any:
    """One request through the client's transport and auth; the answer, unread."""
    return await api.call_api(
        path,
        method,
        query_params=query,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
        **kw,
    )


async def raw(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str | None = None,
) -> tuple[int, bytes]:
    """One request's (status, body); never raises."""
    headers = {"Content-Type": content_type} if content_type else {}
    try:
        resp = await request(api, method, path, query or [], header_params=headers, body=body)
        return resp.status, await resp.read()
    except ApiException as exc:
        data = exc.body if isinstance(exc.body, bytes) else (exc.body or "").encode()
        return int(exc.status), data


async def checked(resp: Any) -> dict[str, Any]:
    """The JSON body of a ``_preload_content=False`` answer, raising ApiException on 4xx/5xx."""
    data = await resp.read()
    if resp.status >= 400:
        exc = ApiException(status=resp.status, reason=resp.reason)
        exc.body = data
        raise exc
    result: dict[str, Any] = json.loads(data)
    return result


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status", body
    result: dict[str, Any] = body
    return result


async def refused(request: Awaitable[Any], code: int) -> dict[str, Any]:
    """The Status of a request the server refuses with ``code``."""
    with pytest.raises(ApiException) as info:
        await request
    assert info.value.status == code
    return status_of(info.value)


async def watch_pods(
    api: ApiClient, namespace: str, *query: tuple[str, str], until: int | None = None
) -> list[dict[str, Any]]:
    """Pod watch events of ``namespace`` (``watch=true`` and ``query``)."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    return await watch_lines(api, path, [("watch", "true"), *query], until=until)


async def watch_lines(
    api: ApiClient, path: str, query: list[tuple[str, str]], *, until: int | None = None
) -> list[dict[str, Any]]:
    """Watch events of one stream (until it ends, or ``until`` events were read)."""
    resp = await request(api, "GET", path, query)
    events: list[dict[str, Any]] = []
    try:
        async for line in resp.content:
            if line.strip():
                events.append(json.loads(line))
                if until is not None and len(events) >= until:
                    break
    finally:
        resp.release()
        resp.close()
    return events


__all__ = ["eventually"]
