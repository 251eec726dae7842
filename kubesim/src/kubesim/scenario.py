"""Simulated cluster life: nodes, namespaces, workloads, and node shutdowns.

This module owns what the kubelet and the workload controllers would write to the
API server: realistic Node, Namespace and Pod objects (owner references, labels,
containers, conditions), the status a kubelet leaves on pods when its node shuts
down (exactly per Kubernetes version, see :func:`shutdown_status`), and the
replacements controllers create afterwards. The builders are pure functions on
plain dicts; :class:`Cluster` drives a store through its synchronous
create/get/list/update/delete interface and holds only what a controller would
remember (which StatefulSet pods still wait for their zombie to go away).

It never speaks HTTP and never deletes a zombie by itself: reaping is zombied's job.
Building 100k pods must take seconds, so pod dicts are written as literals, not
assembled by deep copies, and :meth:`Cluster.build` hands them over in one
``store.create_many(resource, objects)`` call when the store offers one (objects
handed over, not copied; same effects as ``create`` each).
"""

from __future__ import annotations

import copy
import gc
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from kubesim.recorded import RELEASES, RecordedPod, recorded

JSONDict = dict[str, Any]

DEFAULT_NAMESPACES = ("team-a", "team-b", "team-c")
VARIANTS = ("terminated", "rejected", "succeeded")
#: The minor version "newest" stands for.
NEWEST_MINOR = 37
#: The releases whose kubelets were recorded (`kubesim.recorded`): for these minors the
#: simulated kubelet replays what the real one wrote; for the others it follows the
#: kubelet's strings as documented, by era.
RECORDED_MINORS = {int(release.split(".")[1]): release for release in RELEASES}
#: The recorded role that shows each variant of a node shutdown, and each rejection.
_VARIANT_ROLES = {"terminated": "stubborn", "succeeded": "graceful", "rejected": "late"}
_REJECTION_ROLES = {"NodeAffinity": "selector", "OutOfcpu": "cpu-second"}
#: First minor where the kubelet keeps ``Succeeded`` for pods whose containers exited 0.
SUCCEEDED_SINCE_MINOR = 29

# The kubelet's own strings (pkg/kubelet/nodeshutdown), by era.
SHUTDOWN_MESSAGE_OLD = "Node is shutting, evicting pods"
REJECTED_MESSAGE_OLD = "Pod Node is in progress of shutting down, not admitting any new pods"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
REJECTED_MESSAGE = "Pod Pod was rejected as the node is shutting down."
EVICTED_MESSAGE = "The node was low on resource: memory."

# The kubelet's admission rejections (pkg/kubelet/lifecycle/predicate.go, the device
# manager), for a node that returns under the same name. rejectPod prefixes the message
# with "Pod " up to 1.25 and "Pod was rejected: " since 1.26; since 1.31 a failed
# predicate names its description too.
ADMISSION_REASONS = (
    "NodeAffinity",
    "NodePorts",
    "NodeName",
    "TaintToleration",
    "OutOfcpu",
    "OutOfmemory",
    "OutOfpods",
    "OutOfnvidia.com/gpu",
    "UnexpectedAdmissionError",
)
REJECTED_PREFIX_SINCE_MINOR = 26
PREDICATE_DESCRIPTION_SINCE_MINOR = 31
_PREDICATE_DESCRIPTIONS = {
    "NodeAffinity": "node(s) didn't match Pod's node affinity/selector",
    "NodePorts": "node(s) didn't have free ports for the requested pod ports",
    "NodeName": "node(s) didn't match the requested node name",
    "TaintToleration": "node(s) had untolerated taint(s)",
}
_RESOURCE_USAGE = {
    "cpu": (500, 3800, 4000),
    "memory": (536870912, 16106127360, 16487464960),
    "pods": (1, 110, 110),
    "nvidia.com/gpu": (1, 1, 1),
}

# Kubernetes' generateName alphabet (no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

_OWNER_API_VERSIONS = {
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
}

_APPS = (
    "api",
    "frontend",
    "worker",
    "cache",
    "auth",
    "billing",
    "search",
    "mailer",
    "ingest",
    "reports",
)


class Store(Protocol):
    """The part of the simulator's store a scenario needs."""

    def create(self, resource: str, obj: JSONDict) -> JSONDict: ...
    def get(self, resource: str, namespace: str, name: str) -> JSONDict | None: ...
    def list(self, resource: str, namespace: str | None = None) -> list[JSONDict]: ...
    def update(self, resource: str, obj: JSONDict) -> JSONDict: ...
    def delete(self, resource: str, namespace: str, name: str) -> JSONDict: ...


class PodRef(NamedTuple):
    namespace: str
    name: str
    uid: str


class Owner(NamedTuple):
    """A pod's controller: kind (ReplicaSet, StatefulSet, Job, DaemonSet), name, uid."""

    kind: str
    name: str
    uid: str


# --- Kubernetes versions ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShutdownStatus:
    """What the kubelet writes on a pod when its node shuts down."""

    phase: str
    reason: str
    message: str
    disruption_target: bool


