"""zombied keeps working after the service-account token it started with has expired.

In a pod, the kubelet writes a projected token into a file and replaces it before it
expires (at 80 % of its life). Here the token lives ten minutes, the shortest the API
allows: zombied, installed by kustomize on the current release, must still lead and
reap a zombie once the first token is dead. A soak (``make soak``), not part of
``make test``; v1.20 has bound tokens only behind a feature gate.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodes import workloads as w
from tests.nodes.cluster import STABLE, NodeCluster, missing, running_node_cluster
from tests.nodes.install import USER, Install, image_archive
from tests.realserver.fixtures import REQUIRE_ENV, required
from tests.ship.helm import helm_binary

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.timeout(1800)]

RELEASE = "v1.37.2"
LIFE_S = 600
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The projected token of the default ServiceAccount volume, but ten minutes long.
TOKEN_PATCH = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "zombied"},
    "spec": {
        "template": {
            "spec": {
                "automountServiceAccountToken": False,
                "volumes": [
                    {
                        "name": "token",
                        "projected": {
                            "sources": [
                                {
                                    "serviceAccountToken": {
                                        "path": "token",
                                        "expirationSeconds": LIFE_S,
                                    }
                                },
                                {
                                    "configMap": {
                                        "name": "kube-root-ca.crt",
                                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                    }
                                },
                                {
                                    "downwardAPI": {
                                        "items": [
                                            {
                                                "path": "namespace",
                                                "fieldRef": {"fieldPath": "metadata.namespace"},
                                            }
                                        ]
                                    }
                                },
                            ]
                        },
                    }
                ],
                "containers": [
                    {
                        "name": "zombied",
                        "imagePullPolicy": "Never",
                        "volumeMounts": [
                            {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}
                        ],
                    }
                ],
            }
        }
    },
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    reason = missing(RELEASE)
    if reason is not None:
        if required():
            pytest.fail(f"nodes of {RELEASE} are required ({REQUIRE_ENV}=1) but {reason}")
        pytest.skip(f"nodes of {RELEASE}: {reason}")
    with running_node_cluster(tmp_path_factory.mktemp("token-"), RELEASE) as running:
        yield running


def _tokens(cluster: NodeCluster) -> dict[str, str]:
    """The token files the stable node's kubelet wrote for zombied's pods (on the
    volumes it mounted, in the node's mount namespace)."""
    node = cluster.nodes[STABLE]
    pattern = f"{node.directory}/kubelet/pods/*/volumes/kubernetes.io~projected/token/token"
    out = node.run("sh", "-c", f'for f in {pattern}; do [ -f "$f" ] && echo "$f $(cat "$f")"; done')
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _expiry(token: str) -> float:
    payload = token.split(".")[1]
    return float(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"])


def test_zombied_reaps_after_its_first_token_expired(cluster: NodeCluster, tmp_path: Path) -> None:
    archive, image = image_archive()
    cluster.nodes[STABLE].import_image(archive)
    install = Install(cluster, tmp_path, image, helm_binary())
    overlay = install.kustomization("", [], [TOKEN_PATCH])
    install.kubectl("apply", "-k", str(overlay))
    install.wait(install.leader, "a leader")
    first = _tokens(cluster)
    assert first
    expired = max(_expiry(token) for token in first.values())
    install.wait(
        lambda: time.time() > expired + 5, "the first tokens to expire", timeout=LIFE_S + 60
    )
    assert all(_tokens(cluster).get(path) != token for path, token in first.items())

    # A pod bound to the stable node that it cannot run: rejected, then reaped.
    install.kubectl("create", "namespace", "late")
    spec = w.pod_spec(w.GRACEFUL, node=STABLE)
    spec["nodeSelector"] = {"no-such-label": "true"}
    install.kubectl(
        "--namespace", "late", "create", "-f", "-", stdin=json.dumps(w.pod("rejected", spec))
    )
    install.wait(
        lambda: any(
            e["user"]["username"] == USER and e["responseStatus"]["code"] == 200
            for e in cluster.audit(verb="delete", resource="pods", namespace="late")
        ),
        "zombied to reap the rejected pod",
        timeout=400,
    )
    events = [e.get("event") for e in install.logs()]
    assert "api.unauthorized" not in events
    assert install.leader() is not None
