"""Harness utilities shared by the test suite and the benchmark.

This module owns the few things every harness needs and must get right once: a free
loopback port, waiting on a condition (:func:`eventually` in async code,
:func:`wait_for` in threads and scripts) instead of sleeping, child processes that are
always stopped (:class:`Child` for synchronous harnesses, :func:`stop_processes` for
anyio processes), and throw-away TLS certificates made with the ``openssl`` command.
Waiting never sleeps longer than the polling interval; a stop always escalates from
SIGTERM to SIGKILL; nothing here ever talks to an address other than the loopback.
It knows nothing of zombied or of the simulator.
"""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final

import anyio
from anyio.abc import Process

LOOPBACK: Final = "127.0.0.1"
#: The names a loopback serving certificate is valid for.
LOOPBACK_NAMES: Final = (LOOPBACK, "localhost")

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

    Raises AssertionError naming the predicate (or ``message``) and the last value
    or exception seen when ``timeout`` seconds pass first.
    """
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
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass.

    Returns whether it held. An OSError or ValueError from the predicate (a server not
    listening yet, half-written JSON) counts as "not yet"; anything else propagates.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            if predicate():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# -- processes ---------------------------------------------------------------------------


class Child:
    """One child process with its output in a log file; stopped on exit, always.

    Used as a context manager (or through :meth:`start`, which also waits until the
    process is ready). The child runs in its own session, so a Ctrl-C meant for the
    harness does not reach it before the harness stops it in order.
    """

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
        """Start the process and wait until ``ready`` holds.

        Raises, with the end of the child's output, if the process exits first or
        ``ready`` does not hold within ``timeout`` seconds; the child is stopped then.
        """
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
        """SIGTERM, wait ``stop_timeout`` seconds, SIGKILL if it will not go; idempotent.

        Returns the exit code (None if the process was never started).
        """
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
    """SIGTERM each process still running, give each ``grace`` seconds, kill the rest.

    The anyio counterpart of :meth:`Child.stop`, for tests that run processes in the
    event loop. Shielded, as it runs in the ``finally`` of tests that may be cancelled;
    every process is closed afterwards.
    """
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


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make a certificate")
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True)


def _subject_alt_names(hosts: Iterable[str]) -> str:
    names = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            names.append(f"DNS:{host}")
        else:
            names.append(f"IP:{host}")
    return ",".join(names)


_NEW_KEY: Final = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def self_signed(
    directory: Path,
    name: str,
    *,
    common_name: str,
    hosts: Sequence[str] = LOOPBACK_NAMES,
    days: int = 2,
) -> Certificate:
    """``<name>.crt`` and ``<name>.key`` in ``directory``: a self-signed P-256 certificate.

    It serves ``hosts`` (IP addresses or DNS names; none: a certificate that only
    signs) and is a CA, so :func:`signed_by` can issue certificates with it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    extensions = ["-addext", "basicConstraints=critical,CA:TRUE"]
    if hosts:
        extensions += ["-addext", f"subjectAltName={_subject_alt_names(hosts)}"]
    _openssl(
        "req",
        "-x509",
        *_NEW_KEY,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        str(days),
        "-subj",
        f"/CN={common_name}",
        *extensions,
        cwd=directory,
    )
    return Certificate(directory / f"{name}.crt", directory / f"{name}.key")


def signed_by(
    ca: Certificate,
    directory: Path,
    name: str,
    *,
    common_name: str,
    hosts: Sequence[str] = (),
    days: int = 2,
) -> Certificate:
    """``<name>.crt`` and ``<name>.key`` in ``directory``, issued by ``ca``.

    With ``hosts``, a serving certificate for them; without, a client certificate
    whose common name is the user an API server sees.
    """
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        *_NEW_KEY,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={common_name}",
        cwd=directory,
    )
    extensions = []
    if hosts:
        (directory / f"{name}.ext").write_text(f"subjectAltName={_subject_alt_names(hosts)}\n")
        extensions = ["-extfile", f"{name}.ext"]
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        str(ca.cert.resolve()),
        "-CAkey",
        str(ca.key.resolve()),
        "-CAcreateserial",
        "-out",
        f"{name}.crt",
        "-days",
        str(days),
        *extensions,
        cwd=directory,
    )
    return Certificate(directory / f"{name}.crt", directory / f"{name}.key")
