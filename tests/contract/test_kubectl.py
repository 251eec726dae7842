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
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from kubesim import Simulator
from tests.contract.conftest import SIMS, Server, make_pod, real_kubeconfig, server_params

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
        return [
            pytest.param(None, id="none", marks=pytest.mark.skip(reason="kubectl is not on PATH"))
        ]
    return [
        pytest.param(
            path, id=path.name.removeprefix("kubectl.") if path.name != "kubectl" else "kubectl"
        )
        for path in binaries
    ]


@pytest.fixture(params=_params())
def kubectl_bin(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


@pytest.fixture(scope="module", params=server_params())
def server_kubeconfig(request: pytest.FixtureRequest) -> tuple[str, Path | None]:
    return request.param, real_kubeconfig(request)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(
    server_kubeconfig: tuple[str, Path | None], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Server]:
    name, kubeconfig = server_kubeconfig
    if kubeconfig is not None:
        yield Server(kubeconfig, None, name)
        return
    async with Simulator(bookmark_interval=0.2, tls=True, imitate=SIMS[name]) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path_factory.mktemp("sim") / "kubeconfig")
        yield Server(kubeconfig, sim, name)


@pytest_asyncio.fixture(loop_scope="module")
async def api(server: Server) -> AsyncIterator[ApiClient]:
    async with await config.new_client_from_config(str(server.kubeconfig)) as api_client:
        yield api_client


@pytest_asyncio.fixture(loop_scope="module")
async def namespace(core: client.CoreV1Api) -> AsyncIterator[str]:
    name = "zc-" + secrets.token_hex(4)
    await core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        await core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


async def kubectl(server: Server, binary: Path, cache: Path, *args: str) -> str:
    cmd = [
        str(binary),
        f"--kubeconfig={server.kubeconfig}",
        f"--cache-dir={cache}",
        "--request-timeout=20s",
        *args,
    ]
    mark = len(server.sim.requests) if server.sim else 0
    with anyio.fail_after(60):
        result = await anyio.run_process(cmd, check=False)
    if result.returncode != 0:
        asked = ""
        if server.sim is not None:
            asked = "\n".join(
                f"  {r.status} {r.verb} {r.path}?{r.query}" for r in server.sim.requests[mark:]
            )
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


async def test_get_pods(
    server: Server, kubectl_bin: Path, cache: Path, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "alpha")
    await make_pod(core, namespace, "beta", phase="Failed")
    table = await kubectl(server, kubectl_bin, cache, "get", "pods", "-n", namespace)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
    assert sorted(line.split()[0] for line in lines[1:]) == ["alpha", "beta"]
    everywhere = await kubectl(server, kubectl_bin, cache, "get", "pods", "-A")
    assert any(line.split()[:2] == [namespace, "beta"] for line in everywhere.splitlines())
    names = await kubectl(
        server,
        kubectl_bin,
        cache,
        "get",
        "pods",
        "-n",
        namespace,
        "--field-selector=status.phase==Failed",
        "-o",
        "name",
    )
    assert names.split() == ["pod/beta"]
    data = json.loads(
        await kubectl(server, kubectl_bin, cache, "get", "pods", "-n", namespace, "-o", "json")
    )
    assert sorted(p["metadata"]["name"] for p in data["items"]) == ["alpha", "beta"]


async def test_apply_creates_then_patches(
    server: Server,
    kubectl_bin: Path,
    cache: Path,
    tmp_path: Path,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.format(namespace=namespace, app="one"))
    out = await kubectl(server, kubectl_bin, cache, "apply", "-f", str(manifest))
    assert "pod/applied created" in out
    manifest.write_text(POD.format(namespace=namespace, app="two"))
    out = await kubectl(server, kubectl_bin, cache, "apply", "-f", str(manifest))
    assert "pod/applied configured" in out
    pod = await core.read_namespaced_pod("applied", namespace)
    assert pod.metadata.labels == {"app": "two"}
    assert pod.spec.containers[0].name == "main"


async def test_delete_waits_until_gone(
    server: Server, kubectl_bin: Path, cache: Path, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "doomed", phase="Failed")
    out = await kubectl(server, kubectl_bin, cache, "delete", "-n", namespace, "pod/doomed")
    assert 'pod "doomed" deleted' in out
    names = await kubectl(server, kubectl_bin, cache, "get", "pods", "-n", namespace, "-o", "name")
    assert names.strip() == ""
