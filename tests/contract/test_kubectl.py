"""The real kubectl works against a Kubernetes API server: get, apply, delete.

Every kubectl release installed next to the ``kubectl`` on PATH (``kubectl.1.27`` …)
runs each operation, plus the plain ``kubectl`` itself: releases differ in what
they ask for (aggregated discovery, OpenAPI v3, server-side field validation,
watch-based ``delete --wait``), and each must work.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient

from tests.contract.conftest import (
    Server,
    fresh_namespace,
    make_pod,
    real_kubeconfig,
    server_params,
    serving,
)

# One simulator (and event loop) for the whole module: each kubectl run is a
# process start plus discovery, so a fresh server per test would double the cost.
pytestmark = [pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module")]

_VERSIONED = re.compile(r"kubectl\.(\d+)\.(\d+)")


def kubectl_binaries() -> list[Path]:
    """The versioned kubectl releases beside the resolved ``kubectl``, oldest first, then it."""
    found = shutil.which("kubectl")
    if found is None:
        return []
    plain = Path(found)
    versioned: list[tuple[tuple[int, int], Path]] = []
    for candidate in plain.resolve().parent.glob("kubectl.1.*"):
        match = _VERSIONED.fullmatch(candidate.name)
        if match and candidate.is_file():
            versioned.append(((int(match[1]), int(match[2])), candidate))
    return [path for _, path in sorted(versioned)] + [plain]


def _params() -> list[object]:
    binaries = kubectl_binaries()
    if not binaries:
        skip = pytest.mark.skip(reason="kubectl is not on PATH")
        return [pytest.param(None, id="none", marks=skip)]
    return [pytest.param(path, id=path.name.removeprefix("kubectl.")) for path in binaries]


@pytest.fixture(params=_params())
def kubectl_bin(request: pytest.FixtureRequest) -> Path:
    return Path(request.param)


@pytest.fixture(scope="module", params=server_params())
def server_kubeconfig(request: pytest.FixtureRequest) -> tuple[str, Path | None]:
    return request.param, real_kubeconfig(request)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(
    server_kubeconfig: tuple[str, Path | None], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Server]:
    async with serving(*server_kubeconfig, tmp_path_factory.mktemp("sim")) as served:
        yield served


@pytest_asyncio.fixture(loop_scope="module")
async def api(server: Server) -> AsyncIterator[ApiClient]:
    async with await config.new_client_from_config(str(server.kubeconfig)) as api_client:
        yield api_client


@pytest_asyncio.fixture(loop_scope="module")
async def namespace(core: client.CoreV1Api) -> AsyncIterator[str]:
    async with fresh_namespace(core) as name:
        yield name


async def kubectl(server: Server, binary: Path, cache: Path, *args: str) -> str:
    options = [f"--kubeconfig={server.kubeconfig}", f"--cache-dir={cache}", "--request-timeout=20s"]
    cmd = [str(binary), *options, *args]
    mark = len(server.sim.requests) if server.sim else 0
    with anyio.fail_after(60):
        result = await anyio.run_process(cmd, check=False)
    if result.returncode != 0:
        requests = server.sim.requests[mark:] if server.sim else []
        asked = "\n".join(f"  {r.status} {r.verb} {r.path}?{r.query}" for r in requests)
        pytest.fail(
            f"{binary.name} {' '.join(args)} failed ({result.returncode}):\n"
            f"{result.stderr.decode()}\nrequests:\n{asked}"
        )
    return result.stdout.decode()


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory, kubectl_bin: Path) -> Path:
    """A discovery cache per release, shared by its tests, as a user's would be."""
    path = tmp_path_factory.getbasetemp() / "kubectl-cache" / kubectl_bin.name
    path.mkdir(parents=True, exist_ok=True)
    return path


Kubectl = Callable[..., Awaitable[str]]


@pytest.fixture
def ctl(server: Server, kubectl_bin: Path, cache: Path) -> Kubectl:
    """Run the param's kubectl release against the param's server; its stdout."""

    async def run(*args: str) -> str:
        return await kubectl(server, kubectl_bin, cache, *args)

    return run


POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: applied
  namespace: {namespace}
  labels:
    app: {app}
spec:
  containers:
  - name: main
    image: registry.k8s.io/pause:3.9
"""


async def test_get_pods(ctl: Kubectl, core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "alpha")
    await make_pod(core, namespace, "beta", phase="Failed")
    lines = (await ctl("get", "pods", "-n", namespace)).splitlines()
    assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
    assert sorted(line.split()[0] for line in lines[1:]) == ["alpha", "beta"]
    everywhere = await ctl("get", "pods", "-A")
    assert any(line.split()[:2] == [namespace, "beta"] for line in everywhere.splitlines())
    failed = "--field-selector=status.phase==Failed"
    names = await ctl("get", "pods", "-n", namespace, failed, "-o", "name")
    assert names.split() == ["pod/beta"]
    data = json.loads(await ctl("get", "pods", "-n", namespace, "-o", "json"))
    assert sorted(p["metadata"]["name"] for p in data["items"]) == ["alpha", "beta"]


async def test_create_namespace(ctl: Kubectl, core: client.CoreV1Api) -> None:
    # kubectl sends this one as protobuf, and never retries it as JSON.
    name = "zc-" + secrets.token_hex(4)
    assert f"namespace/{name} created" in await ctl("create", "namespace", name)
    try:
        assert (await core.read_namespace(name)).status.phase == "Active"
    finally:
        await core.delete_namespace(name)


async def test_apply_creates_then_patches(
    ctl: Kubectl, tmp_path: Path, core: client.CoreV1Api, namespace: str
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.format(namespace=namespace, app="one"))
    assert "pod/applied created" in await ctl("apply", "-f", str(manifest))
    manifest.write_text(POD.format(namespace=namespace, app="two"))
    assert "pod/applied configured" in await ctl("apply", "-f", str(manifest))
    pod = await core.read_namespaced_pod("applied", namespace)
    assert pod.metadata.labels == {"app": "two"}
    assert pod.spec.containers[0].name == "main"


async def test_delete_waits_until_gone(
    ctl: Kubectl, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "doomed", phase="Failed")
    assert 'pod "doomed" deleted' in await ctl("delete", "-n", namespace, "pod/doomed")
    assert (await ctl("get", "pods", "-n", namespace, "-o", "name")).strip() == ""
