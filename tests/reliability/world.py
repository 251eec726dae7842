"""A simulated cluster with a history, and an oracle of what zombied may delete.

`World` drives the simulator as kubelets, controllers and users would, and keeps its
own model of every pod uid (how and when it ended, owner, annotation, labels,
namespace). The safety and liveness checks judge zombied's deletes by that model alone,
written from design.md: nothing here asks `zombied.rules` for a decision, so a bug in
the rules cannot hide by agreeing with its own oracle. Every action is synchronous and
runs on the simulator's event loop.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from zombied.rules import RuleSet

from kubesim import Simulator
from kubesim.scenario import (
    Owner,
    evicted_pod,
    failed_pod,
    namespace_object,
    new_uid,
    node_object,
    node_ready,
    pod_object,
    shutdown_pod,
    succeeded_pod,
)

JSONDict = dict[str, Any]

NAMESPACES = ("team-a", "team-b", "kube-system")
EXCLUDED_NAMESPACES = ("kube-system",)
#: zombied runs with this label selector; pods labelled tier=precious are out of scope.
LABEL_SELECTOR = "tier!=precious"
OWNER_KINDS = ("ReplicaSet", "StatefulSet", "Job", "DaemonSet", None)
#: Once faults stop, every due zombie must be gone within this many seconds: the
#: watch backoff cap (30 s) is the longest zombied may legitimately wait.
LIVENESS_BOUND = 45.0

#: How a pod can end, as (model kind, builder). Node-shutdown variants per kubelet version.
SHUTDOWNS = (
    ("1.21", "terminated"),
    ("1.21", "rejected"),
    ("1.22", "terminated"),
    ("1.22", "rejected"),
    ("1.26", "terminated"),
    ("1.26", "rejected"),
    ("newest", "terminated"),
    ("newest", "succeeded"),
)
ENDINGS = (
    *(f"shutdown:{version}:{variant}" for version, variant in SHUTDOWNS),
    "evicted",
    "error",
    "oomkilled",
    "completed",
)

# The rules that fit a pod by how it ended, in design.md's precedence (the first enabled
# one decides the min age); written here from design.md, not from zombied.rules.
_MATCHING_RULES = {
    "shutdown": ("node-shutdown", "failed"),
    "shutdown-succeeded": ("node-shutdown",),  # phase Succeeded: the failed rule does not fit
    "evicted": ("evicted", "failed"),
    "error": ("failed",),
    "completed": (),
    "running": (),
}


def _kubelet_stamp(moment: float) -> float:
    """What a pod says of ``moment``: the kubelet writes RFC 3339 in whole seconds."""
    return float(math.floor(moment))


def _ended(pod: JSONDict, earliest: float, latest: float) -> tuple[float, float]:
    """When a pod that ended between ``earliest`` and ``latest`` can say it ended, read
    as design.md reads it: the latest container finishedAt, else the DisruptionTarget or
    Ready condition, else the kubelet's status write. A kubelet's own writes (replayed
    from the recorded corpus) can date the end a little before the moment it wrote them."""
    status = pod.get("status") or {}
    containers = [
        ((entry.get("state") or {}).get("terminated") or {}).get("finishedAt")
        for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
        for entry in status.get(key) or ()
    ]
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    turned = [
        conditions.get(kind, {}).get("lastTransitionTime")
        for kind, value in (("DisruptionTarget", "True"), ("Ready", "False"))
        if conditions.get(kind, {}).get("status") == value
    ]
    writes = [
        entry.get("time")
        for entry in pod["metadata"].get("managedFields") or ()
        if entry.get("manager") == "kubelet"
    ]
    for stamps in (containers, turned[:1], writes):
        times = [datetime.fromisoformat(t).timestamp() for t in stamps if isinstance(t, str)]
        if times:
            return min(earliest, _kubelet_stamp(max(times))), latest
    return earliest, latest


@dataclass
class PodModel:
    """What the driver did to one pod (one uid)."""

    namespace: str
    name: str
    uid: str
    kind: str = "running"  # a key of _MATCHING_RULES
    owner_kind: str = ""
    keep: bool = False
    precious: bool = False
    deleting: bool = False  # a graceful delete by someone else started
    #: The earliest and latest termination time the pod can carry (epoch seconds).
    ended: tuple[float, float] | None = None


@dataclass(frozen=True)
class Oracle:
    """design.md's rule for one configuration: which pods are zombies, and from when."""

    min_ages: dict[str, float]  # enabled rule -> min age
    excluded_owner_kinds: frozenset[str]  # case-folded

    @classmethod
    def of(cls, rules: RuleSet) -> Oracle:
        """The configuration zombied runs with, read as plain data."""
        return cls(
            {rule.name: rule.min_age for rule in rules.rules},
            frozenset(kind.casefold() for kind in rules.exclude_owner_kinds),
        )

    def due(self, model: PodModel) -> tuple[float, float] | None:
        """When zombied may delete the pod, earliest and latest; None: never."""
        if model.keep or model.precious or model.deleting or model.ended is None:
            return None
        if model.namespace in EXCLUDED_NAMESPACES:
            return None
        if model.owner_kind.casefold() in self.excluded_owner_kinds:
            return None
        rule = next((r for r in _MATCHING_RULES[model.kind] if r in self.min_ages), None)
        if rule is None:
            return None
        earliest, latest = model.ended
        return earliest + self.min_ages[rule], latest + self.min_ages[rule]


