"""Pod objects as the kubelet leaves them, for tests that drive the simulator directly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


def stamp(at: datetime | None = None, *, ago: float = 0.0) -> str:
    moment = (at or datetime.now(UTC)) - timedelta(seconds=ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    namespace: str = "team-a",
    *,
    node: str = "node-1",
    phase: str = "Running",
    reason: str | None = None,
    message: str | None = None,
    owner: tuple[str, str] | None = ("ReplicaSet", "web-7d4f"),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finished_ago: float | None = 60.0,
    at: datetime | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A pod dict; terminal phases get a container terminated ``finished_ago`` seconds
    before ``at`` (default: the moment of the call). Without ``uid`` the server gives one."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {"app": "web"}),
    }
    if uid is not None:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": f"owner-{owner[1]}",
                "controller": True,
            }
        ]
    status: dict[str, Any] = {"phase": phase}
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    if phase in ("Failed", "Succeeded") and finished_ago is not None:
        status["containerStatuses"] = [
            {
                "name": "app",
                "ready": False,
                "restartCount": 0,
                "image": "nginx",
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 137 if phase == "Failed" else 0,
                        "reason": "Error" if phase == "Failed" else "Completed",
                        "finishedAt": stamp(at, ago=finished_ago),
                        "startedAt": stamp(at, ago=finished_ago + 3600),
                    }
                },
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx"}]},
        "status": status,
    }


def zombie(name: str, namespace: str = "team-a", **kwargs: Any) -> dict[str, Any]:
    """A pod killed by a 1.22+ graceful node shutdown."""
    kwargs.setdefault("phase", "Failed")
    kwargs.setdefault("reason", "Terminated")
    kwargs.setdefault("message", SHUTDOWN_MESSAGE)
    return pod(name, namespace, **kwargs)


def evicted(name: str, namespace: str = "team-a", **kwargs: Any) -> dict[str, Any]:
    """A pod evicted for node pressure (not a node-shutdown zombie)."""
    kwargs.setdefault("message", "The node was low on resource: memory.")
    return pod(name, namespace, phase="Failed", reason="Evicted", **kwargs)
