"""Pods on the real kube-apiserver as kubelets leave them, and looking them up.

A pod is created bound to its node (``spec.nodeName``) and its status is then written
through the ``status`` subresource, as a kubelet writes it: the apiserver resets the
status of a created pod. Every kubelet variant of a node-shutdown zombie (design.md's
table) has a factory here, next to the pods zombied must leave alone.
"""

from __future__ import annotations

from typing import Any

from tests.daemon.pods import evicted, pod, stamp, zombie
from tests.realserver.cluster import RealCluster

KILLED_1_22 = "Pod was terminated in response to imminent node shutdown."


def _with_disruption(body: dict[str, Any]) -> dict[str, Any]:
    body["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": KILLED_1_22,
            "lastTransitionTime": stamp(ago=60),
        }
    ]
    return body


def zombies(namespace: str, prefix: str = "z") -> dict[str, dict[str, Any]]:
    """One zombie of every kubelet version's node-shutdown shape, by name."""
    variants = {
        "v120-killed": zombie(
            "", namespace, reason="Shutdown", message="Node is shutting, evicting pods"
        ),
        "v120-rejected": zombie(
            "",
            namespace,
            reason="Shutdown",
            message="Pod Node is in progress of shutting down, not admitting any new pods",
        ),
        "v122-killed": zombie("", namespace),
        "v122-rejected": zombie(
            "",
            namespace,
            reason="NodeShutdown",
            message="Pod Pod was rejected as the node is shutting down.",
        ),
        "v126-killed": _with_disruption(zombie("", namespace)),
        "newest-succeeded": _with_disruption(zombie("", namespace, phase="Succeeded")),
        "shutting-down": zombie(
            "", namespace, reason="Shutdown", message="Node is shutting down, evicting pods"
        ),
    }
    return {f"{prefix}-{key}": body for key, body in variants.items()}


def bystanders(namespace: str) -> dict[str, dict[str, Any]]:
    """Pods no default rule selects: evicted, a failed Job's, a completed one, running."""
    job = ("Job", "nightly")
    return {
        "evicted": evicted("", namespace),
        "failed-job": pod("", namespace, phase="Failed", reason=None, owner=job),
        "completed-job": pod("", namespace, phase="Succeeded", owner=job),
        "running": pod("", namespace, phase="Running"),
    }


def create_pod(cluster: RealCluster, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create ``body`` as ``name`` bound to its node, then write its status as a kubelet."""
    namespace = body["metadata"]["namespace"]
    manifest = {**body, "metadata": {**body["metadata"], "name": name}}
    status_body = manifest.pop("status")
    code, created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)
    assert code == 201, created
    code, updated = cluster.request(
        "PUT",
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        {**created, "status": status_body},
    )
    assert code == 200, updated
    result: dict[str, Any] = updated
    return result


def create_pods(cluster: RealCluster, pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Create every pod; their uids by name."""
    return {name: create_pod(cluster, name, body)["metadata"]["uid"] for name, body in pods.items()}


def get_pod(cluster: RealCluster, namespace: str, name: str) -> dict[str, Any] | None:
    code, body = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    if code == 404:
        return None
    assert code == 200, body
    result: dict[str, Any] = body
    return result


def pod_names(cluster: RealCluster, namespace: str) -> set[str]:
    code, body = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    assert code == 200, body
    return {item["metadata"]["name"] for item in body["items"]}
