"""The simulator and zombied as processes, seen from the benchmark.

`SimProcess` starts `python -m kubesim` on a free loopback port, waits for the
kubeconfig it writes once it accepts connections, and wraps its `/_sim/...` control
API (scenario, storms, request and delete logs). `ZombiedProcess` starts `zombied run`
the way a user does, against any kubeconfig, and waits until it is ready and leading.
Both are context managers that stop their process on the way out; neither ever talks
to anything but 127.0.0.1. zombied is known here only by its command line: its
defaults are read from `zombied run --help`, never from its modules.
"""

from __future__ import annotations

import base64
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from tests.helpers import LOOPBACK, Child, free_port

from bench.procs import Http, Served
from bench.stats import Zombie
from kubesim.scenario import shutdown_pod

REPO = Path(__file__).resolve().parent.parent
#: The console script of the interpreter running the benchmark (the project's venv).
ZOMBIED = str(Path(sys.executable).parent / "zombied")
#: As the shipped Deployment runs it: with a Lease (outside a cluster, in `default`).
AS_DEPLOYED = ("--leader-elect", "--lease-namespace", "default")


def zombied_defaults(*options: str) -> dict[str, str]:
    """The defaults `zombied run --help` states for these long options (`--qps`...).

    An option whose default the help does not state maps to "?": the report says so
    rather than guessing.
    """
    text = subprocess.run(
        [ZOMBIED, "run", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout
    # argparse wraps help text: rejoin it, then read each option's "(default: X;".
    flat = " ".join(text.split())
    found = {}
    for option in options:
        match = re.search(rf"(?<![\w-]){re.escape(option)} [A-Z_.]+ .*?\(default: ([^;)]+)", flat)
        found[option] = match.group(1).strip() if match else "?"
    return found


class SimProcess(Served):
    """`python -m kubesim` in its own process, plus its control API."""

    def __init__(self, workdir: Path, *, name: str = "sim") -> None:
        self.port = free_port()
        self.kubeconfig = workdir / f"{name}.kubeconfig"
        self.child = Child(
            name,
            [
                sys.executable,
                "-m",
                "kubesim",
                "--host",
                LOOPBACK,
                "--port",
                str(self.port),
                "--kubeconfig",
                str(self.kubeconfig),
                # As a real API server, and because kubectl sends tokens only over TLS.
                "--tls",
            ],
            log_path=workdir / f"{name}.log",
        )
        self.url = f"https://{LOOPBACK}:{self.port}"
        self.http = Http(self.url, timeout=300.0)

    def __enter__(self) -> SimProcess:
        self.child.start(
            lambda: self.kubeconfig.stat().st_size > 0,
            timeout=60,
            what="simulator",
            failure="did not start",
        )
        with self.child.stopped_on_error():
            config = yaml.safe_load(self.kubeconfig.read_text())
            ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
            self.http.context = ssl.create_default_context(cadata=ca.decode())
            self.http.token = str(config["users"][0]["user"]["token"])
        return self

    # Control API -------------------------------------------------------------------------

    def build(self, *, nodes: int, pods: int, namespaces: Sequence[str]) -> None:
        body = {"nodes": nodes, "pods": pods, "namespaces": list(namespaces)}
        self.http.json("POST", "/_sim/scenario", body)

    def stats(self) -> Any:
        return self.http.json("GET", "/_sim/stats")

    def deleted_count(self) -> int:
        return int(self.stats()["deleted"])

    def requests(self) -> list[dict[str, Any]]:
        return list(self.http.json("GET", "/_sim/requests?full=1")["records"])

    def deleted(self) -> list[dict[str, Any]]:
        return list(self.http.json("GET", "/_sim/deleted"))

    def reaped(self, zombies: Sequence[Zombie]) -> bool:
        """Whether every one of these zombies has been deleted."""
        if self.deleted_count() < len(zombies):
            return False
        done = {str(record["obj"]["metadata"]["uid"]) for record in self.deleted()}
        return all(zombie.uid in done for zombie in zombies)

    def node_names(self) -> list[str]:
        listing = self.http.json("GET", "/api/v1/nodes")
        return sorted(item["metadata"]["name"] for item in listing["items"])

    def pods_on(self, nodes: Sequence[str]) -> list[dict[str, Any]]:
        """Every pod bound to these nodes, from one paginated LIST of all pods.

        One pass over the cluster instead of a field-selected LIST per node (each of
        which the simulator answers by scanning every pod).
        """
        wanted = set(nodes)
        return [pod for pod in self.http.items("/api/v1/pods") if pod["spec"]["nodeName"] in wanted]

    def shut_down(
        self, pods: Sequence[dict[str, Any]], *, now: datetime | None = None
    ) -> list[Zombie]:
        """The kubelet's node-shutdown status on these pods (those still running), written
        straight to the store by 4 threads, as of ``now`` (default: the moment of the call).

        `Cluster.preempt` scans every pod of the cluster per node, which at 100k pods would
        stretch "at once" over minutes. Each zombie's time is the answer to its own write
        (the simulator applies it before answering).
        """
        now = now or datetime.now(UTC)

        def one(pod: dict[str, Any]) -> Zombie | None:
            if (pod.get("status") or {}).get("phase") not in ("Running", "Pending"):
                return None
            changed = shutdown_pod(pod, version="1.22", variant="terminated", now=now)
            changed["metadata"].pop("resourceVersion", None)
            sent = time.time()
            self.http.json("POST", "/_sim/store/update", {"resource": "pods", "object": changed})
            return Zombie(str(changed["metadata"]["uid"]), failed_at=time.time(), sent_at=sent)

        with ThreadPoolExecutor(max_workers=4) as pool:
            return [zombie for zombie in pool.map(one, pods) if zombie is not None]


class ZombiedProcess(Served):
    """`zombied run` in its own process as the shipped Deployment runs it: with leader
    election (`AS_DEPLOYED`), JSON logs, min age 0 and `extra` flags."""

    def __init__(
        self, kubeconfig: Path, workdir: Path, *, name: str, extra: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        argv = [
            ZOMBIED,
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--min-age",
            "0s",
            "--listen",
            f"{LOOPBACK}:{self.port}",
            "--log-format",
            "json",
            *AS_DEPLOYED,
            *extra,
        ]
        self.child = Child(name, argv, log_path=workdir / f"{name}.log")
        self.http = Http(f"http://{LOOPBACK}:{self.port}", timeout=5.0)

    @property
    def pid(self) -> int:
        return self.child.pid

    def __enter__(self) -> ZombiedProcess:
        self.child.start(self._ready, timeout=120, what="zombied")
        return self

    def _ready(self) -> bool:
        # Readiness does not wait for the Lease; deletes do.
        return self.http.ok("/readyz") and self.metrics().get("zombied_leader") == 1.0

    def metrics(self) -> dict[str, float]:
        """zombied's unlabelled metrics now, by name (empty if /metrics does not answer)."""
        code, body = self.http.request("GET", "/metrics")
        if code != 200:
            return {}
        lines = (line.split() for line in body.decode(errors="replace").splitlines())
        return {f[0]: float(f[1]) for f in lines if len(f) == 2 and not f[0].startswith("#")}
