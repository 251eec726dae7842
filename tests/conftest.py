"""Shared fixtures: a running simulated API server and a kubeconfig pointing at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from zombied.sim import Simulator


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A started :class:`Simulator` on a free port (fast bookmarks for tests)."""
    async with Simulator(bookmark_interval=0.2) as simulator:
        yield simulator


@pytest.fixture
def kubeconfig(sim: Simulator, tmp_path: Path) -> Path:
    """An admin kubeconfig for ``sim`` (context ``sim``)."""
    return sim.write_kubeconfig(tmp_path / "kubeconfig")
