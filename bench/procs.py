"""Watching the processes the benchmark measures, and talking to them over HTTP.

`cpu_seconds` and `high_water_rss` read one process's CPU time and peak memory from the
kernel, so every figure is that process's own, never the harness's; `Http` is a tiny JSON client
with one keep-alive connection per thread; `log` prints the harness's progress lines.
Starting and stopping processes is `tests.helpers.Child`'s job; `Served` stops one with
its client. Traffic only ever goes
to 127.0.0.1; this module must never talk to any other address.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
from tests.helpers import LOOPBACK, Child


def log(message: str) -> None:
    """One progress line of the harness, stamped with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def high_water_rss(pid: int) -> int:
    """A process's peak resident set since its exec (`VmHWM`), in bytes; 0 if gone.

    The kernel's own high-water mark: no sampling interval can miss a peak.
    """
    try:
        text = Path(f"/proc/{pid}/status").read_text(errors="replace")
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time so far, from the kernel's accounting."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


class Http:
    """A tiny JSON client for 127.0.0.1 with a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        context: ssl.SSLContext | None = None,
    ) -> None:
        if not base_url.startswith((f"http://{LOOPBACK}:", f"https://{LOOPBACK}:")):
            raise ValueError(f"the benchmark only talks to {LOOPBACK}, not {base_url}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.context = context
        self._local = threading.local()
        # Every connection made by any thread, so that `close` reaches those of threads
        # that have ended (a thread pool's) too.
        self._opened: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        # One keep-alive connection per thread: thousands of small requests in a storm.
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            parsed = urllib.parse.urlsplit(self.base_url)
            host, port = parsed.hostname or LOOPBACK, parsed.port
            if parsed.scheme == "https":
                conn = http.client.HTTPSConnection(
                    host, port, timeout=self.timeout, context=self.context
                )
            else:
                conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        """Close every keep-alive connection; a later request opens a new one."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._local = threading.local()

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                return int(response.status), response.read()
            except (http.client.HTTPException, ConnectionError):
                # A keep-alive connection the server closed: reconnect once.
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def json(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        code, payload = self.request(method, path, body, content_type)
        if code >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {code}: {payload[:300]!r}")
        return json.loads(payload) if payload else None

    def items(self, path: str, *, limit: int = 5000) -> Iterator[dict[str, Any]]:
        """Every item of a Kubernetes LIST at ``path``, fetched page by page."""
        token = ""
        while True:
            query = urllib.parse.urlencode(
                {"limit": limit, **({"continue": token} if token else {})}
            )
            page = self.json("GET", f"{path}?{query}")
            yield from page["items"]
            token = page["metadata"].get("continue") or ""
            if not token:
                return

    def ok(self, path: str) -> bool:
        try:
            code, _ = self.request("GET", path)
        except OSError:
            return False
        return code == 200


class Served:
    """A server process (`tests.helpers.Child`) and the client talking to it: leaving
    the `with` block stops the one and closes the other."""

    child: Child
    http: Http

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.child.stop()
        self.http.close()