def parse_minor(version: str) -> int:
    """``"1.22"``, ``"v1.26.3"`` or ``"newest"`` -> the minor version number."""
    text = version.strip().lower().removeprefix("v")
    if text in ("newest", "latest"):
        return NEWEST_MINOR
    parts = text.split(".")
    if len(parts) < 2 or parts[0] != "1" or not parts[1].isdigit():
        raise ValueError(f"version must look like 1.22 or 'newest', got {version!r}")
    minor = int(parts[1])
    if minor < 20:
        raise ValueError(f"graceful node shutdown exists since Kubernetes 1.20, got {version!r}")
    return minor


def shutdown_status(version: str, variant: str = "terminated") -> ShutdownStatus:
    """The kubelet's node-shutdown status for a Kubernetes version.

    ``terminated``: a running pod killed by graceful node shutdown; ``rejected``: a pod
    refused admission while the node shuts down; ``succeeded``: a pod whose containers
    exited 0 during the shutdown, which newer kubelets leave ``Succeeded``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    minor = parse_minor(version)
    written = _written(minor, variant)
    if written is not None:
        status = written.pod["status"]
        return ShutdownStatus(
            status["phase"],
            status.get("reason", ""),
            status.get("message", ""),
            disruption_target=any(
                c["type"] == "DisruptionTarget" for c in status.get("conditions", [])
            ),
        )
    if minor <= 21:
        if variant == "succeeded":
            raise ValueError(f"kubelet {version} never leaves a shut-down pod Succeeded")
        message = SHUTDOWN_MESSAGE_OLD if variant == "terminated" else REJECTED_MESSAGE_OLD
        return ShutdownStatus("Failed", "Shutdown", message, disruption_target=False)
    if variant == "rejected":
        return ShutdownStatus("Failed", "NodeShutdown", REJECTED_MESSAGE, disruption_target=False)
    if variant == "succeeded" and minor < SUCCEEDED_SINCE_MINOR:
        raise ValueError(
            f"kubelet {version} marks shut-down pods Failed; 'succeeded' needs "
            f"1.{SUCCEEDED_SINCE_MINOR} or newer"
        )
    phase = "Succeeded" if variant == "succeeded" else "Failed"
    return ShutdownStatus(phase, "Terminated", SHUTDOWN_MESSAGE, disruption_target=minor >= 26)


@dataclass(frozen=True, slots=True)
class AdmissionStatus:
    """What the kubelet writes on a pod it refuses to admit."""

    phase: str
    reason: str
    message: str


def admission_status(version: str, reason: str = "NodeAffinity") -> AdmissionStatus:
    """The kubelet's admission rejection of ``reason`` for a Kubernetes version.

    ``UnexpectedAdmissionError`` is a device plugin not yet healthy (GPUs): 1.20-1.21
    imitate the predicate handler's "Update plugin resources" message, newer versions
    the device manager's "Allocate" one (both shapes exist in every version).
    """
    minor = parse_minor(version)
    if reason in _PREDICATE_DESCRIPTIONS:
        body = f"Predicate {reason} failed"
        if minor >= PREDICATE_DESCRIPTION_SINCE_MINOR:
            body += f": {_PREDICATE_DESCRIPTIONS[reason]}"
    elif reason.startswith("OutOf") and len(reason) > len("OutOf"):
        resource = reason.removeprefix("OutOf")
        requested, used, capacity = _RESOURCE_USAGE.get(resource, (1, 1, 1))
        body = (
            f"Node didn't have enough resource: {resource}, requested: {requested}, "
            f"used: {used}, capacity: {capacity}"
        )
    elif reason == "UnexpectedAdmissionError":
        if minor <= 21:
            body = (
                "Update plugin resources failed due to requested number of devices "
                "unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected."
            )
        else:
            body = (
                "Allocate failed due to no healthy devices present; cannot allocate "
                "unhealthy devices nvidia.com/gpu, which is unexpected"
            )
    else:
        raise ValueError(
            f"reason must be one of {', '.join(ADMISSION_REASONS)} or OutOf<resource>, "
            f"got {reason!r}"
        )
    prefix = "Pod was rejected: " if minor >= REJECTED_PREFIX_SINCE_MINOR else "Pod "
    return AdmissionStatus("Failed", reason, prefix + body)


# --- pure builders ------------------------------------------------------------------------


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid(rng: random.Random) -> str:
    """A version-4 UUID string drawn from ``rng`` (reproducible, unlike uuid4)."""
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def name_suffix(rng: random.Random, length: int = 5) -> str:
    """A generateName-style suffix (``x7k2p``)."""
    return "".join(rng.choices(_SUFFIX_ALPHABET, k=length))


def namespace_object(name: str) -> JSONDict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def node_object(name: str, *, now: datetime, zone: str = "europe-west1-b") -> JSONDict:
    """A Ready, schedulable node of a Spot pool."""
    ts = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "e2-standard-4",
                "topology.kubernetes.io/zone": zone,
                "cloud.google.com/gke-spot": "true",
            },
        },
        "spec": {"podCIDR": "10.4.0.0/24"},
        "status": {
            "conditions": [
                _condition("MemoryPressure", "False", ts, "KubeletHasSufficientMemory"),
                _condition("DiskPressure", "False", ts, "KubeletHasNoDiskPressure"),
                _condition("PIDPressure", "False", ts, "KubeletHasSufficientPID"),
                _condition("Ready", "True", ts, "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.132.0.2"},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": {"cpu": "3920m", "memory": "13Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "nodeInfo": {
                "kubeletVersion": f"v1.{NEWEST_MINOR}.1",
                "containerRuntimeVersion": "containerd://1.7.24",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def shutting_down_node(node: JSONDict, *, now: datetime) -> JSONDict:
    """``node`` cordoned and NotReady, as during a Spot preemption."""
    out = copy.deepcopy(node)
    ts = rfc3339(now)
    spec = out.setdefault("spec", {})
    spec["unschedulable"] = True
    taints = [t for t in spec.get("taints", []) if not t["key"].startswith("node.kubernetes.io/")]
    taints += [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": ts},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": ts},
    ]
    spec["taints"] = taints
    conditions = [
        c for c in out.setdefault("status", {}).get("conditions", []) if c["type"] != "Ready"
    ]
    conditions.append(_condition("Ready", "False", ts, "KubeletNotReady", "node is shutting down"))
    out["status"]["conditions"] = conditions
    return out


def node_ready(node: JSONDict) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions", []):
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _condition(
    kind: str, status: str, ts: str, reason: str | None = None, message: str | None = None
) -> JSONDict:
    cond: JSONDict = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": ts,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def pod_object(
    namespace: str,
    name: str,
    *,
    node: str,
    app: str,
    owner: Owner | None,
    now: datetime,
    rng: random.Random,
    labels: dict[str, str] | None = None,
    running: bool = True,
    image: str | None = None,
    pod_ip: str | None = None,
) -> JSONDict:
    """A scheduled pod, Running (Ready) or Pending (containers being created)."""
    ts = rfc3339(now)
    image = image or f"registry.example.com/{app}:1.4.2"
    all_labels = {"app.kubernetes.io/name": app, **(labels or {})}
    metadata: JSONDict = {
        "name": name,
        "namespace": namespace,
        "labels": all_labels,
        "creationTimestamp": ts,
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": _OWNER_API_VERSIONS[owner.kind],
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        if owner.kind == "ReplicaSet":
            metadata["generateName"] = f"{owner.name}-"
    spec: JSONDict = {
        "containers": [
            {
                "name": app,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "nodeName": node,
        "restartPolicy": "Never" if owner is not None and owner.kind == "Job" else "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    if owner is not None and owner.kind == "StatefulSet":
        spec["hostname"] = name
        spec["subdomain"] = owner.name
    if owner is not None and owner.kind == "DaemonSet":
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        }
    ip = pod_ip or f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    container_id = f"containerd://{rng.getrandbits(256):064x}"
    image_id = f"registry.example.com/{app}@sha256:{rng.getrandbits(256):064x}"
    ready = "True" if running else "False"
    status: JSONDict = {
        "phase": "Running" if running else "Pending",
        "conditions": [
            _condition("PodReadyToStartContainers", ready, ts),
            _condition("Initialized", "True", ts),
            _condition("Ready", ready, ts, None if running else "ContainersNotReady"),
            _condition("ContainersReady", ready, ts, None if running else "ContainersNotReady"),
            _condition("PodScheduled", "True", ts),
        ],
        "hostIP": "10.132.0.2",
        "hostIPs": [{"ip": "10.132.0.2"}],
        "podIP": ip if running else None,
        "podIPs": [{"ip": ip}] if running else [],
        "startTime": ts,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": app,
                "image": image,
                "imageID": image_id if running else "",
                "containerID": container_id if running else None,
                "ready": running,
                "restartCount": 0,
                "started": running,
                "state": (
                    {"running": {"startedAt": ts}}
                    if running
                    else {"waiting": {"reason": "ContainerCreating"}}
                ),
                "lastState": {},
            }
        ],
    }
    if not running:
        del status["podIP"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def _terminal(
    pod: JSONDict,
    *,
    phase: str,
    reason: str | None,
    message: str | None,
    exit_code: int,
    container_reason: str,
    now: datetime,
    extra_conditions: Sequence[JSONDict] = (),
    container_message: str | None = None,
) -> JSONDict:
    out = copy.deepcopy(pod)
    ts = rfc3339(now)
    status = out.setdefault("status", {})
    status["phase"] = phase
    for key, value in (("reason", reason), ("message", message)):
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    conditions = []
    for cond in status.get("conditions", []):
        if cond["type"] in ("Ready", "ContainersReady"):
            conditions.append(_condition(cond["type"], "False", ts, "PodCompleted"))
        elif cond["type"] == "PodReadyToStartContainers":
            conditions.append(_condition(cond["type"], "False", ts))
        else:
            conditions.append(cond)
    added = {c["type"] for c in extra_conditions}
    conditions = [c for c in conditions if c["type"] not in added]
    conditions.extend(extra_conditions)
    status["conditions"] = conditions
    statuses = []
    for cs in status.get("containerStatuses", []):
        started_at = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        terminated: JSONDict = {
            "exitCode": exit_code,
            "reason": container_reason,
            "finishedAt": ts,
        }
        if started_at:
            terminated["startedAt"] = started_at
        if container_message:
            terminated["message"] = container_message
        if cs.get("containerID"):
            terminated["containerID"] = cs["containerID"]
        statuses.append(
            {**cs, "ready": False, "started": False, "state": {"terminated": terminated}}
        )
    status["containerStatuses"] = statuses
    return out


def _recorded(minor: int, role: str) -> RecordedPod | None:
    """The pod of ``role`` as the recorded kubelet of ``minor`` wrote it, if recorded and
    that kubelet ended it (a 1.20 kubelet admitted a pod bound during its shutdown)."""
    release = RECORDED_MINORS.get(minor)
    if release is None:
        return None
    written = next(pod for pod in recorded(release) if pod.role == role)
    return written if written.pod["status"].get("phase") in ("Succeeded", "Failed") else None


def _written(minor: int, variant: str) -> RecordedPod | None:
    """The recorded pod a shutdown ``variant`` replays on ``minor``: its own release's,
    else, for a pod left Succeeded, the newest recorded kubelet's (the code that leaves
    it so is the same since 1.29)."""
    role = _VARIANT_ROLES[variant]
    written = _recorded(minor, role)
    if written is None and variant == "succeeded" and minor >= SUCCEEDED_SINCE_MINOR:
        written = _recorded(max(RECORDED_MINORS), role)
    return written


def _times(value: Any) -> list[datetime]:
    if isinstance(value, dict):
        return [moment for item in value.values() for moment in _times(item)]
    if isinstance(value, list):
        return [moment for item in value for moment in _times(item)]
    if isinstance(value, str) and len(value) == 20 and value.endswith("Z") and value[10] == "T":
        return [datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)]
    return []


def _shifted(value: Any, by: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shifted(item, by) for key, item in value.items()}
    if isinstance(value, list):
        return [_shifted(item, by) for item in value]
    moments = _times(value)
    return rfc3339(moments[0] + by) if moments else value


def replay(pod: JSONDict, written: RecordedPod, *, now: datetime) -> JSONDict:
    """``pod`` with the status (and the kubelet's write in ``managedFields``) that a real
    kubelet wrote on ``written``'s pod, its last time moved to ``now``; each container
    of ``pod`` gets the recorded container's state."""
    source = written.pod
    kubelet = [
        entry
        for entry in source["metadata"].get("managedFields", [])
        if entry["manager"] == "kubelet"
    ]
    last = max(_times(source["status"]) + _times(kubelet))
    status = _shifted(source["status"], now - last)
    template = (status.get("containerStatuses") or [None])[0]
    out = copy.deepcopy(pod)
    if template is not None:
        status["containerStatuses"] = [
            {**template, "name": cs["name"], "image": cs.get("image", template["image"])}
            for cs in out.get("status", {}).get("containerStatuses", [])
        ]
    out["status"] = status
    out["metadata"]["managedFields"] = [
        *(e for e in out["metadata"].get("managedFields", []) if e.get("manager") != "kubelet"),
        *_shifted(kubelet[-1:], now - last),
    ]
    return out


def shutdown_pod(
    pod: JSONDict, *, version: str = "1.22", variant: str = "terminated", now: datetime
) -> JSONDict:
    """``pod`` as the kubelet of ``version`` leaves it after a graceful node shutdown."""
    shut = shutdown_status(version, variant)
    written = _written(parse_minor(version), variant)
    if written is not None:
        return replay(pod, written, now=now)
    extra = []
    if shut.disruption_target:
        extra.append(
            _condition(
                "DisruptionTarget", "True", rfc3339(now), "TerminationByKubelet", shut.message
            )
        )
    if variant == "rejected":
        # Never started: the kubelet reports the containers as lost, not as exited.
        return _lost(pod, shut, now=now, extra_conditions=extra)
    succeeded = variant == "succeeded"
    return _terminal(
        pod,
        phase=shut.phase,
        reason=shut.reason,
        message=shut.message,
        exit_code=0 if succeeded else 143,
        container_reason="Completed" if succeeded else "Error",
        now=now,
        extra_conditions=extra,
    )


def rejected_pod(
    pod: JSONDict, *, version: str = "1.22", reason: str = "NodeAffinity", now: datetime
) -> JSONDict:
    """``pod`` as the kubelet of a node that came back under the same name rejects it.

    The VM was recreated: the old containers are gone, so they are reported lost.
    """
    status = admission_status(version, reason)
    role = _REJECTION_ROLES.get(reason)
    written = _recorded(parse_minor(version), role) if role is not None else None
    if written is not None:
        return replay(pod, written, now=now)
    return _lost(pod, status, now=now)


def _lost(
    pod: JSONDict,
    ended: ShutdownStatus | AdmissionStatus,
    *,
    now: datetime,
    extra_conditions: Sequence[JSONDict] = (),
) -> JSONDict:
    """``pod`` terminal with ``ended``'s phase, reason and message, its containers lost."""
    return _terminal(
        pod,
        phase=ended.phase,
        reason=ended.reason,
        message=ended.message,
        exit_code=137,
        container_reason="ContainerStatusUnknown",
        container_message="The container could not be located when the pod was terminated",
        now=now,
        extra_conditions=extra_conditions,
    )


def evicted_pod(pod: JSONDict, *, now: datetime) -> JSONDict:
    """``pod`` evicted by the kubelet under node memory pressure."""
    return _terminal(
        pod,
        phase="Failed",
        reason="Evicted",
        message=EVICTED_MESSAGE,
        exit_code=137,
        container_reason="Error",
        now=now,
    )


def failed_pod(pod: JSONDict, *, reason: str = "Error", now: datetime) -> JSONDict:
    """``pod`` whose containers exited non-zero (pod phase Failed, no pod-level reason)."""
    return _terminal(
        pod,
        phase="Failed",
        reason=None,
        message=None,
        exit_code=1,
        container_reason=reason,
        now=now,
    )


def succeeded_pod(pod: JSONDict, *, now: datetime) -> JSONDict:
    """``pod`` whose containers all exited 0."""
    return _terminal(
        pod,
        phase="Succeeded",
        reason=None,
        message=None,
        exit_code=0,
        container_reason="Completed",
        now=now,
    )


def owner_of(pod: JSONDict) -> Owner | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return Owner(str(ref.get("kind")), str(ref.get("name")), str(ref.get("uid")))
    return None


def replacement_pod(
    pod: JSONDict, *, name: str, node: str, now: datetime, rng: random.Random
) -> JSONDict:
    """A fresh Running pod for the same owner and template as ``pod``, on ``node``."""
    meta = pod["metadata"]
    container = pod["spec"]["containers"][0]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != "app.kubernetes.io/name"}
    if "statefulset.kubernetes.io/pod-name" in labels:
        labels["statefulset.kubernetes.io/pod-name"] = name
    return pod_object(
        meta["namespace"],
        name,
        node=node,
        app=container["name"],
        owner=owner_of(pod),
        now=now,
        rng=rng,
        labels=labels,
        image=container["image"],
    )


