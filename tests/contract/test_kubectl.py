"""The real kubectl works against a Kubernetes API server: get, apply, delete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest
from kubernetes_asyncio import client

from tests.contract.conftest import Server, make_pod

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


async def kubectl(server: Server, tmp_path: Path, *args: str) -> str:
    kubectl_bin = shutil.which("kubectl")
    assert kubectl_bin is not None
    cmd = [
        kubectl_bin,
        f"--kubeconfig={server.kubeconfig}",
        f"--cache-dir={tmp_path / 'kubectl-cache'}",
        "--request-timeout=20s",
        *args,
    ]
    with anyio.fail_after(60):
        result = await anyio.run_process(cmd, check=False)
    out = result.stdout.decode()
    assert result.returncode == 0, f"{' '.join(args)} failed: {result.stderr.decode()}"
    return out


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


async def test_get_pods_table_names_and_json(
    server: Server, tmp_path: Path, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "alpha")
    await make_pod(core, namespace, "beta", phase="Failed")
    table = await kubectl(server, tmp_path, "get", "pods", "-n", namespace)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
    assert sorted(line.split()[0] for line in lines[1:]) == ["alpha", "beta"]
    everywhere = await kubectl(server, tmp_path, "get", "pods", "-A")
    assert any(line.split()[:2] == [namespace, "beta"] for line in everywhere.splitlines())
    names = await kubectl(
        server,
        tmp_path,
        "get",
        "pods",
        "-n",
        namespace,
        "--field-selector=status.phase==Failed",
        "-o",
        "name",
    )
    assert names.split() == ["pod/beta"]
    data = json.loads(await kubectl(server, tmp_path, "get", "pods", "-n", namespace, "-o", "json"))
    assert sorted(p["metadata"]["name"] for p in data["items"]) == ["alpha", "beta"]


async def test_apply_creates_then_patches(
    server: Server, tmp_path: Path, core: client.CoreV1Api, namespace: str
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.format(namespace=namespace, app="one"))
    out = await kubectl(server, tmp_path, "apply", "-f", str(manifest))
    assert "pod/applied created" in out
    manifest.write_text(POD.format(namespace=namespace, app="two"))
    out = await kubectl(server, tmp_path, "apply", "-f", str(manifest))
    assert "pod/applied configured" in out
    pod = await core.read_namespaced_pod("applied", namespace)
    assert pod.metadata.labels == {"app": "two"}
    assert pod.spec.containers[0].name == "main"


async def test_delete_waits_until_gone(
    server: Server, tmp_path: Path, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "doomed", phase="Failed")
    out = await kubectl(server, tmp_path, "delete", "-n", namespace, "pod/doomed")
    assert 'pod "doomed" deleted' in out
    names = await kubectl(server, tmp_path, "get", "pods", "-n", namespace, "-o", "name")
    assert names.strip() == ""
