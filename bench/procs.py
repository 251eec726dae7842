"""Starting and stopping the processes the benchmark measures, and talking to them.

Owns every child process the benchmark starts: each is started through `Child`, used
as a context manager, and stopped on the way out whatever happened (SIGTERM, then
SIGKILL after a grace period). It also reaps the child itself with `os.wait4`, which
hands back the kernel's resource usage for that one process (CPU seconds and peak
RSS), so the figures are the child's own and not the harness's. Traffic only ever goes
to 127.0.0.1; this module must never talk to any other address.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import psutil

LOOPBACK: Final = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate` until it holds or `timeout` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@dataclass(frozen=True, slots=True)
class Usage:
    """What the kernel counted for one finished process."""

    cpu_seconds: float
    max_rss_bytes: int
    returncode: int


class Child:
    """One child process with its output in a log file; stopped on exit, always."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        stop_timeout: float = 15.0,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.stop_timeout = stop_timeout
        self.stop_signal = stop_signal
        self.usage: Usage | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self.usage is None and self._proc.poll() is None

    def __enter__(self) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(
        self,
        ready: Callable[[], bool],
        *,
        timeout: float,
        what: str,
        failure: str = "did not become ready",
    ) -> None:
        """Start the process and wait until `ready` holds.

        Raises, with the end of the child's output, if the process exits first or
        `ready` does not hold within `timeout` seconds; the child is stopped then.
        """
        self.__enter__()

        def up() -> bool:
            if not self.alive():
                raise RuntimeError(f"{what} exited:\n{self.tail()}")
            return ready()

        with self.stopped_on_error():
            if not wait_for(up, timeout=timeout):
                raise RuntimeError(f"{what} {failure}:\n{self.tail()}")

    @contextlib.contextmanager
    def stopped_on_error(self) -> Iterator[None]:
        """Stop the process if the block raises: a half-started child must not outlive it."""
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def stop(self) -> Usage | None:
        """SIGTERM (or the configured signal), wait, SIGKILL if it will not go.

        Returns the kernel's usage figures for the process.
        """
        proc = self._proc
        if proc is None or self.usage is not None:
            return self.usage
        try:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(self.stop_signal)
                if not self._reap(self.stop_timeout):
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    self._reap(10.0)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
        return self.usage

    def _reap(self, timeout: float) -> bool:
        # ru_maxrss is kept for completeness only: it includes the harness's memory the
        # child inherited before exec; `Sampler.high_water` is the child's own peak.
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:
                # Someone reaped it already (Popen.poll); usage is then unknown.
                self.usage = Usage(math.nan, 0, proc.returncode or 0)
                return True
            if pid == proc.pid:
                code = os.waitstatus_to_exitcode(status)
                proc.returncode = code
                self.usage = Usage(
                    cpu_seconds=rusage.ru_utime + rusage.ru_stime,
                    # Linux reports ru_maxrss in KiB.
                    max_rss_bytes=rusage.ru_maxrss * 1024,
                    returncode=code,
                )
                return True
            time.sleep(0.05)
        return False

    def tail(self, lines: int = 20) -> str:
        """The end of the child's output, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def high_water_rss(pid: int) -> int:
    """A process's peak resident set since its exec (`VmHWM`), in bytes; 0 if gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(errors="replace")
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class Sampler:
    """Samples one process's RSS and CPU time in a thread, at a fixed interval.

    Samples carry `time.time()`, the same wall clock the simulator stamps its records
    with on this machine, so memory can be lined up with scenario phases.
    """

    def __init__(self, pid: int, *, interval: float = 0.1) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.rss: list[tuple[float, float]] = []
        self.high_water: float = 0.0  # VmHWM: peak RSS since exec, as the kernel saw it
        self.cpu: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{pid}", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def sample(self) -> tuple[float, float] | None:
        """Take one sample now: (rss bytes, cpu seconds), or None once the process is gone."""
        try:
            with self.process.oneshot():
                rss = float(self.process.memory_info().rss)
                times = self.process.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return None
        now = time.time()
        self.high_water = max(self.high_water, float(high_water_rss(self.process.pid)))
        cpu = float(times.user + times.system)
        self.rss.append((now, rss))
        self.cpu.append((now, cpu))
        return rss, cpu

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.sample() is None:
                return
            self._stop.wait(self.interval)

    def cpu_at(self, when: float) -> float:
        """CPU seconds at the last sample taken at or before `when`."""
        value = 0.0
        for stamp, cpu in self.cpu:
            if stamp > when:
                break
            value = cpu
        return value


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

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
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

    def json(self, method: str, path: str, body: Any = None) -> Any:
        code, payload = self.request(method, path, body)
        if code >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {code}: {payload[:300]!r}")
        return json.loads(payload) if payload else None

    def ok(self, path: str) -> bool:
        try:
            code, _ = self.request("GET", path)
        except OSError:
            return False
        return code == 200


def stream_lines(path: Path) -> Iterator[str]:
    """Lines of a log file written so far."""
    try:
        with path.open(errors="replace") as handle:
            yield from handle
    except OSError:
        return
