"""The real helm, for the chart tests: where ``make helm`` built it, and calls to it.

Without the binary the tests that need it are skipped, naming the reason — unless
``ZOMBIED_REQUIRE_HELM=1`` is set, as ``make test`` does, in which case they fail.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from .manifests import ROOT, Obj

CHART = ROOT / "charts" / "zombied"
BUILD = ROOT / "tests" / "ship" / "build-helm.sh"
REQUIRE_ENV = "ZOMBIED_REQUIRE_HELM"


@functools.cache
def _built() -> Path:
    result = subprocess.run(
        ["bash", str(BUILD), "--print"], capture_output=True, text=True, check=True
    )
    return Path(result.stdout.strip()) / "bin" / "helm"


def helm_binary() -> str:
    path = _built()
    if not os.access(path, os.X_OK):
        reason = f"{path} is not built (run `make helm`)"
        if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"helm is required ({REQUIRE_ENV}=1) but {reason}", pytrace=False)
        pytest.skip(f"helm: {reason}")
    return str(path)


def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``helm args...``, deaf to the caller's helm settings (``HELM_NAMESPACE``...) and
    kubeconfig: a test names the cluster with ``--kubeconfig`` or talks to none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, check=False, timeout=120, env=env
    )


def template(*values: str, release: str = "zombied", namespace: str = "zombied") -> list[Obj]:
    """Every object ``helm template`` renders from the chart with ``values`` (flags)."""
    result = run(["template", release, str(CHART), "--namespace", namespace, *values])
    assert result.returncode == 0, f"helm template {' '.join(values)} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
