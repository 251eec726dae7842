"""What the simulator's tests share: a pod manifest, and waiting for a condition."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio


def pod(name: str, namespace: str = "ns", phase: str | None = None) -> dict[str, Any]:
    """A minimal pod in ``phase`` (None: the store's default, Pending)."""
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase} if phase else {},
    }


async def eventually(
    predicate: Callable[[], object],
    timeout: float = 10.0,  # noqa: ASYNC109 - bounding the wait is this function's job
    message: str = "",
) -> None:
    """Wait until ``predicate()`` (sync or async) is truthy; fail after ``timeout`` s."""
    with anyio.move_on_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            await anyio.sleep(0.01)
    raise AssertionError(f"gave up after {timeout} s waiting for {message or predicate}")
