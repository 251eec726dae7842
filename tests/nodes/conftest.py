"""The story on real nodes, told once per release for the session.

``story`` is parametrised by release (ids ``nodes-v1.20.2`` and ``nodes-v1.37.2``); the
tests of one release share its story and run in one pytest-xdist group, so each release's
cluster lives in one worker. Without the binaries or the node packages the tests skip,
naming the reason, unless ``ZOMBIED_REQUIRE_REAL_APISERVER=1`` (as in ``make test``): then
they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.nodes.cluster import missing, running_node_cluster
from tests.nodes.story import VIEWER, Story, tell
from tests.realserver.cluster import RELEASES
from tests.realserver.fixtures import REQUIRE_ENV, required
from tests.ship.helm import helm_binary


def _params() -> list[Any]:
    return [
        pytest.param(
            version, id=f"nodes-{version}", marks=pytest.mark.xdist_group(f"nodes-{version}")
        )
        for version in RELEASES
    ]


@pytest.fixture(scope="session", params=_params())
def story(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Story]:
    version: str = request.param
    reason = missing(version)
    if reason is not None:
        if required():
            pytest.fail(
                f"nodes of {version} are required ({REQUIRE_ENV}=1) but {reason}", pytrace=False
            )
        pytest.skip(f"nodes of {version}: {reason}")
    workdir = tmp_path_factory.mktemp(f"nodes-{version}-")
    with running_node_cluster(workdir, version, admins=(VIEWER,)) as cluster:
        yield tell(cluster, workdir, helm_binary())
