"""Fixtures of the monitoring tests: Debian's promtool and Prometheus, unpacked.

``make prometheus`` (a dependency of ``make test``) downloads the package and unpacks it
with ``dpkg -x``. Run outside make without it, these tests skip with the command to
run; under CI a missing binary fails instead, so the suite cannot pass by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench.prometheus import binary, prometheus_dir


def require(name: str) -> Path:
    """The path of ``name`` from the unpacked package, or skip (fail under CI)."""
    path = binary(name)
    if path is None:
        message = f"{name} not found under {prometheus_dir()}: run `make prometheus`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def promtool() -> Path:
    return require("promtool")