# --- the cluster driver -------------------------------------------------------------------


@dataclass
class BuildResult:
    nodes: list[str]
    namespaces: list[str]
    pods: int
    by_owner: dict[str, int]


@dataclass
class PreemptResult:
    """What a node shutdown did.

    ``zombies``: pods the kubelet left terminal (zombied's prey). ``replacements``:
    pods controllers created on other nodes right away (ReplicaSet, Job).
    ``awaiting_replacement``: StatefulSet zombies whose name is recreated (new uid)
    only once the zombie is deleted (:meth:`Cluster.replace_deleted`).
    ``not_replaced``: DaemonSet and bare pods.
    """

    node: str
    version: str
    variant: str  # a shutdown variant, or "returned" for a node back under its name
    zombies: list[PodRef] = field(default_factory=list)
    replacements: list[PodRef] = field(default_factory=list)
    awaiting_replacement: list[PodRef] = field(default_factory=list)
    not_replaced: list[PodRef] = field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    nodes: int
    pods: int
    namespaces: tuple[str, ...]


def _team_namespaces(count: int) -> tuple[str, ...]:
    return tuple(f"team-{i:03d}" for i in range(count))


SCENARIOS: dict[str, Scenario] = {
    "small": Scenario(3, 30, DEFAULT_NAMESPACES),
    "demo": Scenario(3, 30, DEFAULT_NAMESPACES),
    "medium": Scenario(100, 10_000, _team_namespaces(20)),
    "large": Scenario(1_000, 100_000, _team_namespaces(100)),
}