@dataclass(frozen=True)
class DeleteRequest:
    """A DELETE of a pod as it reached the server, before faults and handlers."""

    namespace: str
    name: str
    uid: str | None
    resource_version: str | None


@dataclass
class Figures:
    """What happened, for the closing summary line."""

    zombies: int = 0  # pods turned into selectable zombies by the driver
    reaped: int = 0  # zombied's accepted deletes


class World:
    """The cluster history driver and oracle around one `Simulator`.

    Create it before the simulator starts (it installs a request recorder), then call
    `start` once the simulator runs.
    """

    def __init__(self, sim: Simulator, rules: RuleSet, *, seed: int = 0) -> None:
        self.sim = sim
        self.oracle = Oracle.of(rules)
        self.rng = random.Random(seed)
        self.models: dict[str, PodModel] = {}  # uid -> model
        self.keys: set[str] = set()  # every namespace/name ever used
        self.delete_requests: list[DeleteRequest] = []
        self.violations: list[str] = []
        self.figures = Figures()
        self._checked = 0
        self._node_seq = 0
        self._pod_seq = 0
        sim.server.app.middlewares.append(self._record_delete)

    @web.middleware
    async def _record_delete(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        # /api/v1/namespaces/{ns}/pods/{name}
        if request.method == "DELETE" and len(parts) == 6 and parts[4] == "pods":
            body: Any = {}
            try:
                body = json.loads(await request.read() or b"{}")
            except ValueError:
                body = {}
            pre = body.get("preconditions") if isinstance(body, dict) else None
            pre = pre if isinstance(pre, dict) else {}
            self.delete_requests.append(
                DeleteRequest(parts[3], parts[5], pre.get("uid"), pre.get("resourceVersion"))
            )
        return await handler(request)

    # -- set-up -----------------------------------------------------------------------

    def start(self, *, nodes: int = 3, pods: int = 12) -> None:
        """Namespaces, Ready nodes and Running pods."""
        store = self.sim.store
        existing = {n["metadata"]["name"] for n in store.list("namespaces")}
        for ns in (*NAMESPACES, "default"):
            if ns not in existing:
                store.create("namespaces", namespace_object(ns))
        for _ in range(nodes):
            self.add_node()
        for i in range(pods):
            self.create_pod(i, i)

    # -- reading the cluster ------------------------------------------------------------

    def pods(self) -> list[JSONDict]:
        """Every pod, in a stable order (so an index picks the same pod on replay)."""
        return sorted(
            self.sim.store.list("pods"),
            key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]),
        )

    def _pick(self, index: int, *, phase: str | None = None) -> JSONDict | None:
        pods = self.pods()
        if phase is not None:
            pods = [p for p in pods if (p.get("status") or {}).get("phase") == phase]
        return pods[index % len(pods)] if pods else None

    def ready_nodes(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.sim.store.list("nodes") if node_ready(n))

    def _model(self, pod: JSONDict) -> PodModel:
        meta = pod["metadata"]
        model = self.models.get(meta["uid"])
        if model is None:  # created by the simulator's controllers (replacements)
            owner = next(iter(meta.get("ownerReferences") or ()), {})
            model = PodModel(
                meta["namespace"],
                meta["name"],
                meta["uid"],
                owner_kind=str(owner.get("kind") or ""),
                precious=(meta.get("labels") or {}).get("tier") == "precious",
            )
            self.models[model.uid] = model
            self.keys.add(f"{model.namespace}/{model.name}")
        return model

    # -- the driver: what kubelets, controllers and users do ----------------------------

    def add_node(self) -> str:
        name = f"spot-{self._node_seq}"
        self._node_seq += 1
        self.sim.store.create("nodes", node_object(name, now=datetime.now(UTC)))
        return name

    def create_pod(
        self,
        ns_index: int,
        owner_index: int,
        *,
        name: str | None = None,
        namespace: str | None = None,
        precious: bool = False,
    ) -> str | None:
        """A Running pod on a Ready node; None when no node is Ready."""
        nodes = self.ready_nodes()
        if not nodes:
            return None
        namespace = namespace or NAMESPACES[ns_index % len(NAMESPACES)]
        kind = OWNER_KINDS[owner_index % len(OWNER_KINDS)]
        owner = None if kind is None else Owner(kind, f"{kind.lower()}-x", new_uid(self.rng))
        if name is None:
            name = f"p{self._pod_seq}"
            self._pod_seq += 1
        labels = {"tier": "precious"} if precious else {"tier": "normal"}
        obj = pod_object(
            namespace,
            name,
            node=nodes[owner_index % len(nodes)],
            app="app",
            owner=owner,
            now=datetime.now(UTC),
            rng=self.rng,
            labels=labels,
        )
        created = self.sim.store.create("pods", obj)
        self._model(created)
        return f"{namespace}/{name}"

    def end_pod(
        self, index: int, ending: str, *, ago: float = 0.0, protect: str | None = None
    ) -> str | None:
        """A Running pod ends the way ``ending`` says (see `ENDINGS`), ``ago`` seconds ago.

        With ``protect`` (``keep`` or ``precious``) a user first annotates it or moves it
        out of the label selector, so it ends as a zombie zombied must leave alone.
        """
        pod = self._pick(index, phase="Running")
        if pod is None:
            return None
        if protect == "keep":
            pod = self._set_keep(pod, keep=True)
        elif protect == "precious":
            pod = self._relabel(pod, precious=True)
        self._end(pod, ending, ago=ago)
        return pod["metadata"]["name"]

    def _end(self, pod: JSONDict, ending: str, *, ago: float = 0.0) -> JSONDict:
        now = datetime.now(UTC) - timedelta(seconds=ago)
        if ending.startswith("shutdown:"):
            _, version, variant = ending.split(":")
            new = shutdown_pod(pod, version=version, variant=variant, now=now)
            kind = "shutdown-succeeded" if variant == "succeeded" else "shutdown"
        elif ending == "evicted":
            new, kind = evicted_pod(pod, now=now), "evicted"
        elif ending in ("error", "oomkilled"):
            reason = "Error" if ending == "error" else "OOMKilled"
            new, kind = failed_pod(pod, reason=reason, now=now), "error"
        elif ending == "completed":
            new, kind = succeeded_pod(pod, now=now), "completed"
        else:
            raise ValueError(f"unknown ending {ending!r}")
        updated = self.sim.store.update("pods", new, check_rv=False)
        model = self._model(updated)
        model.kind = kind
        stamp = _kubelet_stamp(now.timestamp())
        model.ended = _ended(updated, stamp, stamp)
        if self.oracle.due(model) is not None:
            self.figures.zombies += 1
        return updated

    def preempt(
        self, node_index: int, version: str, variant: str, *, remove_node: bool = False
    ) -> int:
        """A node shuts down: every Running pod on it ends; controllers replace them.

        A fresh node joins; with ``remove_node`` the shut-down node object goes away
        (as the cloud provider deletes the VM), so long runs do not pile nodes up.
        """
        nodes = self.ready_nodes()
        if len(nodes) < 2:
            self.add_node()
            nodes = self.ready_nodes()
        node = nodes[node_index % len(nodes)]
        before = time.time()
        result = self.sim.cluster.preempt(node, version=version, variant=variant)
        # The simulated kubelet reads its own clock in between.
        ended = (_kubelet_stamp(before), _kubelet_stamp(time.time()))
        for ref in result.zombies:
            current = self.sim.store.get("pods", ref.namespace, ref.name)
            if current is not None and current["metadata"]["uid"] != ref.uid:
                current = None  # replaced already
            model = self.models.get(ref.uid)
            if model is None:
                if current is None:
                    continue
                model = self._model(current)
            model.kind = "shutdown-succeeded" if variant == "succeeded" else "shutdown"
            model.ended = ended if current is None else _ended(current, *ended)
            if self.oracle.due(model) is not None:
                self.figures.zombies += 1
        for ref in result.replacements:
            current = self.sim.store.get("pods", ref.namespace, ref.name)
            if current is not None:
                self._model(current)
        self.add_node()  # the cloud provider brings a fresh node
        if remove_node:
            self.sim.store.delete("nodes", "", node)
        return len(result.zombies)

    def replace(self, index: int, ending: str | None) -> str | None:
        """Someone deletes a pod and a controller recreates the name (new uid).

        With ``ending`` the new pod ends at once (a StatefulSet pod rejected on a node
        that shuts down): a zombie with the same name as the one before.
        """
        pod = self._pick(index)
        if pod is None:
            return None
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        self._delete(namespace, name)
        if self.sim.store.get("pods", namespace, name) is not None:
            return None  # graceful deletion of a running pod: the name is still taken
        owner = next(iter(meta.get("ownerReferences") or ()), {})
        kind = owner.get("kind")
        owner_index = OWNER_KINDS.index(kind) if kind in OWNER_KINDS else len(OWNER_KINDS) - 1
        precious = (meta.get("labels") or {}).get("tier") == "precious"
        key = self.create_pod(0, owner_index, name=name, namespace=namespace, precious=precious)
        if key is None:
            return None
        if ending is not None:
            current = self.sim.store.get("pods", namespace, name)
            assert current is not None
            self._end(current, ending)
        return key

    def delete_by_other(self, index: int, *, terminal: bool = False) -> str | None:
        """A user or the PodGC deletes a pod (gracefully when it is running).

        With ``terminal`` only a pod that already ended (a user cleaning up).
        """
        pods = self.pods()
        if terminal:
            pods = [p for p in pods if (p.get("status") or {}).get("phase") != "Running"]
        pod = pods[index % len(pods)] if pods else None
        if pod is None:
            return None
        meta = pod["metadata"]
        self._delete(meta["namespace"], meta["name"])
        return meta["name"]

    def _delete(self, namespace: str, name: str) -> None:
        current = self.sim.store.get("pods", namespace, name)
        if current is None:
            return
        model = self._model(current)
        self.sim.store.delete("pods", namespace, name)
        if self.sim.store.get("pods", namespace, name) is not None:
            model.deleting = True

    def set_keep(self, index: int, keep: bool) -> str | None:
        """A user adds (or removes) the opt-out annotation."""
        pod = self._pick(index)
        return None if pod is None else self._set_keep(pod, keep=keep)["metadata"]["name"]

    def _set_keep(self, pod: JSONDict, *, keep: bool) -> JSONDict:
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations["zombied.io/keep"] = "true" if keep else "false"
        updated = self.sim.store.update("pods", pod, check_rv=False)
        self._model(updated).keep = keep
        return updated

    def relabel(self, index: int, precious: bool) -> str | None:
        """A user moves a pod in or out of zombied's label selector."""
        pod = self._pick(index)
        return None if pod is None else self._relabel(pod, precious=precious)["metadata"]["name"]

    def _relabel(self, pod: JSONDict, *, precious: bool) -> JSONDict:
        pod["metadata"].setdefault("labels", {})["tier"] = "precious" if precious else "normal"
        updated = self.sim.store.update("pods", pod, check_rv=False)
        self._model(updated).precious = precious
        return updated

    # -- the promises ---------------------------------------------------------------------

    def check_safety(self) -> list[str]:
        """Invariants (1) and (2) over the deletes accepted since the last call."""
        found: list[str] = []
        records = self.sim.deleted
        decided = {(r.namespace, r.name, r.uid) for r in self.delete_requests}
        # Both preconditions, always: a replacement under the name, or the pod changed
        # (protected) since it was judged, must make the server refuse the DELETE.
        found.extend(
            f"DELETE {request.namespace}/{request.name} without a uid and a resourceVersion"
            for request in self.delete_requests
            if not (request.uid and request.resource_version)
        )
        for record in records[self._checked :]:
            if record.dry_run or not record.user:
                continue  # a dry run, or the driver itself deleting
            self.figures.reaped += 1
            meta = record.obj["metadata"]
            what = f"{meta['namespace']}/{meta['name']} uid={meta['uid']}"
            model = self.models.get(meta["uid"])
            due = self.oracle.due(model) if model is not None else None
            if model is None:
                found.append(f"deleted {what} that nobody created")
            elif due is None:
                found.append(f"deleted {what} that is no zombie: {model}")
            elif record.time < due[0] - 1e-3:
                found.append(f"deleted {what} {due[0] - record.time:.3f}s before due: {model}")
            found.extend(f"deleted {what}, {why}" for why in _protected(record.obj))
            if (meta["namespace"], meta["name"], meta["uid"]) not in decided:
                found.append(f"deleted {what} without a DELETE naming that uid")
        self._checked = len(records)
        # A DELETE request naming a uid is only checked once it was accepted, above.
        self.delete_requests = [r for r in self.delete_requests if r.uid]
        self.violations.extend(found)
        return found

    def pending_zombies(self) -> list[str]:
        """Zombies past their min age that are still there: zombied must delete them."""
        now = time.time()
        left = []
        for pod in self.sim.store.list("pods"):
            due = self.oracle.due(self._model(pod))
            if due is not None and due[1] <= now:
                meta = pod["metadata"]
                left.append(f"{meta['namespace']}/{meta['name']}")
        return sorted(left)

    def present_keys(self) -> set[str]:
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in self.sim.store.list("pods")
        }

    def gone_keys(self, queued: Iterable[str]) -> list[str]:
        """Keys of ``queued`` whose pod does not exist (invariant 4)."""
        present = self.present_keys()
        return sorted(key for key in queued if key not in present)


def _protected(obj: JSONDict) -> list[str]:
    """What in the deleted object itself forbids the delete (beside the model's view)."""
    meta = obj.get("metadata") or {}
    found = []
    if (obj.get("status") or {}).get("phase") not in ("Failed", "Succeeded"):
        found.append("which was not terminal")
    if meta.get("deletionTimestamp"):
        found.append("which someone else was deleting")
    if str((meta.get("annotations") or {}).get("zombied.io/keep", "")).lower() == "true":
        found.append("which was annotated keep")
    if (meta.get("labels") or {}).get("tier") == "precious":
        found.append("which was outside the label selector")
    if meta.get("namespace") in EXCLUDED_NAMESPACES:
        found.append("which was in an excluded namespace")
    return found
