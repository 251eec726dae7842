"""The Helm chart, installed with the real helm on a real kube-apiserver.

``helm install`` puts the chart into a namespace of its own (cluster-wide and namespaced
mode, each under a release name of its own, so every object name and the Lease follow
the release), and every object it rendered is then on the server. There is no
controller-manager, scheduler or kubelet, so the Deployment gets no pods; instead
``zombied run`` runs here with the installed Deployment's arguments and a token of the
chart's ServiceAccount, and the shipped RBAC proof (``test_rbac_real``) holds: zombies
reaped, the Lease held, Events recorded, not one 403. The pod template is admitted by
the server as it stands, PriorityClass included.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.realserver.cluster import RealCluster
from tests.realserver.test_rbac_real import OWN_NAMESPACE, Install, assert_rbac_is_enough
from tests.ship import helm
from tests.ship.manifests import Obj, container, kubectl, one
from tests.ship.rbac_cases import Variant

pytestmark = [pytest.mark.kubectl, pytest.mark.subprocess]


def _helm(cluster: RealCluster, *args: str) -> str:
    result = helm.run([*args, "--kubeconfig", str(cluster.admin_kubeconfig)])
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def _install(cluster: RealCluster, release: str, namespace: str, values: list[str]) -> list[Obj]:
    """``helm install``; every object of the release, each checked to be on the server."""
    _helm(cluster, "install", release, str(helm.CHART), "-n", namespace, "--wait=false", *values)
    manifest = _helm(cluster, "get", "manifest", release, "-n", namespace)
    found = subprocess.run(
        [kubectl(), "--kubeconfig", str(cluster.admin_kubeconfig), "get", "-o", "name", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    objects = [doc for doc in yaml.safe_load_all(manifest) if doc]
    assert len(found.stdout.split()) == len(objects)
    return objects


def _service_account_kubeconfig(
    cluster: RealCluster, namespace: str, name: str, path: Path
) -> tuple[str, Path]:
    """A kubeconfig with a token of the ServiceAccount (TokenRequest API): (user, path)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    code, body = cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request
    )
    assert code == 201, body
    config = json.loads(cluster.admin_kubeconfig.read_text())
    config["users"][0]["user"] = {"token": body["status"]["token"]}
    path.write_text(json.dumps(config))
    return f"system:serviceaccount:{namespace}:{name}", path


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
async def test_chart_installs_and_its_rbac_is_enough(
    real_cluster: RealCluster, tmp_path: Path, mode: str
) -> None:
    release = f"zombied-{secrets.token_hex(3)}"
    own = real_cluster.create_namespace("zc")
    watched = [real_cluster.create_namespace("zc-team") for _ in range(2)]
    values = ["--set", f"mode={mode}", "--set", "priorityClass.create=true"]
    if mode == "namespaced":
        values += ["--set", f"namespaces={{{','.join(watched)}}}"]
    objects = _install(real_cluster, release, own, values)
    kinds = {obj["kind"] for obj in objects}
    assert kinds >= {"Deployment", "ServiceAccount", "PriorityClass"}
    # A budget only where the server can let a drain evict unhealthy pods (1.27+).
    assert ("PodDisruptionBudget" in kinds) is (real_cluster.release.version != "v1.20.2")

    # The pod template as the ReplicaSet would create it (server-side dry run): valid,
    # and at the chart's PriorityClass.
    template = one(objects, "Deployment", release)["spec"]["template"]
    metadata = {**template["metadata"], "name": "from-template"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    code, admitted = real_cluster.request("POST", f"/api/v1/namespaces/{own}/pods?dryRun=All", pod)
    assert code == 201, admitted
    assert (admitted["spec"]["priority"], admitted["spec"]["preemptionPolicy"]) == (
        1000000,
        "Never",
    )

    args = [arg.replace("$(POD_NAMESPACE)", own) for arg in container(objects, release)["args"]]
    variant = Variant([], args, tuple(watched) if mode == "namespaced" else ())
    user, kubeconfig = _service_account_kubeconfig(real_cluster, own, release, tmp_path / "sa")
    namespaces = {OWN_NAMESPACE: own, **{ns: ns for ns in watched}}
    await assert_rbac_is_enough(
        Install(real_cluster, variant, user, kubeconfig, namespaces, lease=release)
    )
    # ... and it was the ServiceAccount that deleted the zombies.
    assert {
        e["objectRef"]["namespace"] for e in real_cluster.audit(user=user, verb="delete")
    } == set(watched)
