"""Waiting on conditions in tests, instead of sleeping, and ending processes.

This module owns :func:`eventually`, the one way tests wait for something another
task or process makes true. It never sleeps longer than the polling interval and
never hides a timeout: it fails with a message saying what did not happen. It also
owns :func:`stop_processes`, how tests end the ``zombied`` processes they started.
"""

from __future__ import annotations

import inspect
import signal
from collections.abc import Awaitable, Callable, Iterable

import anyio
from anyio.abc import Process

Predicate = Callable[[], object] | Callable[[], Awaitable[object]]


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


async def stop_processes(processes: Iterable[Process], *, grace: float = 10.0) -> None:
    """SIGTERM each process still running, give each ``grace`` seconds, kill the rest.

    Shielded, as it runs in the ``finally`` of tests that may be cancelled; every
    process is closed afterwards.
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
