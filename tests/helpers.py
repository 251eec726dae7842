"""Harness utilities shared by the test suite and the benchmark.

A free loopback port, waiting on a condition instead of sleeping (:func:`eventually`
in async code, :func:`wait_for` elsewhere), child processes that are always stopped
(SIGTERM, then SIGKILL), and throw-away TLS certificates made with ``openssl``. It
knows nothing of zombied or of the simulator.
"""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
import json
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

import anyio
from anyio.abc import Process

LOOPBACK: Final = "127.0.0.1"

Predicate = Callable[[], object] | Callable[[], Awaitable[object]]


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# -- waiting -----------------------------------------------------------------------------


async def eventually(
    predicate: Predicate,
    timeout: float = 10.0,  # noqa: ASYNC109 - bounding the wait is the helper's job
    interval: float = 0.01,
    message: str | None = None,
) -> object:
    """Poll ``predicate`` (sync or async) until it returns a truthy value; return it.
    After ``timeout`` seconds, AssertionError with the last value or exception seen."""
    last: object = None
    last_exc: BaseException | None = None
    with anyio.move_on_after(timeout):
        while True:
            try:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
            except AssertionError as exc:
                last_exc = exc
            else:
                last_exc = None
                last = value
                if value:
                    return value
            await anyio.sleep(interval)
    what = message or getattr(predicate, "__qualname__", repr(predicate))
    detail = f"last error: {last_exc!r}" if last_exc is not None else f"last value: {last!r}"
    raise AssertionError(f"timed out after {timeout} s waiting for {what} ({detail})")


def wait_for(predicate: Callable[[], object], *, timeout: float, interval: float = 0.05) -> bool:
    """Whether ``predicate`` held within ``timeout`` seconds; an OSError or ValueError
    from it (a server not listening yet, half-written JSON) counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            if predicate():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# -- processes ---------------------------------------------------------------------------


def json_lines(raw: bytes | str) -> list[dict[str, Any]]:
    """The JSON objects among the lines of a process's output (structured logs)."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class Child:
    """One child process, in its own session, with its output in a log file; stopped
    on exit, always. A context manager, or :meth:`start`, which also waits until ready."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        stop_timeout: float = 15.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
        ready: Callable[[], object],
        *,
        timeout: float,
        what: str | None = None,
        failure: str = "did not become ready",
    ) -> Child:
        """Start the process and wait until ``ready`` holds; stop it and raise, with the
        end of its output, if it exits first or is not ready within ``timeout`` seconds."""
        what = what or self.name
        self.__enter__()

        def up() -> object:
            if not self.alive():
                raise RuntimeError(f"{what} exited with {self.returncode}:\n{self.tail()}")
            return ready()

        with self.stopped_on_error():
            if not wait_for(up, timeout=timeout):
                raise RuntimeError(f"{what} {failure} within {timeout:g} s:\n{self.tail()}")
        return self

    @contextlib.contextmanager
    def stopped_on_error(self) -> Iterator[None]:
        """Stop the process if the block raises: a half-started child must not outlive it."""
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def stop(self) -> int | None:
        """SIGTERM, wait ``stop_timeout`` seconds, then SIGKILL; idempotent. The exit code."""
        proc = self._proc
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
        return proc.returncode

    def tail(self, lines: int = 20) -> str:
        """The end of the child's output, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


async def stop_processes(processes: Iterable[Process], *, grace: float = 10.0) -> None:
    """SIGTERM each process still running, give each ``grace`` seconds, kill the rest;
    shielded (it runs in the ``finally`` of tests that may be cancelled)."""
    processes = list(processes)
    with anyio.CancelScope(shield=True):
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            with anyio.move_on_after(grace):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()


# -- certificates ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Certificate:
    """A PEM certificate and its unencrypted private key, as files."""

    cert: Path
    key: Path

    @property
    def pem(self) -> bytes:
        """The certificate (what a client trusts, for a self-signed one)."""
        return self.cert.read_bytes()


def _alt_name(host: str) -> str:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"


def self_signed(
    directory: Path,
    name: str,
    *,
    common_name: str,
    hosts: Sequence[str] = (LOOPBACK, "localhost"),
    days: int = 2,
) -> Certificate:
    """``<name>.crt`` and ``<name>.key`` in ``directory``: a self-signed P-256 CA
    certificate serving ``hosts`` (IP addresses or DNS names)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make a certificate")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    alt_names = ",".join(_alt_name(host) for host in hosts)
    extensions = ["-addext", "basicConstraints=critical,CA:TRUE"]
    extensions += ["-addext", f"subjectAltName={alt_names}"]
    subject = ["-subj", f"/CN={common_name}", "-days", str(days)]
    command = [openssl, "req", "-x509", *new_key, "-keyout", str(key), "-out", str(cert)]
    subprocess.run([*command, *subject, *extensions], check=True, capture_output=True)
    return Certificate(cert, key)
