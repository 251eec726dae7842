"""A real kube-apiserver with etcd, started for a test session: v1.20.2 or v1.37.2.

The suites run on two releases: v1.20.2, the first with graceful node shutdown (and
Debian's etcd 3.4), and v1.37.2, a current one (with etcd 3.6). :data:`RELEASES` says
how each is started: the flags one release takes and the other refuses.

This module owns those two processes: free loopback ports, a temporary directory, a
self-signed serving certificate, the static token file (an admin and any extra admins
asked for in ``system:masters``, and a pool of users without any permission), the
service-account key pair, the wait for ``/readyz``, kubeconfigs, and a stop that leaves
nothing running — also when the test process dies (the children get SIGKILL with their
parent). It never builds the binaries (``tests/realserver/build.sh`` does that, into
``~/.cache/zombied/real-apiserver-<version>``, or under ``ZOMBIED_REAL_APISERVER_DIR``)
and never talks to any other cluster.

There is no controller-manager, scheduler or kubelet: deleted namespaces stay
Terminating, nothing is garbage-collected, and a pod bound to a node that is not
terminal stays Terminating after a graceful delete.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ADMIN = "admin"
#: Users with no permission at all (RBAC tests bind roles to them), handed out once each.
UNPRIVILEGED = tuple(f"user-{i}" for i in range(64))
START_TIMEOUT = 90.0
STOP_TIMEOUT = 15.0
_PR_SET_PDEATHSIG = 1
#: Writes are audited with their request body (DeleteOptions: dryRun, preconditions),
#: reads and watches by their metadata only.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["delete", "deletecollection", "create", "update", "patch"]
- level: Metadata
"""


@dataclass(frozen=True)
class Release:
    """A kube-apiserver release the suites run on, and what only it is started with."""

    version: str
    #: Flags this release needs or takes that the others refuse.
    apiserver_flags: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """How the test report names this server: ``kube-apiserver-v1.20.2``."""
        return f"kube-apiserver-{self.version}"


#: The releases every real-server test runs on, oldest first.
RELEASES = {
    release.version: release
    for release in (
        # Gone from later releases: the insecure port (1.24) and klog's flags (1.26).
        Release("v1.20.2", apiserver_flags=("--insecure-port=0", "--logtostderr=true")),
        Release("v1.37.2"),
    )
}
#: The release a caller gets without naming one (the benchmark's).
OLDEST = next(iter(RELEASES))


class ClusterError(RuntimeError):
    """The cluster could not be started; the message says which process and why."""


def binary_dir(version: str = OLDEST) -> Path:
    """Where ``make real-apiserver`` puts ``bin/kube-apiserver`` and ``bin/etcd``."""
    parent = os.environ.get("ZOMBIED_REAL_APISERVER_DIR")
    if not parent:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        parent = str(Path(cache) / "zombied")
    return Path(parent) / f"real-apiserver-{version}"


def missing_binaries(version: str = OLDEST) -> str | None:
    """Why the cluster of ``version`` cannot start here (None: it can)."""
    bin_dir = binary_dir(version) / "bin"
    for name in ("kube-apiserver", "etcd"):
        if not os.access(bin_dir / name, os.X_OK):
            return f"{bin_dir / name} is not built (run `make real-apiserver`)"
    if shutil.which("openssl") is None:
        return "the openssl command is needed for the serving certificate"
    return None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the test process is killed outright,
    # the kernel kills etcd and the apiserver with it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def tail(self, lines: int = 30) -> str:
        self.log_file.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log_file.close()


