"""Fixtures of the simulator's own tests: a running simulator and an HTTP session to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from kubesim import Simulator


@pytest.fixture(scope="session", autouse=True)
def no_implicit_event_loop() -> None:
    """Make "no current event loop" an answer, not a loop nobody closes.

    looptime asks the event loop policy for the current loop before every test; until
    ``set_event_loop`` is called the default policy makes one, whose ResourceWarning
    fails a later test (``filterwarnings = error``).
    """
    asyncio.get_event_loop_policy().set_event_loop(None)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A started simulator on a free port, with fast bookmarks."""
    async with Simulator(bookmark_interval=0.2) as simulator:
        yield simulator


@pytest.fixture
async def http(sim: Simulator) -> AsyncIterator[aiohttp.ClientSession]:
    """A plain HTTP session against the simulator, signed in as its administrator."""
    headers = {"Authorization": f"Bearer {sim.admin_token}"}
    async with aiohttp.ClientSession(sim.url, headers=headers) as session:
        yield session
