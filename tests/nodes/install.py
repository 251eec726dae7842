"""zombied installed on a cluster with nodes, as users install it: its image imported
into the stable node's containerd, then ``kubectl apply -k`` of manifests/ or ``helm
install`` of charts/zombied, with the real probes and the real in-cluster configuration
(the projected or secret service-account token, the CA bundle, the namespace file; the
`kubernetes` Service routed to the API server, see `tests.nodes.node`).

What a user would look at is read the way a node keeps it: the containers' logs from
the node's /var/log/pods, the metrics from the pod's own address inside the node's
network namespace, the kubelet's /stats/summary for CPU and memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.nodes.cluster import STABLE, NodeCluster
from tests.nodes.node import STATS_PORT
from tests.realserver.cluster import ClusterError

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "zombied"
RELEASE = "zombied"
#: How zombied's ServiceAccount appears in the audit log.
USER = f"system:serviceaccount:{NAMESPACE}:zombied"
TIMEOUT = 180.0


def image_archive() -> tuple[Path, str]:
    """The image built from the Dockerfile (tests/ship/build-image.sh, cached), and its
    name."""
    script = REPO / "tests" / "ship" / "build-image.sh"
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON", "python3")}
    subprocess.run(["bash", str(script)], check=True, env=env, capture_output=True, timeout=1800)
    out = subprocess.run(
        ["bash", str(script), "--print"], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()
    ref = Path(out, "VERSION").read_text().split()[0]
    return Path(out) / "zombied.tar", ref


@dataclass
class Install:
    """zombied as installed on ``cluster``: by helm or by kustomize."""

    cluster: NodeCluster
    workdir: Path
    image: str
    helm: str
    _read: dict[Path, list[dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ installing

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            ["kubectl", f"--kubeconfig={self.cluster.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def helm_install(self, values: dict[str, Any], *, upgrade: bool = False) -> None:
        path = self.workdir / "values.json"
        path.write_text(json.dumps(values))
        verb = ["upgrade"] if upgrade else ["install", "--create-namespace"]
        done = subprocess.run(
            [
                self.helm,
                *verb,
                RELEASE,
                str(REPO / "charts" / "zombied"),
                f"--kubeconfig={self.cluster.admin_kubeconfig}",
                f"--namespace={NAMESPACE}",
                f"--values={path}",
                "--wait",
                f"--timeout={int(TIMEOUT)}s",
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT + 30,
            check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith("HELM_")},
        )
        if done.returncode != 0:
            raise ClusterError(f"helm {verb[0]}: {done.stderr.strip()}\n{self.describe()}")

    def helm_uninstall(self) -> None:
        subprocess.run(
            [
                self.helm,
                "uninstall",
                RELEASE,
                f"--kubeconfig={self.cluster.admin_kubeconfig}",
                f"--namespace={NAMESPACE}",
                "--wait",
            ],
            capture_output=True,
            timeout=TIMEOUT,
            check=True,
        )

    def kustomization(
        self, tree: str, components: list[str], patches: list[dict[str, Any]]
    ) -> Path:
        """An overlay of ``manifests/<tree>`` with ``manifests/components/<components>``,
        naming the image built here, as a user's overlay names their registry's."""
        directory = self.workdir / "overlay"
        directory.mkdir(exist_ok=True)
        name, tag = self.image.rsplit(":", 1)
        document = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(REPO / "manifests" / tree, directory)],
            "components": [
                os.path.relpath(REPO / "manifests" / "components" / name, directory)
                for name in components
            ],
            "images": [{"name": "registry.example.com/zombied", "newName": name, "newTag": tag}],
            "patches": [{"patch": json.dumps(patch)} for patch in patches],
        }
        (directory / "kustomization.yaml").write_text(json.dumps(document))
        return directory

    # ------------------------------------------------------------------ reading

    def pods(self) -> list[dict[str, Any]]:
        status, body = self.cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        if status != 200:
            raise ClusterError(f"listing zombied's pods: {status} {body}")
        return [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]

    def ready(self, count: int = 2) -> bool:
        ready = [
            p
            for p in self.pods()
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
        ]
        return len(ready) >= count

    def lease(self) -> dict[str, Any]:
        """The Lease's spec as its holders wrote it; empty while there is none."""
        status, body = self.cluster.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/zombied"
        )
        return dict(body.get("spec", {})) if status == 200 else {}

    def holder(self) -> str | None:
        """The Lease's holder: a pod's name and a suffix of its process."""
        return str(self.lease().get("holderIdentity") or "") or None

    def leader(self) -> str | None:
        """The pod holding the Lease, when a pod of this install does."""
        holder = self.holder() or ""
        names = (p["metadata"]["name"] for p in self.pods())
        return next((name for name in names if holder.startswith(f"{name}-")), None)

    def pod(self, name: str) -> dict[str, Any]:
        status, body = self.cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        if status != 200:
            raise ClusterError(f"GET pod {name}: {status} {body}")
        return dict(body)

    def restarts(self, name: str) -> int:
        statuses = self.pod(name).get("status", {}).get("containerStatuses", [])
        return sum(int(c.get("restartCount", 0)) for c in statuses)

    def signal(self, name: str, signal: str) -> None:
        """Send ``signal`` to zombied's process in pod ``name``, as the node's runtime
        would (``ctr tasks kill``)."""
        (container,) = self.pod(name)["status"]["containerStatuses"]
        self.cluster.nodes[STABLE].ctr(
            "tasks",
            "kill",
            f"--signal={signal}",
            container["containerID"].removeprefix("containerd://"),
        )

    def serving(self, name: str) -> bool:
        """Whether the metrics Service sends traffic to pod ``name`` (a ready address)."""
        status, body = self.cluster.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/endpoints/{RELEASE}-metrics"
        )
        if status != 200:
            return False
        ready = {
            address.get("targetRef", {}).get("name")
            for subset in body.get("subsets") or []
            for address in subset.get("addresses") or []
        }
        return name in ready

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON line zombied's containers wrote, by time, from the stable node's
        /var/log/pods (CRI format: time, stream, tag, line). The kubelet removes a
        deleted pod's logs: what was read before stays (see `collecting`)."""
        root = self.cluster.nodes[STABLE].directory / "log" / "pods"
        with self._lock:
            for path in root.glob(f"{NAMESPACE}_*/zombied/*.log"):
                events = []
                try:
                    text = path.read_text(errors="replace")
                except FileNotFoundError:
                    continue
                for line in text.splitlines():
                    message = line.split(" ", 3)[-1]
                    if message.startswith("{"):
                        try:
                            events.append(json.loads(message))
                        except ValueError:
                            continue  # a line being written
                self._read[path] = events
            merged = [event for events in self._read.values() for event in events]
        return sorted(merged, key=lambda event: str(event.get("timestamp", "")))

    @contextmanager
    def collecting(self) -> Iterator[None]:
        """Read the logs every half second meanwhile, so that none is lost with its pod."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(0.5):
                self.logs()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(30)
            self.logs()

    def metrics(self, pod: dict[str, Any]) -> str:
        return self.cluster.nodes[STABLE].fetch(f"http://{pod['status']['podIP']}:8080/metrics")

    def stats(self) -> dict[str, Any]:
        """The stable node's kubelet /stats/summary."""
        node = self.cluster.nodes[STABLE]
        return dict(json.loads(node.fetch(f"http://127.0.0.1:{STATS_PORT}/stats/summary")))

    def usage(self) -> dict[str, tuple[int, int]]:
        """Per zombied pod: (CPU in millicores, working set in bytes), as the stable
        node's kubelet measures its container (/stats/summary)."""
        usage = {}
        for pod in self.stats().get("pods", []):
            if pod["podRef"]["namespace"] != NAMESPACE:
                continue
            for container in pod.get("containers", []):
                if container["name"] == "zombied":
                    cpu = container.get("cpu", {}).get("usageNanoCores", 0) // 1_000_000
                    memory = container.get("memory", {}).get("workingSetBytes", 0)
                    usage[pod["podRef"]["name"]] = (cpu, memory)
        return usage

    def describe(self) -> str:
        return self.kubectl("-n", NAMESPACE, "get", "pods,events", "-o", "wide", check=False)

    def wait(self, ready: Callable[[], object], what: str, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} after {timeout:.0f}s:\n{self.describe()}")
            time.sleep(0.5)
