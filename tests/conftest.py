"""Shared fixtures: a simulated API server and a kubeconfig for it; the real kube-apiservers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from kubesim import Simulator

# The real kube-apiserver fixtures (see tests/realserver/fixtures.py), for any test.
from tests.realserver.fixtures import real_cluster, real_namespace, real_servers, report_header

__all__ = ["real_cluster", "real_namespace", "real_servers"]


@pytest.fixture(scope="session", autouse=True)
def no_implicit_event_loop() -> None:
    """Tell the event loop policy once that "no current event loop" is an answer.

    looptime asks the policy for the current loop before every test, synchronous ones
    included. Until ``set_event_loop`` has been called, the default policy answers by
    creating a loop that nobody closes, and its ResourceWarning fails some later test
    (``filterwarnings = error``). After ``set_event_loop(None)`` it raises RuntimeError
    instead (what Python 3.14 always does), which looptime takes as "no loop here".
    """
    asyncio.get_event_loop_policy().set_event_loop(None)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Put the root logger and structlog back as they were before the test.

    A test that runs the CLI in-process configures logging for the whole process: at
    level info, every later ``capture_logs`` would miss debug lines.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def pytest_report_header() -> list[str]:
    return report_header()


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A started :class:`Simulator` on a free port (fast bookmarks for tests)."""
    async with Simulator(bookmark_interval=0.2) as simulator:
        yield simulator


@pytest.fixture
def kubeconfig(sim: Simulator, tmp_path: Path) -> Path:
    """An admin kubeconfig for ``sim`` (context ``sim``)."""
    return sim.write_kubeconfig(tmp_path / "kubeconfig")