@dataclass
class RealCluster:
    """A running kube-apiserver; kubeconfigs and namespaces for tests.

    ``admin_kubeconfig`` may do anything; :meth:`unprivileged_kubeconfig` hands out a
    user nobody has granted anything to (each user once per session, so tests that
    bind roles to their user do not see each other's grants). ``admins`` names more
    users in ``system:masters`` (``kubeconfig(name)``), so that several clients with
    every permission are still told apart by the audit log's username.
    """

    workdir: Path
    admins: tuple[str, ...] = ()
    release: Release = RELEASES[OLDEST]
    url: str = ""
    ca_pem: bytes = b""
    tokens: dict[str, str] = field(default_factory=dict)
    _processes: list[_Process] = field(default_factory=list)
    _handed_out: set[str] = field(default_factory=set)
    _data_dir: Path | None = None

    # ------------------------------------------------------------------ start/stop

    #: The subject alternative names of the serving certificate.
    serving_names: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost")

    @property
    def name(self) -> str:
        return self.release.name

    def start(self) -> None:
        reason = missing_binaries(self.release.version)
        if reason is not None:
            raise ClusterError(reason)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._certificates()
        self._token_file()
        etcd_url = self._start_etcd()
        self._start_apiserver(etcd_url)

    def stop(self) -> None:
        """Stop the apiserver, then etcd; idempotent."""
        while self._processes:
            self._processes.pop().stop()
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def _spawn(self, name: str, args: list[str]) -> _Process:
        log_path = self.workdir / f"{name}.log"
        log_file = log_path.open("wb")
        popen = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            # Own session: a Ctrl-C reaches pytest, which stops these in order.
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
        )
        process = _Process(name, popen, log_path, log_file)
        self._processes.append(process)
        return process

    def _wait(self, process: _Process, probe: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ClusterError(
                    f"{process.name} exited with {process.popen.returncode} before {what}:\n"
                    + process.tail()
                )
            with suppress(OSError, ValueError):
                if probe():
                    return
            time.sleep(0.1)
        raise ClusterError(
            f"{process.name}: no {what} after {START_TIMEOUT:.0f}s:\n" + process.tail()
        )

    def _start_etcd(self) -> str:
        # etcd fsyncs every write: on tmpfs that costs nothing.
        shm = Path("/dev/shm")
        parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir
        self._data_dir = Path(tempfile.mkdtemp(prefix="zombied-etcd-", dir=parent))
        client_port, peer_port = free_port(), free_port()
        client = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(binary_dir(self.release.version) / "bin" / "etcd"),
                "--name=default",
                f"--data-dir={self._data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--logger=zap",
                "--log-outputs=stderr",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(client + "/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")

        self._wait(etcd, healthy, "healthy etcd")
        return client

    def _start_apiserver(self, etcd_url: str) -> None:
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(binary_dir(self.release.version) / "bin" / "kube-apiserver"),
                *self._apiserver_flags(etcd_url, port),
                *self.release.apiserver_flags,
            ],
        )
        self._wait(apiserver, self._ready, "/readyz ok")

    def _apiserver_flags(self, etcd_url: str, port: int) -> list[str]:
        d = self.workdir
        return [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={d / 'certs'}",
            f"--tls-cert-file={d / 'serving.crt'}",
            f"--tls-private-key-file={d / 'serving.key'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            # No controller-manager creates the "default" ServiceAccount.
            "--disable-admission-plugins=ServiceAccount",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            # The real server's request log: who sent which write, what came back.
            f"--audit-policy-file={d / 'audit-policy.yaml'}",
            f"--audit-log-path={d / 'audit.log'}",
            "--profiling=false",
            "--v=0",
        ]

    def _ready(self) -> bool:
        try:
            status, _ = self.request("GET", "/readyz")
        except urllib.error.URLError:
            return False
        return status == 200

    def _certificates(self) -> None:
        d = self.workdir
        openssl = shutil.which("openssl") or "openssl"
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                str(d / "serving.key"),
                "-out",
                str(d / "serving.crt"),
                "-days",
                "30",
                "-subj",
                "/CN=kube-apiserver",
                "-addext",
                "subjectAltName=" + ",".join(self.serving_names),
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [openssl, "genrsa", "-out", str(d / "sa.key"), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            [openssl, "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
            check=True,
            capture_output=True,
        )
        self.ca_pem = (d / "serving.crt").read_bytes()

    def _token_file(self) -> None:
        masters = {ADMIN, *self.admins}
        clash = masters & set(UNPRIVILEGED)
        if clash or len(masters) != 1 + len(self.admins):
            raise ClusterError(f"admin user names must be new and distinct: {self.admins}")
        rows = []
        for user in (ADMIN, *self.admins, *UNPRIVILEGED):
            token = secrets.token_hex(16)
            self.tokens[user] = token
            groups = ',"system:masters"' if user in masters else ""
            rows.append(f"{token},{user},uid-{user}{groups}")
        (self.workdir / "tokens.csv").write_text("\n".join(rows) + "\n")

    # ------------------------------------------------------------------ for tests

    def kubeconfig(self, user: str = ADMIN) -> Path:
        """A kubeconfig (context ``real``) for ``user``, written once."""
        path = self.workdir / f"{user}.kubeconfig"
        if not path.exists():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "real",
                        "cluster": {
                            "server": self.url,
                            "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                        },
                    }
                ],
                "users": [{"name": user, "user": {"token": self.tokens[user]}}],
                "contexts": [{"name": "real", "context": {"cluster": "real", "user": user}}],
                "current-context": "real",
            }
            path.write_text(json.dumps(config, indent=2))
        return path

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig(ADMIN)

    def unprivileged_kubeconfig(self) -> tuple[str, Path]:
        """A user without any permission, not handed out before: (user name, kubeconfig)."""
        for user in UNPRIVILEGED:
            if user not in self._handed_out:
                self._handed_out.add(user)
                return user, self.kubeconfig(user)
        raise ClusterError(f"all {len(UNPRIVILEGED)} unprivileged users are handed out")

    def request(
        self, method: str, path: str, body: Any = None, *, user: str = ADMIN
    ) -> tuple[int, Any]:
        """One JSON request as ``user``: (status, decoded body or text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.tokens[user]}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        try:
            with urllib.request.urlopen(req, timeout=30, context=context) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def audit(self, **match: str) -> list[dict[str, Any]]:
        """Completed requests from the audit log whose fields equal ``match``.

        Keys are ``verb``, ``user`` (the username), ``namespace``, ``resource``,
        ``name``; each record is the audit event (``responseStatus.code``,
        ``requestObject``, ``requestURI``...). The log is written as requests finish:
        wait for what you expect with ``eventually``.
        """
        found: list[dict[str, Any]] = []
        path = self.workdir / "audit.log"
        if not path.exists():
            return found
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            fields = {
                "verb": event.get("verb"),
                "user": (event.get("user") or {}).get("username"),
                "namespace": ref.get("namespace"),
                "resource": ref.get("resource"),
                "name": ref.get("name"),
            }
            if all(fields.get(key) == value for key, value in match.items()):
                found.append(event)
        return found

    def create_namespace(self, prefix: str = "zr") -> str:
        """A fresh namespace (never deleted: without a controller-manager it would stay
        Terminating anyway, and the cluster lives only for the session)."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        status, body = self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        if status != 201:
            raise ClusterError(f"creating namespace {name}: {status} {body}")
        return name

    def version(self) -> str:
        """The gitVersion the server reports (``?`` when it does not answer)."""
        status, body = self.request("GET", "/version")
        return str(body.get("gitVersion")) if status == 200 and isinstance(body, dict) else "?"


@contextmanager
def running_cluster(workdir: Path, version: str = OLDEST) -> Iterator[RealCluster]:
    """Start a cluster of ``version`` in ``workdir``; stop it on leaving, whatever happened."""
    cluster = RealCluster(workdir, release=RELEASES[version])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
