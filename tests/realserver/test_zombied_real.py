"""``zombied run`` and ``zombied scan`` as processes against each real kube-apiserver.

Each test has namespaces of its own on the session's server of its release and scopes
zombied to them, so tests never see each other's pods. What the server did is read back
from it: the pods that are left, and the audit log (every DELETE with its body and
answer).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.daemon.pods import pod, zombie
from tests.daemon.test_cli import readyz, zombied_run
from tests.helpers import eventually, stop_processes
from tests.realserver.cluster import RealCluster
from tests.realserver.proxy import WatchGate
from tests.realserver.workload import (
    bystanders,
    create_pod,
    create_pods,
    get_pod,
    pod_names,
    zombies,
)

pytestmark = [pytest.mark.subprocess]

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
    base = [ZOMBIED, "scan", "--kubeconfig", kubeconfig, "--namespaces", namespace, "-n", namespace]
    base += ["--min-age", "0s"]
    listed = await anyio.run_process(base, check=False)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.decode().splitlines()
    # One namespace scanned: no NAMESPACE column, as in kubectl.
    pod = header.split().index("POD")
    assert {row.split()[pod] for row in rows if row.strip()} >= set(doomed)
    dry = await anyio.run_process([*base, "--delete", "--dry-run=server"], check=False)
    assert dry.returncode == 0, dry.stderr
    assert f"dry run {len(doomed)}" in dry.stdout.decode()
    assert pod_names(real_cluster, namespace) == set(doomed) | set(kept)
    assert sorted(deleted_names(real_cluster, namespace, dry_run=True)) == sorted(doomed)
    done = await anyio.run_process([*base, "--delete"], check=False)
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(doomed)}," in done.stdout.decode()
    assert pod_names(real_cluster, namespace) == set(kept)


# -- leader election: three replicas, one deleter ---------------------------------------

LEASE_DURATION = 3
RETRY_PERIOD = 0.25
#: What a replica needs beyond the lease timing to notice and act.
SLACK = 2.0


def grant_cluster_admin(cluster: RealCluster, user: str) -> None:
    code, body = cluster.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"zombied-test-{user}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    assert code == 201, body


class Replica:
    """One ``zombied run --leader-elect`` process with a user (and audit trail) of its own."""

    def __init__(self, name: str, user: str, process: Any, log: Path) -> None:
        self.name = name
        self.user = user
        self.process = process
        self.log = log

    @property
    def running(self) -> bool:
        return bool(self.process.returncode is None)

    def logged(self, event: str) -> bool:
        # JSON lines, whatever the separators: compact or spaced.
        text = self.log.read_text(errors="replace")
        return any(f'"event":{gap}"{event}"' in text for gap in ("", " "))


async def _start_replica(
    cluster: RealCluster, namespace: str, name: str, tmp_path: Path
) -> Replica:
    user, kubeconfig = cluster.unprivileged_kubeconfig()
    grant_cluster_admin(cluster, user)
    await eventually(
        lambda: cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods", user=user)[0] == 200,
        timeout=TIMEOUT,
        message=f"{user} may list pods",
    )
    log = tmp_path / f"{name}.log"
    command = [
        ZOMBIED,
        "run",
        f"--kubeconfig={kubeconfig}",
        f"--namespaces={namespace}",
        "--leader-elect",
        f"--lease-namespace={namespace}",
        f"--lease-duration={LEASE_DURATION}",
        "--renew-deadline=2",
        f"--retry-period={RETRY_PERIOD}",
        "--listen=127.0.0.1:0",
        "--min-age=0s",
        "--log-format=json",
        "--drain-timeout=2",
    ]
    with log.open("wb") as out:
        process = await anyio.open_process(
            command, stdout=out, stderr=out, env={**os.environ, "POD_NAME": name}
        )
    return Replica(name, user, process, log)


def _holder(cluster: RealCluster, namespace: str, replicas: list[Replica]) -> Replica | None:
    code, lease = cluster.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/zombied"
    )
    if code != 200:
        return None
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    for replica in replicas:
        if replica.running and holder.startswith(f"{replica.name}-"):
            return replica
    return None


def _deleters(cluster: RealCluster, namespace: str, names: dict[str, str]) -> dict[str, list[str]]:
    """For each pod name: the users whose DELETE of it succeeded."""
    found: dict[str, list[str]] = {name: [] for name in names}
    for event in deletes(cluster, namespace):
        name = event["objectRef"]["name"]
        if name in found and event["responseStatus"]["code"] == 200:
            found[name].append(event["user"]["username"])
    return found


async def test_three_leader_elected_replicas_have_one_deleter_through_a_kill(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    namespace = real_cluster.create_namespace()
    replicas: list[Replica] = []
    try:
        for index in range(3):
            replica = await _start_replica(real_cluster, namespace, f"replica-{index}", tmp_path)
            replicas.append(replica)
        first = await eventually(
            lambda: _holder(real_cluster, namespace, replicas), timeout=TIMEOUT
        )
        assert isinstance(first, Replica)
        await eventually(
            lambda: all(r.logged("daemon.started") for r in replicas),
            timeout=TIMEOUT,
            message="every replica started",
        )
        batch = create_pods(real_cluster, zombies(namespace, "first"))
        await eventually(
            lambda: all(_deleters(real_cluster, namespace, batch).values()), timeout=TIMEOUT
        )
        first_deleters = _deleters(real_cluster, namespace, batch)
        assert all(users == [first.user] for users in first_deleters.values()), first_deleters

        # kill -9: no release; a standby takes over once the lease has expired.
        first.process.kill()
        await first.process.wait()
        batch2 = create_pods(real_cluster, zombies(namespace, "second"))
        await eventually(
            lambda: all(_deleters(real_cluster, namespace, batch2).values()),
            timeout=LEASE_DURATION + SLACK + TIMEOUT / 4,
            message="a standby took over and reaped the second batch",
        )
        second = _holder(real_cluster, namespace, replicas)
        assert second is not None
        assert second is not first
        deleters = _deleters(real_cluster, namespace, {**batch, **batch2})
        # Every zombie deleted exactly once, each by the leader of its time.
        assert all(len(users) == 1 for users in deleters.values()), deleters
        assert {deleters[name][0] for name in batch} == {first.user}
        assert {deleters[name][0] for name in batch2} == {second.user}
        assert pod_names(real_cluster, namespace) == set()
    finally:
        await stop_processes(replica.process for replica in replicas)


# -- a same-name replacement ------------------------------------------------------------


def _deleting(event: dict[str, Any]) -> bool:
    meta = (event.get("object") or {}).get("metadata") or {}
    return event.get("type") == "DELETED" or "deletionTimestamp" in meta


async def test_a_same_name_replacement_is_kept(real_cluster: RealCluster, tmp_path: Path) -> None:
    """zombied's watch lags: it deletes by the old pod's uid, the server refuses (409)."""
    namespace = real_cluster.create_namespace()
    async with WatchGate(real_cluster) as gate:
        kubeconfig = gate.kubeconfig(tmp_path / "gate.kubeconfig")
        async with zombied_run(kubeconfig, "--namespaces", namespace) as running:
            await eventually(lambda: running.events("http.listening"), timeout=TIMEOUT)
            await eventually(lambda: readyz(running.port()), timeout=TIMEOUT)
            gate.allow(lambda _event: False)
            old = create_pod(real_cluster, "web-0", zombie("", namespace))
            code, _ = real_cluster.request(
                "DELETE", f"/api/v1/namespaces/{namespace}/pods/web-0", {"gracePeriodSeconds": 0}
            )
            assert code == 200
            new = create_pod(real_cluster, "web-0", pod("", namespace, phase="Running"))
            # zombied now learns of the old pod as a zombie, but not yet of its end.
            gate.allow(lambda event: not _deleting(event))

            def refused_by_uid() -> bool:
                return any(
                    (e.get("requestObject") or {}).get("preconditions", {}).get("uid")
                    == old["metadata"]["uid"]
                    and e["responseStatus"]["code"] == 409
                    for e in deletes(real_cluster, namespace)
                )

            await eventually(refused_by_uid, timeout=TIMEOUT, message="a DELETE refused by uid")
            gate.allow(lambda _event: True)
            running.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                assert await running.process.wait() == 0
    kept = get_pod(real_cluster, namespace, "web-0")
    assert kept is not None
    assert kept["metadata"]["uid"] == new["metadata"]["uid"]
    assert "deletionTimestamp" not in kept["metadata"]
