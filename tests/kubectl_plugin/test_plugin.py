"""``kubectl zombies`` through the real kubectl, against the simulator over TLS.

kubectl finds the ``kubectl-zombies`` console script on PATH (the virtualenv's bin
directory is put first) and runs it with the arguments after ``zombies``; the plugin
must then behave as kubectl users expect: the context's namespace by default, ``-n``,
``-A``, ``--context``, ``--kubeconfig`` or ``$KUBECONFIG``, ``-l``, ``-o`` and
``--no-headers``, and never a delete. What the plugin's arguments mean to zombied is
test_translate's; what zombied prints, tests/daemon's.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
import yaml

from kubesim import Simulator
from tests.daemon.pods import pod, zombie

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.xdist_group("kubectl-plugin"),
]

BIN = Path(sys.executable).parent


@dataclass
class Cluster:
    sim: Simulator
    kubeconfig: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    if not (BIN / "kubectl-zombies").exists():
        pytest.fail(f"kubectl-zombies is not installed in {BIN}: run `make venv`")
    async with Simulator(bookmark_interval=0.2, tls=True) as sim:
        for name, namespace, app in (("web-1", "default", "web"), ("db-0", "default", "db")):
            old = zombie(name, namespace, labels={"app": app}, finished_ago=3600)
            sim.store.create("pods", old)
        sim.store.create("pods", zombie("api-2", "team-a", finished_ago=3600))
        sim.store.create("pods", pod("running-1", "team-a"))
        path = sim.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        # A second context, as kubectl's `config set-context --namespace` makes one.
        config = yaml.safe_load(path.read_text())
        (context,) = config["contexts"]
        team = {"name": "team", "context": {**context["context"], "namespace": "team-a"}}
        config["contexts"].append(team)
        path.write_text(yaml.safe_dump(config))
        yield Cluster(sim, path)


async def kubectl(
    *args: str, kubeconfig: Path | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    environ = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    environ.pop("KUBECONFIG", None)
    environ.update(env or {})
    argv = ["kubectl", "zombies", *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    result = await anyio.run_process(argv, env=environ, check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.parametrize(
    ("args", "env", "listed"),
    [
        # The context's namespace, without a NAMESPACE column, as kubectl get.
        ((), False, ["POD", "db-0", "web-1"]),
        (("-A",), False, ["NAMESPACE", "default", "default", "team-a"]),
        (("-n", "team-a", "-o", "name"), False, ["pod/api-2"]),
        (("-l", "app=db", "--no-headers"), False, ["db-0"]),
        # The context, and the kubeconfig from the environment.
        (("--context", "team", "-o", "name"), True, ["pod/api-2"]),
    ],
)
async def test_lists_like_kubectl_get(
    cluster: Cluster, args: tuple[str, ...], env: bool, listed: list[str]
) -> None:
    environ = {"KUBECONFIG": str(cluster.kubeconfig)} if env else None
    code, out, err = await kubectl(
        *args, kubeconfig=None if env else cluster.kubeconfig, env=environ
    )
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()] == listed


async def test_bad_options_exit_2_with_one_line(cluster: Cluster) -> None:
    code, out, err = await kubectl("-A", "-n", "x", kubeconfig=cluster.kubeconfig)
    assert (code, out, err.startswith("zombied: error: --all-namespaces: ")) == (2, "", True)
    assert len(err.splitlines()) == 1
