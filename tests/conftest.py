"""Shared fixtures: a running simulated API server and a kubeconfig pointing at it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

import pytest

from kubesim import Simulator


def _current_loop(policy: asyncio.AbstractEventLoopPolicy) -> asyncio.AbstractEventLoop | None:
    # Peek without creating one: the policy's get_event_loop() would make a new loop.
    loop = getattr(getattr(policy, "_local", None), "_loop", None)
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
    """Close the event loop looptime's hook creates for a sync test, instead of leaking it.

    Otherwise the next async test fails on an "unclosed event loop" ResourceWarning
    (``filterwarnings = error``).
    """
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        return (yield)
    policy = asyncio.get_event_loop_policy()
    before = _current_loop(policy)
    try:
        return (yield)
    finally:
        after = _current_loop(policy)
        if after is not None and after is not before and not after.is_running():
            after.close()
            policy.set_event_loop(before)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A started :class:`Simulator` on a free port (fast bookmarks for tests)."""
    async with Simulator(bookmark_interval=0.2) as simulator:
        yield simulator


@pytest.fixture
def kubeconfig(sim: Simulator, tmp_path: Path) -> Path:
    """An admin kubeconfig for ``sim`` (context ``sim``)."""
    return sim.write_kubeconfig(tmp_path / "kubeconfig")
