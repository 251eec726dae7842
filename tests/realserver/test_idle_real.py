"""Connections a middlebox forgets: idle ones, and a watch.

``zombied run`` talks to a real kube-apiserver through a TLS middlebox that silently
black-holes connections idle for 20 s, as load balancers do (watches are spared). A
client that keeps idle connections for ever sends the first DELETEs after the quiet
spell into dead sockets, where they hang until their deadline; zombied's connections
must not outlive an idle spell that long. And when the middlebox forgets the watch
itself, nothing on the wire says so (the box answers TCP keep-alives itself): zombied
must notice the silence in bounded time and watch again.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import anyio
import pytest
from zombied.watch import UNHEARD_TIMEOUT

from tests.daemon.pods import zombie
from tests.daemon.test_cli import readyz, zombied_run
from tests.helpers import eventually
from tests.realserver.cluster import ADMIN, RealCluster
from tests.realserver.middlebox import Middlebox
from tests.realserver.workload import create_pods, pod_names

pytestmark = [pytest.mark.subprocess]

#: How long the middlebox remembers a connection that carries nothing.
IDLE = 20.0
WAVE = 8


async def wave(cluster: RealCluster, namespace: str, name: str) -> float:
    """Create a node's worth of zombies; seconds until zombied deleted them all."""
    create_pods(cluster, {f"{name}-{i}": zombie("", namespace) for i in range(WAVE)})
    started = anyio.current_time()
    await eventually(lambda: not pod_names(cluster, namespace), timeout=60)
    return anyio.current_time() - started


def kubeconfig_through(box: Middlebox, cluster: RealCluster, path: Path) -> Path:
    ca = base64.b64encode(box.certificate.pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "lb", "cluster": {"server": box.url, "certificate-authority-data": ca}}
        ],
        "users": [{"name": ADMIN, "user": {"token": cluster.tokens[ADMIN]}}],
        "contexts": [{"name": "lb", "context": {"cluster": "lb", "user": ADMIN}}],
        "current-context": "lb",
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


async def test_a_storm_after_a_quiet_spell_is_reaped_as_promptly_as_the_first(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    namespace = real_cluster.create_namespace()
    async with Middlebox(real_cluster.url, real_cluster.ca_pem, tmp_path, idle=IDLE) as box:
        kubeconfig = kubeconfig_through(box, real_cluster, tmp_path / "kubeconfig")
        async with zombied_run(kubeconfig, "--namespaces", namespace) as running:
            await eventually(lambda: running.events("http.listening"), timeout=30)
            await eventually(lambda: readyz(running.port()), timeout=30)
            first = await wave(real_cluster, namespace, "first")
            # Quiet until every connection that was not a watch is forgotten by the box.
            await eventually(lambda: box.quiet_for() > IDLE + 1, timeout=IDLE + 30)
            second = await wave(real_cluster, namespace, "second")
            failed = running.events("pod.delete_failed")
    # A DELETE into a dead socket waits for its 10 s deadline; none may have.
    assert not failed, failed
    assert second < max(3 * first, 5.0), (first, second)


#: How long a black-holed watch may go unnoticed: the longest watch zombied asks for
#: before the server has shown bookmarks, the margin past it, and slack for a loaded
#: test machine. Once bookmarks are known it is about 70 s.
NOTICED_WITHIN = UNHEARD_TIMEOUT + 10 + 15


@pytest.mark.timeout(NOTICED_WITHIN + 180)
async def test_a_black_holed_watch_is_noticed_and_watched_again(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    namespace = real_cluster.create_namespace()
    async with Middlebox(real_cluster.url, real_cluster.ca_pem, tmp_path, idle=3600) as box:
        kubeconfig = kubeconfig_through(box, real_cluster, tmp_path / "kubeconfig")
        async with zombied_run(kubeconfig, "--namespaces", namespace) as running:
            await eventually(lambda: running.events("http.listening"), timeout=30)
            await eventually(lambda: readyz(running.port()), timeout=30)
            await eventually(box.watches, timeout=30)
            forgotten = box.black_hole_watches()
            started = anyio.current_time()

            def inactive() -> list[dict[str, object]]:
                # A watch asked for just after the others were forgotten (the one before
                # had just ended) is forgotten too, while zombied cannot yet have noticed
                # anything (a silence shorter than its 10 s margin is never taken for death).
                if anyio.current_time() - started < 5.0:
                    forgotten.extend(box.black_hole_watches())
                return running.events("watch.inactive")

            try:
                await eventually(inactive, timeout=NOTICED_WITHIN)
            except AssertionError as exc:
                watch_log = [e for e in running.logs if str(e.get("event")).startswith("watch.")]
                flows = [(f.watches, f.bookmarks, f.client_closed) for f in forgotten]
                raise AssertionError(f"{exc}; watch log: {watch_log}; flows: {flows}") from None
            noticed = anyio.current_time() - started
            # Watched again: a zombie that appears now is seen and reaped.
            await eventually(box.watches, timeout=30)
            reaped = await wave(real_cluster, namespace, "after")
    assert forgotten[-1].client_closed  # zombied let go of the dead connection
    # The measured bound, for whoever reads the test output.
    print(
        f"\n{real_cluster.name}: black-holed watch noticed after {noticed:.1f} s "
        f"(watches asked: {forgotten[-1].watches}, bookmarks at: {forgotten[-1].bookmarks}); "
        f"reaped again in {reaped:.1f} s"
    )
