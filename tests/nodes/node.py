"""A real node for the tests: a kubelet with its own containerd, D-Bus and logind.

Each boot of a node is a machine of its own on this one: a PID, mount and network
namespace (``unshare``) whose first process is the release's ``pause``. Everything the
node runs (dbus-daemon, the logind stand-in, containerd, the kubelet, the pods) lives in
it, so that powering the node off is killing that first process: the kernel ends every
process of the namespace, and its mounts, interfaces and iptables rules go with it, also
when the test process dies (``unshare --kill-child`` gets SIGKILL with its parent).

What the node keeps across boots is its directory, as a disk: containerd's images, the
kubelet's root directory, its logs and its logind drop-ins. Inside the namespace that
directory replaces what a kubelet or containerd would otherwise write on the host:
``/run`` is a fresh tmpfs per boot, ``/var/log`` and ``/etc/systemd`` are the node's own,
and the kernel settings a kubelet adjusts (``vm.overcommit_memory`` and friends) are
files of the node bound over ``/proc/sys``. The node's network is a bridge ``cni0`` with
the node's address (the CNI bridge plugin adds the pods' interfaces to it) and a relay
on ``127.0.0.1:6443`` (and the node's address) to the API server's Unix socket relay on
the host, so that no traffic leaves loopback or the namespaces the tests made.

Outside the namespace a node touches only its cgroup root (``/sys/fs/cgroup/*/<root>``,
removed at the end) and its directory.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from tests.realserver.cluster import ClusterError

REPO = Path(__file__).resolve().parents[2]
API_PORT = 6443
#: The ClusterIP of the `kubernetes` Service (the first of the API server's
#: --service-cluster-ip-range), which pods' in-cluster configuration connects to.
SERVICE_IP = "10.0.0.1"
#: The kubelet's read-only port, inside the node's network namespace only: its
#: /stats/summary gives the pods' CPU and memory as the kubelet measures them.
STATS_PORT = 10255
CGROUP_FS = Path("/sys/fs/cgroup")
BOOT_TIMEOUT = 120.0
#: The kernel settings a kubelet sets (pkg/kubelet/cm, setupKernelTunables): on a node
#: they are the node's own files, never the host's.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: A nearly full disk on a test machine must neither evict the pods nor delete the
#: imported images (they cannot be pulled again): no eviction threshold is ever reached.
NO_EVICTION = {
    "memory.available": "1Mi",
    "nodefs.available": "0%",
    "nodefs.inodesFree": "0%",
    "imagefs.available": "0%",
}
#: What a node's boot needs from the machine (installed by ``make test``).
TOOLS = (
    "unshare",
    "nsenter",
    "ip",
    "iptables",
    "socat",
    "dbus-daemon",
    "dbus-send",
    "containerd",
    "ctr",
)
TOOLS_SBIN = ("runc",)
CNI_BIN = Path("/usr/lib/cni")

_PR_SET_PDEATHSIG = 1


def missing_tools() -> str | None:
    """Why a node cannot boot on this machine (None: it can)."""
    for tool in (*TOOLS, *TOOLS_SBIN):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs it)"
    if not (CNI_BIN / "bridge").exists():
        return f"the CNI plugins are not in {CNI_BIN} (containernetworking-plugins)"
    if os.geteuid() != 0:
        return "real nodes need root (namespaces, cgroups, containerd)"
    return None


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True)
class KubeletFlavour:
    """What one release's kubelet and containerd setup needs that the other refuses."""

    flags: list[str]
    config: Mapping[str, Any]


def _flavour(version: str, runtime: Path) -> KubeletFlavour:
    if version.startswith("v1.20."):
        return KubeletFlavour(
            flags=["--container-runtime=remote", f"--container-runtime-endpoint=unix://{runtime}"],
            config={
                "featureGates": {"GracefulNodeShutdown": True},
                # 1.20 creates iptables chains for dockershim's sake unless told not to.
                "makeIPTablesUtilChains": False,
            },
        )
    return KubeletFlavour(
        flags=[],
        # This host is on cgroup v1, which kubelets from 1.35 refuse by default.
        config={"failCgroupV1": False, "containerRuntimeEndpoint": f"unix://{runtime}"},
    )


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]


