"""The shipped RBAC, bound to a user without any other permission, on a real kube-apiserver.

``manifests/`` is rendered with ``kubectl kustomize`` (the cluster-wide base and the
namespaced overlay); its Roles and ClusterRoles are installed under names and
namespaces of this test, bound to one of the cluster's unprivileged users, and
``zombied run`` runs with the Deployment's own arguments and that user's token. With
all of it, zombies are reaped, the Lease is held and Events recorded without a single
403 in the audit log. Without any one (rule, verb), the real server refuses exactly
that request, and zombied names the missing rule in ``/readyz``: for the pod watch, the
deletes, the Events and the Lease alike. An Event is best effort and a refused Lease
leaves the replica a standby, but either is a broken install that the Deployment's
readiness must show.
"""

from __future__ import annotations

import copy
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.daemon.pods import zombie
from tests.daemon.test_cli import Running
from tests.helpers import eventually
from tests.realserver.cluster import RealCluster
from tests.realserver.workload import create_pod, pod_names
from tests.ship.rbac_cases import REMOVALS, VARIANTS, Removal, Variant, _without

pytestmark = [pytest.mark.kubectl, pytest.mark.subprocess]

ZOMBIED = str(Path(sys.executable).with_name("zombied"))
OWN_NAMESPACE = "zombied"
TIMEOUT = 60.0
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


class Install:
    """Who zombied runs as on the real cluster and in which namespaces, for one run.

    ``namespaces`` maps the namespace names of the manifests (``zombied``, ``team-a``...)
    to the real ones; ``lease`` is the Lease zombied holds in its own namespace.
    """

    def __init__(
        self,
        cluster: RealCluster,
        variant: Variant,
        user: str,
        kubeconfig: Path,
        namespaces: dict[str, str],
        lease: str = "zombied",
    ) -> None:
        self.cluster = cluster
        self.variant = variant
        self.run_id = secrets.token_hex(4)
        self.user, self.kubeconfig = user, kubeconfig
        self.namespaces = namespaces
        self.lease = lease

    @classmethod
    def bound_to_user(
        cls, cluster: RealCluster, variant: Variant, rbac: list[dict[str, Any]]
    ) -> Install:
        """The manifests' RBAC, in namespaces of its own, bound to an unprivileged user."""
        user, kubeconfig = cluster.unprivileged_kubeconfig()
        watched = variant.namespaces or ("team-a",)
        namespaces = {
            name: cluster.create_namespace(f"zr-{name}") for name in (OWN_NAMESPACE, *watched)
        }
        install = cls(cluster, variant, user, kubeconfig, namespaces)
        for obj in rbac:
            install._apply(copy.deepcopy(obj))
        return install

    def _apply(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        kind = obj["kind"]
        if kind.startswith("Cluster"):
            meta["name"] = f"{meta['name']}-{self.run_id}"
            if kind == "ClusterRoleBinding":
                obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{self.run_id}"
            path = f"{RBAC_API}/{kind.lower()}s"
        else:
            meta["namespace"] = self.namespaces[meta["namespace"]]
            path = f"{RBAC_API}/namespaces/{meta['namespace']}/{kind.lower()}s"
        if kind.endswith("Binding"):
            obj["subjects"] = [
                {"kind": "User", "name": self.user, "apiGroup": "rbac.authorization.k8s.io"}
            ]
        code, body = self.cluster.request("POST", path, obj)
        assert code == 201, body

    def namespace(self, name: str) -> str:
        return self.namespaces[name]

    def add_zombies(self) -> set[str]:
        """One zombie in each watched namespace; their uids."""
        uids = set()
        for original, namespace in self.namespaces.items():
            if original == OWN_NAMESPACE:
                continue
            body = zombie("", namespace, labels={"app": "web", "zombied-run": self.run_id})
            uids.add(create_pod(self.cluster, f"zombie-{original}", body)["metadata"]["uid"])
        return uids

    def command(self) -> list[str]:
        args = []
        for arg in self.variant.args:
            flag, eq, value = arg.partition("=")
            if eq:
                value = ",".join(self.namespaces.get(v, v) for v in value.split(","))
            args.append(flag + eq + value)
        # Test pace, a free probe port, and only this test's pods (the base install
        # watches every namespace of the shared cluster).
        return [
            ZOMBIED,
            *args,
            f"--kubeconfig={self.kubeconfig}",
            "--listen=127.0.0.1:0",
            "--min-age=0s",
            "--drain-timeout=2s",
            f"--label-selector=zombied-run={self.run_id}",
        ]

    def refusals(self) -> list[dict[str, Any]]:
        return [e for e in self.cluster.audit(user=self.user) if e["responseStatus"]["code"] == 403]


@asynccontextmanager
async def zombied(*installs: Install) -> AsyncIterator[list[Running]]:
    """One ``zombied run`` per install, side by side; all killed on the way out."""
    runs: list[Running] = []
    async with anyio.create_task_group() as tg:
        try:
            for install in installs:
                env = {**os.environ, "POD_NAME": f"zombied-{install.run_id}"}
                process = await anyio.open_process(
                    install.command(), stderr=subprocess.STDOUT, env=env
                )
                runs.append(Running(process))
                tg.start_soon(runs[-1].pump)
            yield runs
        finally:
            with anyio.CancelScope(shield=True):
                for running in runs:
                    if running.process.returncode is None:
                        running.process.kill()
                    await running.process.wait()
                    await running.process.aclose()


async def probe(running: Running, path: str) -> tuple[int, str]:
    if not running.events("http.listening"):
        return 0, ""
    url = f"http://127.0.0.1:{running.port()}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def assert_rbac_is_enough(install: Install) -> None:
    """zombied, run as ``install.user``, reaps, leads and records Events without a 403."""
    cluster = install.cluster
    uids = install.add_zombies()
    async with zombied(install) as (running,):

        async def ready() -> bool:
            return (await probe(running, "/readyz"))[0] == 200

        await eventually(ready, timeout=TIMEOUT, message="zombied ready")

        def all_reaped() -> bool:
            return all(not pod_names(cluster, ns) for ns in install.namespaces.values())

        await eventually(all_reaped, timeout=TIMEOUT, message="every zombie deleted")
        own = install.namespace(OWN_NAMESPACE)
        code, lease = cluster.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{own}/leases/{install.lease}"
        )
        assert code == 200, lease
        assert lease["spec"]["holderIdentity"].startswith(f"zombied-{install.run_id}")

        def events_recorded() -> bool:
            recorded = set()
            for ns in install.namespaces.values():
                _, events = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")
                recorded |= {
                    e["involvedObject"]["uid"] for e in events["items"] if e["reason"] == "Reaped"
                }
            return recorded == uids

        await eventually(events_recorded, timeout=TIMEOUT, message="Reaped events")
    assert install.refusals() == []


