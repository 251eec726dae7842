"""A simulated Kubernetes API server for tests, benchmarks and demos.

This package owns :class:`Simulator`: an in-process, single-event-loop stand-in for
kube-apiserver serving pods, nodes, namespaces, events and leases over real HTTP,
with the semantics zombied depends on (resourceVersions, watch resume and 410,
bookmarks, selectors, delete preconditions, graceful deletion, RBAC, fault
injection). It is the only public surface of ``kubesim``; it never imports the
daemon's modules, and the daemon never imports it.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
import shutil
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import yaml
from aiohttp import web

from kubesim.faults import Faults
from kubesim.listener import Listener
from kubesim.rbac import Authorizer, PolicyRule
from kubesim.requestlog import RequestLog, RequestRecord
from kubesim.server import ApiServer
from kubesim.store import DeletedRecord, Store
from kubesim.versions import VERSIONS, Version, imitated

if TYPE_CHECKING:
    from kubesim.scenario import Cluster

__all__ = [
    "VERSIONS",
    "DeletedRecord",
    "PolicyRule",
    "RequestLog",
    "RequestRecord",
    "Simulator",
    "Store",
    "Version",
]


class Simulator:
    """A running simulated API server; use as ``async with Simulator() as sim``.

    ``imitate`` picks the kube-apiserver version whose answers it gives where versions
    differ (:mod:`kubesim.versions`): ``"current"`` (v1.37.2) or ``"1.20"`` (v1.20.2).

    Leaves no task, timer or socket behind on exit, not even a connection accepted
    while it was stopping (:mod:`kubesim.listener`). It has no task group of its
    own (a fixture may enter and leave it from different tasks): graceful-deletion
    timers are event-loop timers cancelled on exit, and everything else runs in
    aiohttp's per-connection handlers.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_window: int = 10_000,
        bookmark_interval: float = 1.0,
        rbac_files: Iterable[str | os.PathLike[str]] = (),
        seed: int = 0,
        tls: bool = False,
        imitate: str = "current",
    ) -> None:
        self.version = imitated(imitate)
        self.host = host
        self.tls = tls
        self._ssl: ssl.SSLContext | None = None
        self.ca_pem: bytes | None = None
        self.port = port
        self.seed = seed
        self.store = Store(history_window=history_window, seed=seed)
        self.faults = Faults(seed)
        self.requests = RequestLog()
        self.authorizer = Authorizer()
        self.admin_token: str = self.authorizer.admin_token
        self._rbac_files = tuple(rbac_files)
        self._cluster: Cluster | None = None
        self._runner: web.AppRunner | None = None
        self._listener: Listener | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        from kubesim.control import ControlApi  # noqa: PLC0415 - control needs the class

        self.server = ApiServer(
            self.store,
            self.authorizer,
            self.faults,
            self.requests,
            bookmark_interval=bookmark_interval,
            control=ControlApi(self).handle,
            server_address=lambda: f"{self.host}:{self.port}",
            version=self.version,
        )

    # -------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        for path in self._rbac_files:
            self.add_rbac_file(path)
        self.store.on_graceful = self._schedule_finish
        self.store.on_deleted = self._deleted
        if self.tls:
            self._ssl, self.ca_pem = await _self_signed(self.host)
        runner = web.AppRunner(
            self.server.app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=1.0,
            handler_cancellation=True,
        )
        await runner.setup()
        self._runner = runner
        assert runner.server is not None
        self._listener = Listener(runner.server, ssl_context=self._ssl)
        try:
            self.port = await self._listener.start(self.host, self.port)
        except BaseException:
            await runner.cleanup()
            self._runner = None
            self._listener = None
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.store.on_graceful = None
        self.store.on_deleted = None
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self.server.cut_watches()
        if self._listener is not None:
            # Refuse new connections before the HTTP handlers shut down, and close
            # every connection accepted (even one accepted during the shutdown) after.
            self._listener.stop_accepting()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.aclose()
        self._runner = None
        self._listener = None

    async def restart(self, down_for: float = 0.0) -> None:
        """Cut every open connection, like an apiserver restart; state survives.

        With ``down_for`` the port refuses connections for that many seconds.
        """
        listener = self._listener
        assert listener is not None
        self.server.cut_watches()
        if down_for > 0:
            listener.stop_accepting()
        listener.close_connections()
        if down_for > 0:
            await asyncio.sleep(down_for)
            await listener.start(self.host, self.port)

    # ---------------------------------------------------------------- access

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def deleted(self) -> list[DeletedRecord]:
        return self.store.deleted

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            import random  # noqa: PLC0415

            from kubesim.scenario import Cluster  # noqa: PLC0415

            self._cluster = Cluster(self.store, random.Random(self.seed))
        return self._cluster

    def compact(self) -> None:
        """Drop all watch history up to now; older resourceVersions answer 410."""
        self.store.compact()

    def add_token(self, user: str, rules: Iterable[PolicyRule]) -> str:
        return self.authorizer.add_user(user, rules)

    def add_rbac_file(self, path: str | os.PathLike[str], user: str = "restricted") -> str:
        return self.authorizer.add_rbac_file(Path(path), user)

    def kubeconfig(
        self, *, token: str | None = None, context: str = "sim", contexts: Mapping[str, str] = {}
    ) -> dict[str, Any]:
        """A kubeconfig document; ``contexts`` adds more contexts (name -> token)."""
        all_contexts = {context: token or self.admin_token, **contexts}
        cluster: dict[str, str] = {"server": self.url}
        if self.ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "sim", "cluster": cluster}],
            "users": [{"name": name, "user": {"token": tok}} for name, tok in all_contexts.items()],
            "contexts": [
                {"name": name, "context": {"cluster": "sim", "user": name, "namespace": "default"}}
                for name in all_contexts
            ],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        *,
        token: str | None = None,
        context: str = "sim",
        contexts: Mapping[str, str] = {},
    ) -> Path:
        """Write a kubeconfig for this server atomically; admin unless ``token`` is given."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(self.kubeconfig(token=token, context=context, contexts=contexts))
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            Path(tmp).chmod(0o600)
            Path(tmp).replace(target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    # --------------------------------------------------------------- timers

    def _deleted(self, resource: str, namespace: str, name: str) -> None:
        # The StatefulSet controller recreates a pod's name once the old pod is gone.
        if resource == "pods" and self._cluster is not None:
            self._cluster.pod_deleted(namespace, name)

    def _schedule_finish(self, namespace: str, name: str, uid: str, delay: float) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            self.store.finish_graceful(namespace, name, uid)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)


async def _self_signed(host: str) -> tuple[ssl.SSLContext, bytes]:
    """A throw-away certificate for ``host`` (kubectl only sends tokens over TLS)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("tls=True needs the openssl command to make a certificate")
    names = ["IP:127.0.0.1", "DNS:localhost"]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        names.append(f"DNS:{host}")
    else:
        if host not in ("127.0.0.1", "0.0.0.0", "::"):  # noqa: S104 - a name, not a bind
            names.append(f"IP:{host}")
    with tempfile.TemporaryDirectory(prefix="zombied-sim-tls-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        await anyio.run_process(
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
                str(key),
                "-out",
                str(cert),
                "-days",
                "30",
                "-subj",
                "/CN=zombied-sim",
                "-addext",
                "subjectAltName=" + ",".join(names),
            ]
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        return context, cert.read_bytes()
