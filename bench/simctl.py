"""The simulator and zombied as processes, seen from the benchmark.

`SimProcess` starts `python -m zombied.sim` on a free loopback port, waits for the
kubeconfig it writes once it accepts connections, and wraps its `/_sim/...` control
API (scenario, preemptions, request and delete logs). `ZombiedProcess` starts
`zombied run` the way a user does and waits for `/readyz`. Both are context managers
that stop their process on the way out; neither ever talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from bench.procs import LOOPBACK, Child, Http, free_port, wait_for
from bench.stats import Zombie

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"


def venv_tool(name: str) -> str:
    """A console script of the project's venv, else the one next to this interpreter."""
    candidate = VENV_BIN / name
    if candidate.exists():
        return str(candidate)
    return str(Path(sys.executable).parent / name)


@dataclass(frozen=True, slots=True)
class Preemption:
    """What one node shutdown did: the zombies it left, stamped with the status time."""

    node: str
    asked_at: float
    answered_at: float
    zombies: list[Zombie]


class SimProcess:
    """`python -m zombied.sim` in its own process, plus its control API."""

    def __init__(self, workdir: Path, *, name: str = "sim") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.kubeconfig = workdir / f"{name}.kubeconfig"
        self.child = Child(
            name,
            [
                sys.executable,
                "-m",
                "zombied.sim",
                "--host",
                LOOPBACK,
                "--port",
                str(self.port),
                "--kubeconfig",
                str(self.kubeconfig),
            ],
            log_path=workdir / f"{name}.log",
        )
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.http = Http(self.url, timeout=300.0)
        self.token = ""

    def __enter__(self) -> SimProcess:
        self.kubeconfig.unlink(missing_ok=True)
        self.child.__enter__()
        try:
            if not wait_for(self._kubeconfig_ready, timeout=60):
                raise RuntimeError(f"simulator did not start:\n{self.child.tail()}")
            config = yaml.safe_load(self.kubeconfig.read_text())
            self.token = str(config["users"][0]["user"]["token"])
            self.http.token = self.token
        except BaseException:
            self.child.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.child.stop()

    def _kubeconfig_ready(self) -> bool:
        if not self.child.alive():
            raise RuntimeError(f"simulator exited:\n{self.child.tail()}")
        return self.kubeconfig.exists() and self.kubeconfig.stat().st_size > 0

    # Control API -------------------------------------------------------------------------

    def build(self, *, nodes: int, pods: int, namespaces: int) -> Any:
        return self.http.json(
            "POST", "/_sim/scenario", {"nodes": nodes, "pods": pods, "namespaces": namespaces}
        )

    def node_names(self) -> list[str]:
        listing = self.http.json("GET", "/api/v1/nodes")
        return sorted(item["metadata"]["name"] for item in listing["items"])

    def preempt(self, node: str, *, version: str, variant: str, group: str) -> Preemption:
        asked = time.time()
        answer = self.http.json(
            "POST", "/_sim/preempt", {"node": node, "version": version, "variant": variant}
        )
        answered = time.time()
        # The status change happened inside the call; the simulator's stamp when it gives
        # one, else the moment we asked (which can only make latencies look longer).
        failed_at = float(answer.get("time", asked)) if isinstance(answer, dict) else asked
        zombies = [
            Zombie(
                namespace=str(z["namespace"]),
                name=str(z["name"]),
                uid=str(z["uid"]),
                failed_at=float(z.get("time", failed_at)),
                group=group,
                variant=variant,
            )
            for z in _zombie_entries(answer)
        ]
        return Preemption(node=node, asked_at=asked, answered_at=answered, zombies=zombies)

    def requests(self) -> list[dict[str, Any]]:
        answer = self.http.json("GET", "/_sim/requests?full=1")
        if isinstance(answer, dict):
            for key in ("requests", "records", "items"):
                if key in answer:
                    return list(answer[key])
        return list(answer)

    def deleted(self) -> list[dict[str, Any]]:
        answer = self.http.json("GET", "/_sim/deleted")
        if isinstance(answer, dict):
            for key in ("deleted", "records", "items"):
                if key in answer:
                    return list(answer[key])
        return list(answer)

    def stats(self) -> Any:
        return self.http.json("GET", "/_sim/stats")


def _zombie_entries(answer: Any) -> list[dict[str, Any]]:
    raw = answer.get("zombies", []) if isinstance(answer, dict) else []
    entries: list[dict[str, Any]] = []
    for item in raw:
        if isinstance(item, dict):
            entries.append(item)
        else:
            namespace, name, uid = item
            entries.append({"namespace": namespace, "name": name, "uid": uid})
    return entries


class ZombiedProcess:
    """`zombied run` in its own process, exactly as a user starts it."""

    def __init__(
        self, sim: SimProcess, workdir: Path, *, name: str, extra: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        self.argv = [
            venv_tool("zombied"),
            "run",
            "--kubeconfig",
            str(sim.kubeconfig),
            "--min-age",
            "0s",
            "--listen",
            f"{LOOPBACK}:{self.port}",
            "--log-format",
            "json",
            *extra,
        ]
        self.child = Child(name, self.argv, log_path=workdir / f"{name}.log")
        self.http = Http(f"http://{LOOPBACK}:{self.port}", timeout=5.0)

    @property
    def pid(self) -> int:
        return self.child.pid

    def __enter__(self) -> ZombiedProcess:
        self.child.__enter__()
        try:
            if not wait_for(self._ready, timeout=120):
                raise RuntimeError(f"zombied did not become ready:\n{self.child.tail()}")
        except BaseException:
            self.child.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.child.stop()

    def _ready(self) -> bool:
        if not self.child.alive():
            raise RuntimeError(f"zombied exited:\n{self.child.tail()}")
        return self.http.ok("/readyz")
