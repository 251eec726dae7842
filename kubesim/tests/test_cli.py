"""``python -m kubesim`` as a process: kubeconfig once listening, signals, options."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import aiohttp
import anyio
import pytest
import yaml
from anyio.abc import Process
from testkit import eventually

pytestmark = pytest.mark.subprocess

ROLE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: reaper
  namespace: team-a
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
"""


async def start(tmp_path: Path, *args: str) -> tuple[Process, Path]:
    kubeconfig = tmp_path / "kc" / "config"
    process = await anyio.open_process(
        [sys.executable, "-m", "kubesim", "--port", "0", "--kubeconfig", str(kubeconfig), *args]
    )
    await eventually(kubeconfig.exists, timeout=30, message="the kubeconfig to appear")
    return process, kubeconfig


def context(kubeconfig: Path, name: str = "sim") -> tuple[str, str]:
    config = yaml.safe_load(kubeconfig.read_text())
    assert config["current-context"] == "sim"
    server = config["clusters"][0]["cluster"]["server"]
    users = {u["name"]: u["user"]["token"] for u in config["users"]}
    return server, users[name]


async def stop(process: Process, sig: int = signal.SIGTERM) -> int:
    process.send_signal(sig)
    with anyio.fail_after(15):
        code = await process.wait()
    if process.stdout is not None:
        await process.stdout.aclose()
    if process.stderr is not None:
        await process.stderr.aclose()
    return code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serves_its_options_once_kubeconfig_exists_and_exits_0_on_signal(
    tmp_path: Path, sig: int
) -> None:
    role = tmp_path / "role.yaml"
    role.write_text(ROLE)
    fault = "error:verb=get,resource=nodes,status=503"
    options = ("--scenario", "small", "--rbac", str(role), "--fault", fault, "--imitate", "1.20")
    process, kubeconfig = await start(tmp_path, *options)
    try:
        server, admin = context(kubeconfig)
        _, restricted = context(kubeconfig, "restricted")
        # The file only appears once the port accepts connections: no retry needed.
        async with aiohttp.ClientSession() as http:
            auth = {"Authorization": f"Bearer {admin}"}
            async with http.get(server + "/api/v1/pods", headers=auth) as resp:
                assert len((await resp.json())["items"]) == 30
            async with http.get(server + "/api/v1/nodes/anything", headers=auth) as resp:
                assert resp.status == 503
            async with http.get(server + "/version") as resp:
                assert (await resp.json())["gitVersion"] == "v1.20.2"
            auth = {"Authorization": f"Bearer {restricted}"}
            async with http.get(server + "/api/v1/namespaces/team-a/pods", headers=auth) as resp:
                assert resp.status == 200
            async with http.get(server + "/api/v1/pods", headers=auth) as resp:
                assert resp.status == 403
        assert [p.name for p in kubeconfig.parent.iterdir()] == ["config"]
    finally:
        code = await stop(process, sig)
    assert code == 0
