"""What machine and software the benchmark ran on, for the header of RESULTS.md.

Reads /proc, psutil, package metadata, `kubectl version` and `git`; it must never
change anything and never reach the network.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

import psutil

from bench.cronjob import KUBECTL


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _command(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return done.stdout.strip() or "unavailable"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe(repo: Path) -> dict[str, str]:
    """Ordered name -> value pairs describing this machine and the software measured."""
    kubectl = _command([KUBECTL, "version", "--client"]).splitlines()
    return {
        "CPU": cpu_model(),
        "cores (logical)": str(os.cpu_count()),
        "RAM": f"{psutil.virtual_memory().total / (1 << 30):.1f} GiB",
        "OS": platform.platform(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "zombied": f"{_version('zombied')} (git {_command(['git', '-C', str(repo), 'rev-parse', '--short', 'HEAD'])})",  # noqa: E501
        "kubernetes_asyncio": _version("kubernetes_asyncio"),
        "aiohttp": _version("aiohttp"),
        "anyio": _version("anyio"),
        "kubectl": kubectl[0] if kubectl else "unavailable",
        "psutil / matplotlib": f"{_version('psutil')} / {_version('matplotlib')}",
    }


def load_average() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews every figure."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"
