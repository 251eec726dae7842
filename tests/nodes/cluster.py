"""A real cluster with nodes: the API server, a controller-manager, a scheduler and two
kubelets of one release, a *stable* node and a *spot* node.

The controllers are the real ones, so ReplicaSets, Jobs, StatefulSets and DaemonSets
replace their pods, the garbage collector and PodGC delete what they delete, and the
node lifecycle controller taints a silent node, as in any cluster. Nothing is faked: a
zombie here is what a kubelet wrote. The API-only suites (tests/realserver) keep their
own servers, whose made-up owners and node names these controllers would remove.

The nodes reach the API server through a Unix socket relay (see `tests.nodes.node`), so
every byte stays on loopback or inside the namespaces the nodes are.
"""

from __future__ import annotations

import fcntl
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.nodes.images import busybox_image, pause_image
from tests.nodes.node import API_PORT, SERVICE_IP, Node, missing_tools
from tests.realserver.cluster import (
    RELEASES,
    ClusterError,
    RealCluster,
    binary_dir,
    free_port,
    missing_binaries,
)

STABLE = "stable"
SPOT = "spot"
POOL = "zombied.test/pool"
SPOT_LABEL = "cloud.google.com/gke-spot"
BUSYBOX = "zombied.test/busybox:1"
#: The clusters of both releases share this machine's disk: space one frees while the
#: other measures its disk pressure would keep the other's kubelet from seeing any.
DISK_LOCK = Path(tempfile.gettempdir()) / "zombied-nodes-disk.lock"
NODE_BINARIES = ("kube-controller-manager", "kube-scheduler", "kubelet", "pause")


def missing(version: str) -> str | None:
    """Why a cluster with nodes of ``version`` cannot run here (None: it can)."""
    reason = missing_binaries(version)
    if reason is not None:
        return reason
    for name in NODE_BINARIES:
        if not (binary_dir(version) / "bin" / name).exists():
            return f"{binary_dir(version) / 'bin' / name} is not built (run `make real-apiserver`)"
    return missing_tools()


@contextmanager
def disk_held() -> Iterator[None]:
    """No other cluster of this machine frees its disk meanwhile (see `DISK_LOCK`)."""
    with DISK_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _old(version: str) -> bool:
    return version.startswith("v1.20.")


@dataclass
class NodeCluster(RealCluster):
    """The control plane of one release with a stable and a spot node."""

    nodes: dict[str, Node] = field(default_factory=dict)
    #: Short: the nodes' Unix sockets live under it (a path holds at most 107 bytes).
    node_root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zn-")))
    serving_names: tuple[str, ...] = (
        "IP:127.0.0.1",
        "DNS:localhost",
        "DNS:kubernetes.default.svc",
        f"IP:{SERVICE_IP}",
        "IP:10.250.1.1",
        "IP:10.250.2.1",
    )

    @property
    def bin(self) -> Path:
        return binary_dir(self.release.version) / "bin"

    def start(self) -> None:
        reason = missing(self.release.version)
        if reason is not None:
            raise ClusterError(reason)
        super().start()
        self._start_controllers()
        relay = self.node_root / "api.sock"
        self._spawn(
            "api-relay",
            [
                "socat",
                f"UNIX-LISTEN:{relay},fork,mode=600",
                f"TCP:{self.url.removeprefix('https://')}",
            ],
        )
        images = self.node_root / "images"
        images.mkdir()
        pause_ref = f"zombied.test/pause:{self.release.version}"
        archives = (
            pause_image(images, self.bin / "pause", pause_ref),
            busybox_image(images, BUSYBOX),
        )
        kubeconfig = self._node_kubeconfig()
        token = secrets.token_hex(3)
        # The spot node as GKE's Spot pools are: labelled, and tainted so that only
        # workloads that tolerate preemption land there (zombied does not).
        nodes = (
            (STABLE, {POOL: "stable"}, ()),
            (SPOT, {POOL: "spot", SPOT_LABEL: "true"}, (f"{SPOT_LABEL}=true:NoSchedule",)),
        )
        for index, (name, labels, taints) in enumerate(nodes, start=1):
            self.nodes[name] = Node(
                name=name,
                index=index,
                version=self.release.version,
                binaries=self.bin,
                directory=self.node_root / name,
                api_socket=relay,
                kubeconfig=kubeconfig,
                images=archives,
                pause_ref=pause_ref,
                cgroup_root=f"zombied-{token}-{name}",
                labels=labels,
                taints=taints,
            )
        for node in self.nodes.values():
            node.boot()
        for name in self.nodes:
            self.wait_ready(name)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()
        super().stop()
        with disk_held():
            shutil.rmtree(self.node_root, ignore_errors=True)

    def _apiserver_flags(self, etcd_url: str, port: int) -> list[str]:
        # A controller-manager creates the "default" ServiceAccounts here: pods get
        # their service account and its projected token as in any cluster.
        flags = super()._apiserver_flags(etcd_url, port)
        return [flag for flag in flags if flag != "--disable-admission-plugins=ServiceAccount"]

    def _start_controllers(self) -> None:
        d = self.workdir
        insecure_off = ["--port=0"] if _old(self.release.version) else []
        common = [
            f"--kubeconfig={self.admin_kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            *insecure_off,
        ]
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                *common,
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={d / 'serving.crt'}",
                # Each controller as its own service account: the audit log tells who
                # deleted a pod (PodGC, the StatefulSet controller, zombied...).
                "--use-service-account-credentials=true",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [str(self.bin / "kube-scheduler"), *common, f"--secure-port={free_port()}"],
        )
        # The controller-manager is up once it has made a namespace's ServiceAccount.
        deadline = time.monotonic() + 90
        while self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] != 200:
            if time.monotonic() > deadline:
                raise ClusterError(
                    "no default ServiceAccount after 90s: is the controller-manager up?"
                )
            time.sleep(0.2)

    def _node_kubeconfig(self) -> Path:
        """The kubelets' kubeconfig: the API server through each node's relay."""
        source = self.admin_kubeconfig.read_text().replace(
            self.url, f"https://127.0.0.1:{API_PORT}"
        )
        path = self.node_root / "kubelet.kubeconfig"
        path.write_text(source)
        return path

    # ------------------------------------------------------------------ for tests

    def ready(self, name: str) -> bool:
        status, body = self.request("GET", f"/api/v1/nodes/{name}")
        if status != 200:
            return False
        conditions = body.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def wait_ready(self, name: str, timeout: float = 120.0) -> None:
        node = self.nodes[name]
        deadline = time.monotonic() + timeout
        while not self.ready(name):
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"node {name} not Ready after {timeout:.0f}s:\n{node.tail('kubelet')}"
                )
            node.check(f"node {name} to be Ready")
            time.sleep(0.2)


@contextmanager
def running_node_cluster(
    workdir: Path, version: str, admins: tuple[str, ...] = ()
) -> Iterator[NodeCluster]:
    """A cluster with nodes of ``version`` in ``workdir``; stopped on leaving, whatever happened."""
    cluster = NodeCluster(workdir, admins=admins, release=RELEASES[version])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
