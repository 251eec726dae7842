"""The chaos soak under pytest: ``SOAK_S`` seconds (60 by default), no miss, no wrong delete."""

from __future__ import annotations

import os

import pytest

from tests.reliability.soak import run_soak

SECONDS = float(os.environ.get("SOAK_S") or 60)


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 300)
async def test_chaos_soak() -> None:
    seed = int(os.environ.get("SOAK_SEED") or 0)
    result = await run_soak(SECONDS, seed=seed)
    print(f"\n{result.line()} seed={seed}")
    assert result.violations == []
    assert result.left == []
    assert result.bad_exits == []
    assert result.zombies > 0
    assert result.reaped > 0