@pytest.mark.parametrize("variant_name", ["base", "namespaced"])
async def test_manifest_rbac_is_enough(real_cluster: RealCluster, variant_name: str) -> None:
    variant = VARIANTS[variant_name]
    await assert_rbac_is_enough(Install.bound_to_user(real_cluster, variant, variant.rbac))


def _refused(install: Install, removal: Removal) -> bool:
    _, namespace, _ = removal.role
    for event in install.refusals():
        ref = event.get("objectRef") or {}
        if (event["verb"], ref.get("resource")) != (removal.verb, removal.resource):
            continue
        if namespace and ref.get("namespace") != install.namespace(namespace):
            continue
        return True
    return False


def _named(removal: Removal, readyz: str) -> bool:
    return f"missing RBAC rule: {removal.verb} {removal.resource}" in readyz


async def test_every_rule_is_needed_and_named(real_cluster: RealCluster) -> None:
    """Each (rule, verb) removed in turn, all removals run side by side."""
    if not REMOVALS:
        pytest.skip("kubectl is not on PATH: cannot render the kustomize manifests")
    installs: list[tuple[Removal, Install]] = []
    for variant_name, removal in REMOVALS:
        variant = VARIANTS[variant_name]
        rbac = _without(variant.rbac, removal.role, removal.index, removal.verb)
        install = Install.bound_to_user(real_cluster, variant, rbac)
        install.add_zombies()
        installs.append((removal, install))
    async with zombied(*(install for _, install in installs)) as processes:
        runs = [(r, i, p) for (r, i), p in zip(installs, processes, strict=True)]

        async def every_refusal_named() -> bool:
            missing = []
            for removal, install, running in runs:
                _, readyz = await probe(running, "/readyz")
                if not (_refused(install, removal) and _named(removal, readyz)):
                    missing.append(removal.id)
            assert not missing, f"not refused and named yet: {missing}"
            return True

        await eventually(every_refusal_named, timeout=TIMEOUT, interval=0.5)
    # Nothing else was refused: each refusal is the removed rule's.
    for removal, install in installs:
        others = [
            (e["verb"], (e.get("objectRef") or {}).get("resource"))
            for e in install.refusals()
            if (e["verb"], (e.get("objectRef") or {}).get("resource"))
            != (removal.verb, removal.resource)
        ]
        assert others == [], (removal.id, others)
