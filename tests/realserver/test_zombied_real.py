"""``zombied run`` and ``zombied scan`` as processes against a real kube-apiserver v1.20.2.

Each test has namespaces of its own on the session's one server and scopes zombied to
them, so tests never see each other's pods. What the server did is read back from it:
the pods that are left, and the audit log (every DELETE with its body and answer).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.daemon.test_cli import readyz, zombied_run
from tests.helpers import eventually
from tests.realserver.cluster import RealCluster
from tests.realserver.workload import bystanders, create_pods, get_pod, pod_names, zombies

pytestmark = pytest.mark.subprocess

ZOMBIED = str(Path(sys.executable).with_name("zombied"))
TIMEOUT = 60.0


def deletes(cluster: RealCluster, namespace: str) -> list[dict[str, Any]]:
    return cluster.audit(verb="delete", resource="pods", namespace=namespace)


def deleted_names(cluster: RealCluster, namespace: str, *, dry_run: bool = False) -> list[str]:
    """Pods a successful DELETE (a dry run or not) was answered for, in order."""
    names = []
    for event in deletes(cluster, namespace):
        body = event.get("requestObject") or {}
        if event["responseStatus"]["code"] == 200 and bool(body.get("dryRun")) == dry_run:
            names.append(event["objectRef"]["name"])
    return names


async def test_run_reaps_every_zombie_variant_leaves_the_rest_and_drains_on_sigterm(
    real_cluster: RealCluster,
) -> None:
    namespace = real_cluster.create_namespace()
    doomed = create_pods(real_cluster, zombies(namespace))
    kept = create_pods(real_cluster, bystanders(namespace))
    kubeconfig = real_cluster.admin_kubeconfig
    async with zombied_run(kubeconfig, "--namespaces", namespace) as running:
        await eventually(lambda: running.events("http.listening"), timeout=TIMEOUT)
        await eventually(lambda: readyz(running.port()), timeout=TIMEOUT)
        await eventually(
            lambda: pod_names(real_cluster, namespace) == set(kept),
            timeout=TIMEOUT,
            message="every zombie deleted, every other pod left",
        )
        running.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            code = await running.process.wait()
        await eventually(lambda: running.events("daemon.drained"))
    assert code == 0
    # One DELETE per zombie, each with its uid as precondition and no dry run.
    by_name = {e["objectRef"]["name"]: e for e in deletes(real_cluster, namespace)}
    assert set(by_name) == set(doomed)
    for name, event in by_name.items():
        body = event["requestObject"]
        assert body["preconditions"]["uid"] == doomed[name]
        assert not body.get("dryRun")
        assert "dryRun" not in event["requestURI"]
    # A Reaped Event for each, recorded on the real server.
    code, events = real_cluster.request("GET", f"/api/v1/namespaces/{namespace}/events")
    assert code == 200
    reaped = {e["involvedObject"]["name"] for e in events["items"] if e["reason"] == "Reaped"}
    assert reaped == set(doomed)


@pytest.mark.parametrize("mode", ["client", "server"])
async def test_run_dry_run_deletes_nothing(real_cluster: RealCluster, mode: str) -> None:
    namespace = real_cluster.create_namespace()
    doomed = create_pods(real_cluster, zombies(namespace))
    kubeconfig = real_cluster.admin_kubeconfig
    async with zombied_run(kubeconfig, "--namespaces", namespace, f"--dry-run={mode}") as running:
        await eventually(
            lambda: {e["pod"] for e in running.events("pod.dry_run")} == set(doomed),
            timeout=TIMEOUT,
            message="a dry run logged for every zombie",
        )
        if mode == "server":
            # The server was asked, and answered each as a dry run.
            await eventually(
                lambda: (
                    sorted(deleted_names(real_cluster, namespace, dry_run=True)) == sorted(doomed)
                ),
                timeout=TIMEOUT,
            )
        running.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await running.process.wait() == 0
    assert deleted_names(real_cluster, namespace) == []
    if mode == "client":
        assert deletes(real_cluster, namespace) == []
    for name in doomed:
        pod = get_pod(real_cluster, namespace, name)
        assert pod is not None
        assert "deletionTimestamp" not in pod["metadata"]


async def test_scan_lists_then_deletes_and_its_server_dry_run_deletes_nothing(
    real_cluster: RealCluster,
) -> None:
    namespace = real_cluster.create_namespace()
    doomed = create_pods(real_cluster, zombies(namespace))
    kept = create_pods(real_cluster, bystanders(namespace))
    kubeconfig = str(real_cluster.admin_kubeconfig)
    base = [ZOMBIED, "scan", "--kubeconfig", kubeconfig, "--namespaces", namespace]
    base += ["--min-age", "0s"]
    listed = await anyio.run_process(base, check=False)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.decode().splitlines()[1:]
    assert {row.split()[1] for row in rows if row.strip()} >= set(doomed)
    dry = await anyio.run_process([*base, "--delete", "--dry-run=server"], check=False)
    assert dry.returncode == 0, dry.stderr
    assert f"dry run {len(doomed)}" in dry.stdout.decode()
    assert pod_names(real_cluster, namespace) == set(doomed) | set(kept)
    assert sorted(deleted_names(real_cluster, namespace, dry_run=True)) == sorted(doomed)
    done = await anyio.run_process([*base, "--delete"], check=False)
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(doomed)}," in done.stdout.decode()
    assert pod_names(real_cluster, namespace) == set(kept)
