"""Pytest fixtures for tests against a real kube-apiserver with etcd, on every release.

``real_cluster`` (session scope) is a running
:class:`~tests.realserver.cluster.RealCluster`: ``admin_kubeconfig``,
``unprivileged_kubeconfig()`` (a user without any permission, for RBAC tests),
``create_namespace()`` (a fresh namespace per call, so tests never share one),
``request()`` (one JSON request) and ``audit()`` (the server's audit log). It is
parametrised by release (:data:`~tests.realserver.cluster.RELEASES`, ids
``kube-apiserver-v1.20.2`` and ``kube-apiserver-v1.37.2``): every test using it runs on
each. One server per release serves the whole session, started when a test first asks
for it and stopped at the end whatever happened; each release's tests carry their own
``pytest.mark.xdist_group`` (:func:`on_release`), so under pytest-xdist
(``--dist loadgroup``) each release's tests run in one worker, and the two servers in
two workers.

Without the binaries (``make real-apiserver``) the tests that ask for a release are
skipped, naming the reason — unless ``ZOMBIED_REQUIRE_REAL_APISERVER=1`` is set, as
``make test`` and ``make test-real`` do, in which case they fail: CI never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.realserver.cluster import (
    RELEASES,
    RealCluster,
    binary_dir,
    missing_binaries,
    running_cluster,
)

REQUIRE_ENV = "ZOMBIED_REQUIRE_REAL_APISERVER"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def on_release(version: str) -> pytest.MarkDecorator:
    """The xdist group of the tests of one release: they share that release's server."""
    return pytest.mark.xdist_group(f"real-apiserver-{version}")


def release_params() -> list[Any]:
    """One pytest param per release (id: the server's name), in its xdist group."""
    return [
        pytest.param(version, id=release.name, marks=on_release(version))
        for version, release in RELEASES.items()
    ]


class RealServers:
    """The session's real servers, one per release, each started on first use."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, stack: ExitStack) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._stack = stack
        self._running: dict[str, RealCluster] = {}

    def get(self, version: str) -> RealCluster:
        """The running server of ``version``; skips (or fails, when required) if unbuilt."""
        if version not in self._running:
            name = RELEASES[version].name
            reason = missing_binaries(version)
            if reason is not None:
                if required():
                    pytest.fail(f"{name} is required ({REQUIRE_ENV}=1) but {reason}", pytrace=False)
                pytest.skip(f"{name}: {reason}")
            workdir: Path = self._tmp_path_factory.mktemp(f"{name}-")
            self._running[version] = self._stack.enter_context(running_cluster(workdir, version))
        return self._running[version]


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServers]:
    """Every release's server, started on demand, all stopped at the end of the session."""
    with ExitStack() as stack:
        yield RealServers(tmp_path_factory, stack)


@pytest.fixture(scope="session", params=release_params())
def real_cluster(request: pytest.FixtureRequest, real_servers: RealServers) -> RealCluster:
    """A real kube-apiserver and etcd of one release (the param), one per session."""
    version: str = request.param
    return real_servers.get(version)


@pytest.fixture
def real_namespace(real_cluster: RealCluster) -> str:
    """A fresh namespace on the real cluster for one test."""
    return real_cluster.create_namespace()


def report_header() -> list[str]:
    """The lines the test report starts with: which real servers, and whether they are there."""
    lines = []
    for version, release in RELEASES.items():
        reason = missing_binaries(version)
        if reason is None:
            lines.append(f"real server: {release.name} (etcd) from {binary_dir(version)}")
        else:
            mode = "required: tests fail" if required() else "tests needing it skip"
            lines.append(f"real server: {release.name} unavailable ({reason}); {mode}")
    return [*lines, "real servers: test ids name the server"]