@dataclass
class Node:
    """One node: its name, address, directory and the boots it goes through."""

    name: str
    #: The node's subnet, 10.250.<index>.0/24: its address is .1, its pods' from .10.
    index: int
    version: str
    binaries: Path
    directory: Path
    #: The host side of the API relay: a Unix socket forwarding to the API server.
    api_socket: Path
    kubeconfig: Path
    #: Image archives imported into containerd at the first boot.
    images: Sequence[Path]
    pause_ref: str
    cgroup_root: str
    labels: dict[str, str] = field(default_factory=dict)
    #: Taints the node registers with (``key=value:Effect``).
    taints: tuple[str, ...] = ()
    shutdown_grace_s: int = 20
    shutdown_grace_critical_s: int = 5
    #: Reserved for the system, as a kubelet's ``systemReserved`` (e.g. ``{"cpu": "1"}``).
    system_reserved: dict[str, str] = field(default_factory=dict)
    eviction_hard: dict[str, str] = field(default_factory=lambda: dict(NO_EVICTION))
    boots: int = 0
    #: When the last boot began (the API's times are to the second).
    booted_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    _init: subprocess.Popen[bytes] | None = None
    _procs: list[_Proc] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def containerd_socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def bus_address(self) -> str:
        return f"unix:path={self.directory / 'bus'}"

    @property
    def running(self) -> bool:
        return self._init is not None and self._init.poll() is None

    # ------------------------------------------------------------------ power

    def boot(self) -> None:
        """Start the machine: namespaces, bus, logind, containerd, relay, kubelet."""
        if self.running:
            raise ClusterError(f"node {self.name} is already running")
        self.boots += 1
        self.booted_at = datetime.now(UTC)
        self._prepare()
        log = self._log("init")
        self._init = subprocess.Popen(
            [
                "unshare",
                "--fork",
                "--kill-child",
                "--pid",
                "--mount-proc",
                "--mount",
                "--propagation=slave",
                "--net",
                "/bin/sh",
                str(self.directory / "init.sh"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only
        )
        log.close()  # the child has its own copy
        self._wait((self.directory / "run" / "ready").exists, "its namespaces")
        self._spawn(
            "dbus",
            ["dbus-daemon", f"--config-file={self.directory / 'bus.conf'}", "--nofork"],
        )
        self._wait((self.directory / "bus").exists, "its system bus")
        self._spawn("logind", [sys.executable, "-m", "tests.nodes.logind", self.bus_address])
        self._wait(lambda: self._name_owned("org.freedesktop.login1"), "logind on its bus")
        self._spawn("containerd", ["containerd", f"--config={self.directory / 'containerd.toml'}"])
        self._wait(self._containerd_up, "containerd")
        # Every boot: the kubelet's image garbage collection may have removed them.
        for archive in self.images:
            self.import_image(archive)
        self._spawn(
            "relay",
            [
                "socat",
                f"TCP-LISTEN:{API_PORT},fork,reuseaddr",
                f"UNIX-CONNECT:{self.api_socket}",
            ],
        )
        self._spawn("kubelet", self._kubelet_args())

    def announce_shutdown(self) -> None:
        """Ask logind to power off, as ACPI does for a preempted VM: the kubelet hears
        ``PrepareForShutdown(true)`` and starts ending its pods."""
        if self._delay_inhibited() != "shutdown":
            raise ClusterError(f"node {self.name}: the kubelet holds no shutdown lock")
        self._dbus_send(
            "--dest=org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager.PowerOff",
            "boolean:false",
        )

    def power_off(self, timeout: float = 120.0) -> None:
        """Complete an announced shutdown: once the kubelet has released its lock (or
        logind's delay ran out), the power goes."""
        self._wait(lambda: self._delay_inhibited() == "", "the kubelet's shutdown", timeout)
        self.kill()

    def kill(self) -> None:
        """Pull the plug: every process of the node dies at once (a preempted VM)."""
        if self._init is not None and self._init.poll() is None:
            self._init.send_signal(signal.SIGKILL)
            self._init.wait()
        self._init = None
        for proc in self._procs:
            # nsenter exits once its child in the namespace is gone.
            try:
                proc.popen.wait(15)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        self._procs.clear()

    def stop(self) -> None:
        """Power off without grace and remove the node's cgroups; idempotent."""
        self.kill()
        self._remove_cgroups()

    # ------------------------------------------------------------------ inside

    def _prepare(self) -> None:
        d = self.directory
        for sub in ("run", "log", "etc-systemd", "sysctl", "manifests", "cni", "kubelet"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "run" / "ready").unlink(missing_ok=True)
        for stale in (d / "bus", self.containerd_socket):
            stale.unlink(missing_ok=True)
        self._make_cgroups()
        tunables = []
        for path in KERNEL_TUNABLES:
            shadow = d / "sysctl" / path.replace("/", ".")
            if not shadow.exists():
                shadow.write_text(Path("/proc/sys", path).read_text())
            tunables.append(f"mount --bind {shadow} /proc/sys/{path}")
        (d / "init.sh").write_text(
            "set -eu\n"
            "mount -t tmpfs -o mode=755 tmpfs /run\n"
            f"mount --bind {d / 'log'} /var/log\n"
            f"mount --bind {d / 'etc-systemd'} /etc/systemd\n"
            + "".join(line + "\n" for line in tunables)
            + "ip link set lo up\n"
            "ip link add name cni0 type bridge\n"
            f"ip addr add {self.address}/24 dev cni0\n"
            "ip link set cni0 up\n"
            "ip route add default dev cni0\n"
            # The `kubernetes` Service, as kube-proxy would route it: pods reach the API
            # server's relay on the node (in-cluster configuration, unchanged).
            f"iptables -t nat -A PREROUTING -d {SERVICE_IP} -p tcp --dport 443"
            f" -j DNAT --to-destination {self.address}:{API_PORT}\n"
            f"iptables -t nat -A OUTPUT -d {SERVICE_IP} -p tcp --dport 443"
            f" -j DNAT --to-destination {self.address}:{API_PORT}\n"
            f"touch {d / 'run' / 'ready'}\n"
            f"exec {self.binaries / 'pause'}\n"
        )
        (d / "bus.conf").write_text(
            "<!DOCTYPE busconfig PUBLIC '-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN'"
            " 'http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd'>\n"
            "<busconfig><type>system</type>"
            f"<listen>unix:path={d / 'bus'}</listen><auth>EXTERNAL</auth>"
            "<policy context='default'><allow user='*'/><allow own='*'/>"
            "<allow send_type='method_call'/><allow send_type='signal'/>"
            "<allow send_requested_reply='true' send_type='method_return'/>"
            "<allow send_requested_reply='true' send_type='error'/>"
            "<allow receive_type='method_call'/><allow receive_type='method_return'/>"
            "<allow receive_type='error'/><allow receive_type='signal'/>"
            "</policy></busconfig>\n"
        )
        (d / "containerd.toml").write_text(
            "version = 2\n"
            f'root = "{d / "containerd"}"\n'
            'state = "/run/containerd"\n'
            "[grpc]\n"
            f'  address = "{self.containerd_socket}"\n'
            '[plugins."io.containerd.grpc.v1.cri"]\n'
            f'  sandbox_image = "{self.pause_ref}"\n'
            # This VM refuses a negative oom_score_adj even to root: without this, runc
            # fails with "can't get final child's PID from pipe".
            "  restrict_oom_score_adj = true\n"
            '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
            '  snapshotter = "overlayfs"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
            '  runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.grpc.v1.cri".cni]\n'
            f'  bin_dir = "{CNI_BIN}"\n'
            f'  conf_dir = "{d / "cni"}"\n'
        )
        (d / "cni" / "10-bridge.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "node",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [
                                    [
                                        {
                                            "subnet": f"10.250.{self.index}.0/24",
                                            "rangeStart": f"10.250.{self.index}.10",
                                            "gateway": self.address,
                                        }
                                    ]
                                ],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(d / "cni-ipam"),
                            },
                        },
                        {"type": "loopback"},
                    ],
                }
            )
        )
        flavour = _flavour(self.version, self.containerd_socket)
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "readOnlyPort": STATS_PORT,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_root}",
            "staticPodPath": str(d / "manifests"),
            "volumePluginDir": str(d / "volume-plugins"),
            "resolvConf": "",
            "shutdownGracePeriod": f"{self.shutdown_grace_s}s",
            "shutdownGracePeriodCriticalPods": f"{self.shutdown_grace_critical_s}s",
            "evictionHard": self.eviction_hard,
            # An emptyDir over its sizeLimit is seen at the next volume stats, 1m apart
            # by default: the scenarios should not wait a minute for it.
            "volumeStatsAggPeriod": "5s",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "systemReserved": self.system_reserved or None,
            **flavour.config,
        }
        config = {key: value for key, value in config.items() if value is not None}
        (d / "kubelet.json").write_text(json.dumps(config, indent=1))

    def _kubelet_args(self) -> list[str]:
        labels = ",".join(f"{key}={value}" for key, value in sorted(self.labels.items()))
        return [
            str(self.binaries / "kubelet"),
            f"--config={self.directory / 'kubelet.json'}",
            f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={self.directory / 'kubelet'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.address}",
            *([f"--node-labels={labels}"] if labels else []),
            *([f"--register-with-taints={','.join(self.taints)}"] if self.taints else []),
            "--v=2",
            *_flavour(self.version, self.containerd_socket).flags,
        ]

    def _cgroup_dirs(self) -> list[Path]:
        return [
            hierarchy / self.cgroup_root
            for hierarchy in sorted(CGROUP_FS.iterdir())
            if (hierarchy / "cgroup.procs").exists()
        ]

    def _make_cgroups(self) -> None:
        for path in self._cgroup_dirs():
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (path / knob).exists() and not (path / knob).read_text().strip():
                    (path / knob).write_text((path.parent / knob).read_text())

    def _remove_cgroups(self) -> None:
        for top in self._cgroup_dirs():
            if not top.exists():
                continue
            # Deepest first: a cgroup goes only once its children have.
            for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if path.is_dir():
                    _rmdir_when_empty(path)
            _rmdir_when_empty(top)

    # ------------------------------------------------------------------ helpers

    def _log(self, name: str) -> IO[bytes]:
        return (self.directory / f"{name}.{self.boots}.log").open("ab")

    def log_path(self, name: str) -> Path:
        return self.directory / f"{name}.{self.boots}.log"

    def _spawn(self, name: str, args: list[str]) -> None:
        assert self._init is not None
        env = {**os.environ, "PYTHONPATH": str(REPO), "DBUS_SYSTEM_BUS_ADDRESS": self.bus_address}
        log = self._log(name)
        popen = subprocess.Popen(
            ["nsenter", f"--target={self._namespace_pid()}", "--pid", "--mount", "--net", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only
        )
        log.close()  # the child has its own copy
        self._procs.append(_Proc(name, popen))

    def _namespace_pid(self) -> int:
        """The host PID of the namespace's first process (unshare's only child)."""
        assert self._init is not None
        children = Path(f"/proc/{self._init.pid}/task/{self._init.pid}/children").read_text()
        return int(children.split()[0])

    def check(self, what: str) -> None:
        """Raise `ClusterError` when the node or one of its processes is down."""
        if not self.running:
            raise ClusterError(f"node {self.name} is down, waiting for {what}:\n{self.tail()}")
        for proc in self._procs:
            if proc.popen.poll() is not None:
                raise ClusterError(
                    f"node {self.name}: {proc.name} exited with {proc.popen.returncode} "
                    f"waiting for {what}:\n{self.tail(proc.name)}"
                )

    def _wait(self, ready: Callable[[], bool], what: str, timeout: float = BOOT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check(what)
            if ready():
                return
            time.sleep(0.1)
        raise ClusterError(f"node {self.name}: no {what} after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, name: str = "init", lines: int = 30) -> str:
        path = self.log_path(name)
        text = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(text[-lines:])

    def import_image(self, archive: Path) -> None:
        """Import an image archive into the node's containerd; it stays across boots."""
        self.ctr("images", "import", "--no-unpack", str(archive))

    def run(self, *args: str, timeout: float = 30.0) -> str:
        """Run a command in the node's namespaces (its mounts: a pod's volumes are
        mounted there only); its output, or `ClusterError`."""
        done = subprocess.run(
            ["nsenter", f"--target={self._namespace_pid()}", "--mount", "--pid", "--net", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterError(f"node {self.name}: {' '.join(args)}: {done.stderr.strip()[-300:]}")
        return done.stdout

    def fetch(self, url: str, timeout: float = 10.0) -> str:
        """GET ``url`` from inside the node's network namespace (a pod's address, the
        kubelet's ports): the answer's body, or `ClusterError`."""
        script = (
            "import sys, urllib.request; "
            f"sys.stdout.write(urllib.request.urlopen({url!r}, timeout={timeout}).read().decode())"
        )
        done = subprocess.run(
            ["nsenter", f"--target={self._namespace_pid()}", "--net", sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout + 10,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterError(f"node {self.name}: GET {url}: {done.stderr.strip()[-300:]}")
        return done.stdout

    def _dbus_send(self, *args: str) -> str:
        return _output(["dbus-send", f"--bus={self.bus_address}", "--print-reply", *args], 10)

    def _name_owned(self, name: str) -> bool:
        reply = self._dbus_send(
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
            f"string:{name}",
        )
        return "boolean true" in reply

    def _delay_inhibited(self) -> str:
        reply = self._dbus_send(
            "--dest=org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.DBus.Properties.Get",
            "string:org.freedesktop.login1.Manager",
            "string:DelayInhibited",
        )
        return reply.rsplit('"', 2)[-2] if reply.count('"') >= 2 else reply

    def ctr(self, *args: str) -> str:
        return _output(
            ["ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io", *args], 120
        )

    def _containerd_up(self) -> bool:
        if not self.containerd_socket.exists():
            return False
        try:
            self.ctr("version")
        except subprocess.CalledProcessError:
            return False
        return True


def _rmdir_when_empty(path: Path, timeout: float = 15.0) -> None:
    # A cgroup of processes that were just killed empties a moment later.
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _output(argv: list[str], timeout: float) -> str:
    """What a command printed; an error if it failed or outlived ``timeout`` seconds."""
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=timeout).stdout