def build_named(cluster: Cluster, name: str) -> BuildResult:
    """Build the named scenario (``small``, ``demo``, ``medium``, ``large``)."""
    try:
        scenario = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r} (expected {', '.join(SCENARIOS)})") from None
    return cluster.build(nodes=scenario.nodes, pods=scenario.pods, namespaces=scenario.namespaces)


@dataclass
class _Plan:
    daemonset: int
    statefulset: int
    job: int
    bare: int
    replicaset: int


def _plan(pods: int, nodes: int) -> _Plan:
    daemonset = nodes if pods >= 2 * nodes else 0
    rest = pods - daemonset
    statefulset = min(rest, max(3, rest // 30)) if rest >= 10 else 0
    job = min(rest - statefulset, max(2, rest // 20)) if rest >= 10 else 0
    bare = min(rest - statefulset - job, max(1, rest // 50))
    return _Plan(daemonset, statefulset, job, bare, rest - statefulset - job - bare)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _Batch:
    """One :meth:`Cluster.build` call: where the next pod goes and what was made."""

    def __init__(
        self,
        cluster: Cluster,
        nodes: Sequence[str],
        namespaces: Sequence[str],
        *,
        now: datetime,
        running: bool,
    ) -> None:
        self.cluster = cluster
        self.rng = cluster.rng
        self.nodes = nodes
        self.namespaces = namespaces
        self.now = now
        self.running = running
        self.slot = 0
        self.counts = {"DaemonSet": 0, "StatefulSet": 0, "Job": 0, "bare": 0, "ReplicaSet": 0}
        self.pending: list[JSONDict] = []

    def create(
        self,
        namespace: str,
        name: str,
        app: str,
        owner: Owner | None,
        labels: dict[str, str],
        *,
        node: str | None = None,
    ) -> None:
        if node is None:
            node = self.nodes[self.slot % len(self.nodes)]
            self.slot += 1
        pod = pod_object(
            namespace,
            name,
            node=node,
            app=app,
            owner=owner,
            now=self.now,
            rng=self.rng,
            labels=labels,
            running=self.running,
        )
        self.cluster._names.add((namespace, name))
        self.pending.append(pod)
        self.counts[owner.kind if owner else "bare"] += 1

    def flush(self) -> None:
        """Hand the pods to the store, in one call when it offers ``create_many``."""
        create_many = getattr(self.cluster.store, "create_many", None)
        if callable(create_many):
            create_many("pods", self.pending)
        else:
            for pod in self.pending:
                self.cluster.store.create("pods", pod)
        self.pending = []

    def unique(self, namespace: str, prefix: str) -> str:
        return self.cluster._unique(namespace, prefix)

    def daemonset(self) -> None:
        """One pod per node, in the first namespace."""
        ns = self.namespaces[0]
        ds = Owner("DaemonSet", "node-agent", new_uid(self.rng))
        labels = {
            "controller-revision-hash": name_suffix(self.rng, 10),
            "pod-template-generation": "1",
        }
        for node in self.nodes:
            self.create(ns, self.unique(ns, f"{ds.name}-"), ds.name, ds, labels, node=node)

    def statefulsets(self, total: int) -> None:
        """``web`` StatefulSets of ~30 replicas, one per namespace from the second on."""
        if not total:
            return
        count = min(len(self.namespaces), max(1, math.ceil(total / 30)))
        for k in range(count):
            ns = self.namespaces[(k + 1) % len(self.namespaces)]
            replicas = total // count + (1 if k < total % count else 0)
            sts = Owner("StatefulSet", "web", new_uid(self.rng))
            revision = f"web-{name_suffix(self.rng, 10)}"
            self.slot = 0  # web-0 on the first node, web-1 on the second...
            for ordinal in range(replicas):
                name = f"web-{ordinal}"
                labels = {
                    "controller-revision-hash": revision,
                    "statefulset.kubernetes.io/pod-name": name,
                    "apps.kubernetes.io/pod-index": str(ordinal),
                }
                self.create(ns, name, "web", sts, labels)

    def jobs(self, total: int) -> None:
        for j in range(total):
            ns = self.namespaces[j % len(self.namespaces)]
            job = Owner("Job", f"report-{29_000_000 + j}", new_uid(self.rng))
            labels = {
                "batch.kubernetes.io/job-name": job.name,
                "job-name": job.name,
                "batch.kubernetes.io/controller-uid": job.uid,
                "controller-uid": job.uid,
            }
            self.create(ns, self.unique(ns, f"{job.name}-"), "report", job, labels)

    def bare(self, total: int) -> None:
        for b in range(total):
            ns = self.namespaces[(b + 2) % len(self.namespaces)]
            self.create(ns, self.unique(ns, "debug-"), "toolbox", None, {})

    def replicasets(self, total: int) -> None:
        """ReplicaSets of ~5 replicas, named like Deployment-owned ones."""
        r = 0
        while total > 0:
            ns = self.namespaces[r % len(self.namespaces)]
            base = _APPS[(r // len(self.namespaces)) % len(_APPS)]
            generation = r // (len(self.namespaces) * len(_APPS))
            app = base if generation == 0 else f"{base}-{generation}"
            template_hash = name_suffix(self.rng, 10)
            rs = Owner("ReplicaSet", f"{app}-{template_hash}", new_uid(self.rng))
            for _ in range(min(5, total)):
                name = self.unique(ns, f"{rs.name}-")
                self.create(ns, name, app, rs, {"pod-template-hash": template_hash})
                total -= 1
            r += 1


class Cluster:
    """Drives a store like a cluster's kubelets and workload controllers would."""

    def __init__(
        self,
        store: Store,
        rng: random.Random | None = None,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.store = store
        self.rng = rng or random.Random(0)
        self._clock = clock
        self._names: set[tuple[str, str]] = set()
        # StatefulSet pods whose zombie must go before the controller recreates the name:
        # (namespace, name) -> the zombie as it was (uid and template).
        self._awaiting: dict[tuple[str, str], JSONDict] = {}

    # --- building -----------------------------------------------------------------------

    def build(
        self,
        nodes: int = 3,
        pods: int = 30,
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
        running: bool = True,
    ) -> BuildResult:
        """Create nodes, namespaces and pods spread over them with mixed owners.

        About 3% StatefulSet pods (``web-0``, ``web-1``... per namespace), 5% Job
        pods, 2% bare pods, one DaemonSet pod per node, the rest owned by
        ReplicaSets of ~5 replicas. Pods go round-robin over the new nodes.
        """
        if nodes < 1 or pods < 0:
            raise ValueError("need at least one node and a non-negative pod count")
        namespaces = tuple(namespaces)
        if not namespaces:
            raise ValueError("need at least one namespace")
        now = self._clock()
        existing_nodes = {n["metadata"]["name"] for n in self.store.list("nodes")}
        node_names: list[str] = []
        index = 0
        while len(node_names) < nodes:
            candidate = f"node-{index}"
            if candidate not in existing_nodes:
                node_names.append(candidate)
            index += 1
        existing_ns = {n["metadata"]["name"] for n in self.store.list("namespaces")}
        for ns in namespaces:
            if ns not in existing_ns:
                self.store.create("namespaces", namespace_object(ns))
        zones = ("europe-west1-b", "europe-west1-c", "europe-west1-d")
        for i, name in enumerate(node_names):
            self.store.create("nodes", node_object(name, now=now, zone=zones[i % len(zones)]))

        batch = _Batch(self, node_names, namespaces, now=now, running=running)
        plan = _plan(pods, nodes)
        # Millions of fresh, acyclic dicts: the cyclic collector would rescan them over
        # and over (more than half the build time at 100k pods) and can free none.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if plan.daemonset:
                batch.daemonset()
            batch.statefulsets(plan.statefulset)
            batch.jobs(plan.job)
            batch.bare(plan.bare)
            batch.replicasets(plan.replicaset)
            batch.flush()
        finally:
            if gc_was_enabled:
                gc.enable()
        counts = batch.counts
        return BuildResult(node_names, list(namespaces), sum(counts.values()), counts)

    def _unique(self, namespace: str, prefix: str) -> str:
        while True:
            name = prefix + name_suffix(self.rng)
            if (namespace, name) not in self._names:
                self._names.add((namespace, name))
                return name

    def _create_pod(self, pod: JSONDict) -> JSONDict:
        meta = pod["metadata"]
        self._names.add((meta["namespace"], meta["name"]))
        return self.store.create("pods", pod)

    # --- node shutdown and replacement --------------------------------------------------

    def preempt(
        self,
        node: str,
        version: str = "1.22",
        variant: str = "terminated",
        replace: bool = True,
    ) -> PreemptResult:
        """Shut ``node`` down: every running pod on it gets the kubelet's shutdown status."""
        shutdown_status(version, variant)  # validate before touching anything
        node_obj = self.store.get("nodes", "", node)
        if node_obj is None:
            raise ValueError(f"no node {node!r}")
        now = self._clock()
        self.store.update("nodes", shutting_down_node(node_obj, now=now))
        result = PreemptResult(node=node, version=version, variant=variant)
        targets = [
            p
            for p in self.pods_on(node)
            if (p.get("status") or {}).get("phase") in ("Running", "Pending")
            and not p["metadata"].get("deletionTimestamp")
        ]
        nodes = self._schedulable_nodes(exclude=node)
        for pod in targets:
            updated = self.store.update(
                "pods", shutdown_pod(pod, version=version, variant=variant, now=now)
            )
            self._left_dead(updated, result, nodes, replace=replace)
        return self._settled(result, replace=replace)

    def return_node(
        self,
        node: str,
        version: str = "1.22",
        reasons: Sequence[str] = ("NodeAffinity", "OutOfcpu", "UnexpectedAdmissionError"),
        replace: bool = True,
    ) -> PreemptResult:
        """Preempt ``node`` with no graceful shutdown, and bring it back under its name.

        The VM vanishes with its pods still ``Running``; the node object is recreated
        (new uid); controllers start replacements on other nodes; then the new kubelet
        rejects every pod still bound to it at admission, taking the reasons in turn.
        """
        for reason in reasons:
            admission_status(version, reason)  # validate before touching anything
        if not reasons:
            raise ValueError("need at least one admission reason")
        old = self.store.get("nodes", "", node)
        if old is None:
            raise ValueError(f"no node {node!r}")
        targets = [
            p
            for p in self.pods_on(node)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        nodes = self._schedulable_nodes(exclude=node)
        self.store.delete("nodes", "", node)
        now = self._clock()
        zone = old["metadata"].get("labels", {}).get("topology.kubernetes.io/zone", "")
        self.store.create("nodes", node_object(node, now=now, zone=zone or "europe-west1-b"))
        result = PreemptResult(node=node, version=version, variant="returned")
        for index, pod in enumerate(targets):
            reason = reasons[index % len(reasons)]
            updated = self.store.update(
                "pods", rejected_pod(pod, version=version, reason=reason, now=now)
            )
            self._left_dead(updated, result, nodes, replace=replace)
        return self._settled(result, replace=replace)

    def _left_dead(
        self, pod: JSONDict, result: PreemptResult, nodes: Sequence[str], *, replace: bool
    ) -> None:
        """Record a pod the kubelet ended, and what its controller does about it."""
        ref = _ref(pod)
        result.zombies.append(ref)
        owner = owner_of(pod)
        if owner is None or owner.kind == "DaemonSet":
            result.not_replaced.append(ref)
        elif owner.kind == "StatefulSet":
            # A StatefulSet recreates the same name once the old pod is gone.
            result.awaiting_replacement.append(ref)
            self._awaiting[(ref.namespace, ref.name)] = pod
        elif replace:
            created = self._replace(pod, nodes)
            if created is not None:
                result.replacements.append(created)

    def _settled(self, result: PreemptResult, *, replace: bool) -> PreemptResult:
        if not replace:
            for ref in result.awaiting_replacement:
                self._awaiting.pop((ref.namespace, ref.name), None)
        return result

    def _schedulable_nodes(self, exclude: str) -> list[str]:
        return [
            n["metadata"]["name"]
            for n in self.store.list("nodes")
            if n["metadata"]["name"] != exclude and node_ready(n)
        ]

    def _replace(
        self, zombie: JSONDict, nodes: Sequence[str], *, name: str | None = None
    ) -> PodRef | None:
        if not nodes:
            return None
        meta = zombie["metadata"]
        if name is None:
            owner = owner_of(zombie)
            prefix = f"{owner.name}-" if owner else f"{meta['name']}-"
            name = self._unique(meta["namespace"], prefix)
        pod = replacement_pod(
            zombie, name=name, node=self.rng.choice(nodes), now=self._clock(), rng=self.rng
        )
        return _ref(self._create_pod(pod))

    @property
    def awaiting_replacement(self) -> list[tuple[str, str]]:
        return sorted(self._awaiting)

    def pod_deleted(self, namespace: str, name: str) -> PodRef | None:
        """React to a pod deletion as the StatefulSet controller would.

        When ``namespace/name`` is a StatefulSet zombie waiting for its replacement and
        the name is free now, create the replacement (same name, new uid).
        """
        zombie = self._awaiting.get((namespace, name))
        if zombie is None:
            return None
        current = self.store.get("pods", namespace, name)
        if current is not None:
            if current["metadata"]["uid"] != zombie["metadata"]["uid"]:
                del self._awaiting[(namespace, name)]  # someone else recreated it
            return None
        node = (zombie.get("spec") or {}).get("nodeName", "")
        created = self._replace(zombie, self._schedulable_nodes(exclude=node), name=name)
        if created is not None:
            del self._awaiting[(namespace, name)]
        return created

    def replace_deleted(self) -> list[PodRef]:
        """Recreate every waiting StatefulSet pod whose zombie is gone."""
        created = []
        for namespace, name in list(self._awaiting):
            ref = self.pod_deleted(namespace, name)
            if ref is not None:
                created.append(ref)
        return created

    # --- single-pod events --------------------------------------------------------------

    def _pod(self, namespace: str, name: str) -> JSONDict:
        pod = self.store.get("pods", namespace, name)
        if pod is None:
            raise ValueError(f"no pod {namespace}/{name}")
        return pod

    def evict(self, namespace: str, name: str) -> JSONDict:
        """Node-pressure eviction: Failed / Evicted."""
        pod = self._pod(namespace, name)
        return self.store.update("pods", evicted_pod(pod, now=self._clock()))

    def fail(self, namespace: str, name: str, reason: str = "Error") -> JSONDict:
        """The containers exit 1 (``reason`` on the container's terminated state)."""
        pod = self._pod(namespace, name)
        return self.store.update("pods", failed_pod(pod, reason=reason, now=self._clock()))

    def pods_on(self, node: str) -> list[JSONDict]:
        """Copies of the pods bound to ``node``."""
        # The simulator's store indexes pods by node: a preemption in a 100k-pod
        # cluster must not decode, or even look at, every pod.
        pods_on_node = getattr(self.store, "pods_on_node", None)
        if callable(pods_on_node):
            found: list[JSONDict] = pods_on_node(node)
            return found
        return [p for p in self.store.list("pods") if p["spec"].get("nodeName") == node]


def _ref(pod: JSONDict) -> PodRef:
    meta = pod["metadata"]
    return PodRef(meta["namespace"], meta["name"], meta["uid"])


def refs(pods: Iterable[JSONDict]) -> list[PodRef]:
    return [_ref(p) for p in pods]
