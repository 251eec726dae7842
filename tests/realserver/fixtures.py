"""Pytest fixtures for tests against a real kube-apiserver v1.20.2 (with etcd).

``real_cluster`` (session scope) is a running
:class:`~tests.realserver.cluster.RealCluster`: ``admin_kubeconfig``,
``unprivileged_kubeconfig()`` (a user without any permission, for RBAC tests),
``create_namespace()`` (a fresh namespace per call, so tests never share one),
``request()`` (one JSON request) and ``audit()`` (the server's audit log). One server
serves the whole session and is stopped at the end whatever happened; mark the tests
that use it with ``ON_REAL_SERVER`` so that pytest-xdist keeps them in one worker.

Without the binaries (``make real-apiserver``) the tests that ask for it are skipped,
naming the reason — unless ``ZOMBIED_REQUIRE_REAL_APISERVER=1`` is set, as ``make test``
and ``make test-real`` do, in which case they fail: CI never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.realserver.cluster import (
    NAME,
    RealCluster,
    binary_dir,
    missing_binaries,
    running_cluster,
)

REQUIRE_ENV = "ZOMBIED_REQUIRE_REAL_APISERVER"
#: Mark for every test using ``real_cluster``: under pytest-xdist (``--dist loadgroup``)
#: they all run in one worker, so the session starts one server, not one per worker.
ON_REAL_SERVER = pytest.mark.xdist_group("real-apiserver")


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A real kube-apiserver v1.20.2 and etcd, started once per test session."""
    reason = missing_binaries()
    if reason is not None:
        if required():
            pytest.fail(f"{NAME} is required ({REQUIRE_ENV}=1) but {reason}", pytrace=False)
        pytest.skip(f"{NAME}: {reason}")
    with running_cluster(tmp_path_factory.mktemp("real-apiserver")) as cluster:
        yield cluster


@pytest.fixture
def real_namespace(real_cluster: RealCluster) -> str:
    """A fresh namespace on the real cluster for one test."""
    return real_cluster.create_namespace()


def report_header() -> str:
    """The line the test report starts with: which real server, and whether it is there."""
    reason = missing_binaries()
    if reason is None:
        return f"real server: {NAME} (etcd) from {binary_dir()}; contract ids name the server"
    mode = "required: tests fail" if required() else "tests needing it skip"
    return f"real server: {NAME} unavailable ({reason}); {mode}"
