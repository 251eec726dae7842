"""The workloads a Spot node runs in the scenarios, as users write them.

Every pod runs Debian's busybox on the host network of its node (``imagePullPolicy:
Never``: the image is imported, there is no registry). What a container does on SIGTERM
decides what the kubelet writes: ``GRACEFUL`` exits 0 as a well-behaved server does,
``STUBBORN`` (``sleep`` as PID 1 ignores SIGTERM) is killed at the end of its grace
period.
"""

from __future__ import annotations

from typing import Any

from tests.nodes.cluster import BUSYBOX, POOL, SPOT_LABEL

GRACEFUL = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
STUBBORN = ["sleep", "3600"]
#: What workloads meant for Spot nodes carry, as on GKE.
SPOT_TOLERATION = {"key": SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def container(command: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "main",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": command,
        **extra,
    }


def pod_spec(
    command: list[str],
    *,
    pool: str | None = None,
    node: str | None = None,
    restart: str = "Always",
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 30,
        "automountServiceAccountToken": False,
        "tolerations": [SPOT_TOLERATION],
        "containers": [container(command)],
        **extra,
    }
    if pool is not None:
        spec["nodeSelector"] = {POOL: pool}
    if node is not None:
        spec["nodeName"] = node
    return spec


def pod(name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def _template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": name}}, "spec": spec}


def deployment(name: str, spec: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": _template(name, spec),
        },
    }


def statefulset(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": _template(name, spec),
        },
    }


def daemonset(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": _template(name, spec)},
    }


def job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 6,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def collection(kind: str) -> str:
    """The API path segment of a kind's namespaced collection."""
    group = {"Pod": "api/v1", "Job": "apis/batch/v1"}.get(kind, "apis/apps/v1")
    return f"{group}/namespaces/{{namespace}}/{kind.lower()}s"
