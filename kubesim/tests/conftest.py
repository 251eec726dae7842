"""Fixtures shared by the simulator's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from kubesim import Simulator


@pytest.fixture
async def http(sim: Simulator) -> AsyncIterator[aiohttp.ClientSession]:
    """A plain HTTP session against the simulator, signed in as its administrator."""
    headers = {"Authorization": f"Bearer {sim.admin_token}"}
    async with aiohttp.ClientSession(sim.url, headers=headers) as session:
        yield session
