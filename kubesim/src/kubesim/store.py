"""The simulated cluster state: objects, one resourceVersion counter, watch history.

This module owns what etcd plus the watch cache give a real apiserver: every write
bumps one global resourceVersion, is appended to a bounded history (so watches can
resume from a resourceVersion and too-old ones get 410), and is pushed to the open
watch subscriptions. Each stored version keeps its encoded JSON so LIST and WATCH
answers are assembled from bytes instead of re-encoding. It is synchronous and
single-threaded by design (the event loop's thread); it never does I/O and never
hands out a reference to a stored dict: objects are copied in and out.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import json
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio

from kubesim.selectors import FIELD_LABELS, Selector
from kubesim.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    namespace_terminating,
    not_found,
    stale,
    too_large_rv,
    too_old,
)
from kubesim.validation import name_causes, new_finalizer_causes

JSONDict = dict[str, Any]
Key = tuple[str, str]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
TERMINAL_PHASES = frozenset({"Failed", "Succeeded"})


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource: enough to route, authorise and describe it in discovery."""

    name: str
    kind: str
    group: str
    version: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    returns_object_on_delete: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def qualified(self) -> str:
        """``pods`` or ``leases.coordination.k8s.io``, as error messages name it."""
        return f"{self.name}.{self.group}" if self.group else self.name


RESOURCES: dict[str, ResourceType] = {
    "pods": ResourceType(
        "pods",
        "Pod",
        "",
        "v1",
        namespaced=True,
        singular="pod",
        short_names=("po",),
        subresources=("status",),
        categories=("all",),
        returns_object_on_delete=True,
    ),
    "nodes": ResourceType(
        "nodes",
        "Node",
        "",
        "v1",
        namespaced=False,
        singular="node",
        short_names=("no",),
        subresources=("status",),
        returns_object_on_delete=False,
    ),
    "namespaces": ResourceType(
        "namespaces",
        "Namespace",
        "",
        "v1",
        namespaced=False,
        singular="namespace",
        short_names=("ns",),
        subresources=("status",),
        returns_object_on_delete=True,
    ),
    "events": ResourceType(
        "events", "Event", "", "v1", namespaced=True, singular="event", short_names=("ev",)
    ),
    "leases": ResourceType(
        "leases", "Lease", "coordination.k8s.io", "v1", namespaced=True, singular="lease"
    ),
}


def encode(obj: Any) -> bytes:
    """Compact JSON, as the apiserver sends it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def event_line(type_: str, raw: bytes) -> bytes:
    """One line of a watch stream, around an object already encoded."""
    return b'{"type":"' + type_.encode() + b'","object":' + raw + b"}\n"


def now_rfc3339(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


KEPT_METADATA = ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
#: Stands for the resourceVersion in an encoding until the version is known.
_RV_PLACEHOLDER = "\x00rv\x00"
_RV_PLACEHOLDER_JSON = b'"\\u0000rv\\u0000"'


class Stored:
    """One version of one object: its encoded JSON plus what selectors look at.

    Only the bytes are kept, not the decoded dict: a pod's dict costs several times
    its JSON in memory, and LIST and WATCH only ever need the bytes. ``fields`` and
    ``labels`` let selectors match without decoding.
    """

    __slots__ = ("deleting", "fields", "finalizers", "kept", "labels", "raw", "rv", "uid")

    def __init__(self, resource: str, obj: JSONDict, raw: bytes, rv: int) -> None:
        meta = obj.get("metadata") or {}
        self.raw = raw
        self.rv = rv
        self.uid: str = str(meta.get("uid", ""))
        self.deleting = "deletionTimestamp" in meta
        #: Whoever must let go before the object may leave (``metadata.finalizers``).
        self.finalizers: tuple[str, ...] = tuple(meta.get("finalizers") or ())
        #: Metadata the server owns, carried over by updates.
        self.kept: dict[str, Any] = {k: meta[k] for k in KEPT_METADATA if k in meta}
        labels = meta.get("labels") or {}
        self.labels: dict[str, str] = (
            {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        )
        getters = FIELD_LABELS.get(resource) or {}
        self.fields: dict[str, str] = {name: get(obj) for name, get in getters.items()}

    @property
    def obj(self) -> JSONDict:
        """A freshly decoded copy of the object."""
        result: JSONDict = json.loads(self.raw)
        return result

    def copy(self) -> JSONDict:
        return self.obj


class Change:
    """One write, as the history and the watches see it."""

    __slots__ = ("_lines", "_matches", "key", "prev", "resource", "rv", "stored", "type")

    def __init__(
        self, rv: int, resource: str, key: Key, *, type_: str, stored: Stored, prev: Stored | None
    ) -> None:
        self.rv = rv
        self.resource = resource
        self.key = key
        self.type = type_
        self.stored = stored
        self.prev = prev
        self._lines: dict[str, bytes] = {}
        self._matches: dict[Selector, str | None] = {}

    def line(self, type_: str) -> bytes:
        """The watch event line for this change, encoded once per event type.

        A modification that a selector sees as DELETED (the object left the selection)
        carries the previous object, the last state that matched, at this change's
        resourceVersion: what the watch cache and the etcd watcher both send.
        """
        cached = self._lines.get(type_)
        if cached is None:
            raw = self.stored.raw
            if type_ == "DELETED" and self.type == "MODIFIED" and self.prev is not None:
                previous = self.prev.obj
                _meta(previous)["resourceVersion"] = str(self.rv)
                raw = encode(previous)
            cached = event_line(type_, raw)
            self._lines[type_] = cached
        return cached

    def event_type(self, selector: Selector | None) -> str | None:
        """What a watch with ``selector`` sees of this change (None: nothing).

        An object that stops matching is DELETED for that watch, one that starts
        matching is ADDED, as the apiserver's watch cache filters.
        """
        if selector is None or selector.empty:
            return self.type
        if selector in self._matches:
            return self._matches[selector]
        now = selector.matches_index(self.stored.fields, self.stored.labels)
        before = self.prev is not None and selector.matches_index(
            self.prev.fields, self.prev.labels
        )
        result: str | None
        if self.type == "ADDED":
            result = "ADDED" if now else None
        elif self.type == "DELETED":
            result = "DELETED" if (before or now) else None
        elif now and before:
            result = "MODIFIED"
        elif now:
            result = "ADDED"
        elif before:
            result = "DELETED"
        else:
            result = None
        self._matches[selector] = result
        return result


class Subscription:
    """An open watch's inbox: changes pushed by the store, drained by the server."""

    __slots__ = ("expired", "namespace", "pending", "resource", "wake")

    def __init__(self, resource: str, namespace: str | None) -> None:
        self.resource = resource
        self.namespace = namespace
        self.pending: deque[Change] = deque()
        self.wake = anyio.Event()
        self.expired: str | None = None

    def push(self, change: Change) -> None:
        if self.namespace is not None and change.key[0] != self.namespace:
            return
        self.pending.append(change)
        self.wake.set()

    def expire(self, message: str) -> None:
        self.expired = message
        self.wake.set()


@dataclass(frozen=True, slots=True)
class DeletedRecord:
    """A pod deletion accepted by the server (or the store), as it was before."""

    obj: JSONDict
    rv: int
    time: float
    dry_run: bool
    user: str


@dataclass(slots=True)
class Page:
    items: list[Stored]
    rv: int
    next_start: Key | None
    remaining: int | None


@dataclass
class _Table:
    objects: dict[Key, Stored] = field(default_factory=dict)
    sorted_keys: list[Key] | None = None

    def keys(self) -> list[Key]:
        if self.sorted_keys is None:
            self.sorted_keys = sorted(self.objects)
        return self.sorted_keys


def _meta(obj: JSONDict) -> JSONDict:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


class Store:
    """All objects of the simulated cluster, with history and watch fan-out."""

    def __init__(self, *, history_window: int = 10_000, seed: int = 0) -> None:
        self._rv = 0
        self._floor = 0
        self._history: deque[Change] = deque(maxlen=max(1, history_window))
        self._tables: dict[str, _Table] = {name: _Table() for name in RESOURCES}
        self._subs: dict[str, set[Subscription]] = {name: set() for name in RESOURCES}
        # Keys of the pods bound to each node: a node shutdown touches its own pods
        # without scanning the cluster's.
        self._pods_by_node: dict[str, set[Key]] = {}
        self._rng = random.Random(seed)
        self.deleted: list[DeletedRecord] = []
        #: Called with (namespace, name, uid, delay) when a pod starts graceful deletion.
        self.on_graceful: Callable[[str, str, str, float], None] | None = None
        #: Called with (resource, namespace, name) after an object is gone.
        self.on_deleted: Callable[[str, str, str], None] | None = None
        for ns in DEFAULT_NAMESPACES:
            self.create("namespaces", {"metadata": {"name": ns}})

    # ----------------------------------------------------------------- reading

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def oldest_resource_version(self) -> int:
        """Watches and continue tokens from below this answer 410."""
        return self._floor

    def get(self, resource: str, namespace: str, name: str) -> JSONDict | None:
        stored = self.get_stored(resource, namespace, name)
        return None if stored is None else stored.copy()

    def get_stored(self, resource: str, namespace: str, name: str) -> Stored | None:
        return self._table(resource).objects.get((namespace, name))

    def pods_on_node(self, node: str) -> list[JSONDict]:
        """Copies of the pods bound to ``node``, in key order."""
        objects = self._tables["pods"].objects
        return [objects[key].copy() for key in sorted(self._pods_by_node.get(node, ()))]

    def list(self, resource: str, namespace: str | None = None) -> list[JSONDict]:
        return [s.copy() for s in self.iter_stored(resource, namespace)]

    def iter_stored(self, resource: str, namespace: str | None = None) -> Iterator[Stored]:
        table = self._table(resource)
        if namespace is None:
            yield from (table.objects[k] for k in table.keys())  # noqa: SIM118 - sorted keys, not the dict
            return
        keys = table.keys()
        lo, hi = _ns_range(keys, namespace)
        for k in keys[lo:hi]:
            yield table.objects[k]

    def count(self, resource: str) -> int:
        return len(self._table(resource).objects)

    def _table(self, resource: str) -> _Table:
        table = self._tables.get(resource)
        if table is None:
            raise ValueError(f"unknown resource {resource!r}")
        return table

    # ----------------------------------------------------------------- writing

    def new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _commit(
        self,
        resource: str,
        key: Key,
        type_: str,
        obj: JSONDict,
        prev: Stored | None,
        *,
        template: bytes | None = None,
    ) -> Stored:
        """Store ``obj`` under a new resourceVersion.

        ``template`` is ``obj`` already encoded with the resourceVersion placeholder,
        so the object is encoded once per write.
        """
        self._rv += 1
        rv = str(self._rv)
        if template is None:
            _meta(obj)["resourceVersion"] = _RV_PLACEHOLDER
            template = encode(obj)
        _meta(obj)["resourceVersion"] = rv
        raw = template.replace(_RV_PLACEHOLDER_JSON, b'"' + rv.encode() + b'"', 1)
        stored = Stored(resource, obj, raw, self._rv)
        table = self._tables[resource]
        if type_ == "DELETED":
            del table.objects[key]
            table.sorted_keys = None
        else:
            if key not in table.objects:
                table.sorted_keys = None
            table.objects[key] = stored
        if resource == "pods":
            self._index_node(key, prev, None if type_ == "DELETED" else stored)
        change = Change(self._rv, resource, key, type_=type_, stored=stored, prev=prev)
        if len(self._history) == self._history.maxlen:
            self._floor = self._history[0].rv
        self._history.append(change)
        for sub in self._subs[resource]:
            sub.push(change)
        return stored

    def _index_node(self, key: Key, before: Stored | None, after: Stored | None) -> None:
        old = before.fields["spec.nodeName"] if before is not None else ""
        new = after.fields["spec.nodeName"] if after is not None else ""
        if old == new:
            return
        if old:
            keys = self._pods_by_node[old]
            keys.discard(key)
            if not keys:
                del self._pods_by_node[old]
        if new:
            self._pods_by_node.setdefault(new, set()).add(key)

    def create(self, resource: str, obj: JSONDict, *, validate: bool = False) -> JSONDict:
        """Add an object; set uid, creationTimestamp and resourceVersion.

        The server passes ``validate``: the name must be one the API accepts, the
        namespace must exist (404) and not be terminating, and creationTimestamp is the
        server's, whatever the client sent. Direct callers get their namespace created
        on the fly and may date the object themselves.
        """
        rt = RESOURCES[resource]
        # Shallow copies suffice: the store keeps only the encoding, never these dicts.
        obj = dict(obj)
        meta = dict(obj.get("metadata") or {})
        obj["metadata"] = meta
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = str(meta["generateName"]) + "".join(
                self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5)
            )
            meta["name"] = name
        if not name:
            raise invalid(
                rt.kind,
                "",
                [
                    (
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                    )
                ],
            )
        causes = name_causes(resource, str(name)) if validate else []
        if causes:
            raise invalid(rt.kind, str(name), causes)
        namespace = ""
        if rt.namespaced:
            namespace = meta.get("namespace") or "default"
            meta["namespace"] = namespace
            ns_obj = self.get_stored("namespaces", "", namespace)
            if ns_obj is None:
                if validate:
                    raise not_found("namespaces", namespace)
                self.create("namespaces", {"metadata": {"name": namespace}})
            elif validate and ns_obj.deleting:
                raise namespace_terminating(rt.qualified, rt.name, name, namespace)
        else:
            meta.pop("namespace", None)
        key = (namespace, name)
        if key in self._tables[resource].objects:
            raise already_exists(rt.qualified, name)
        meta["uid"] = self.new_uid()
        if validate or not meta.get("creationTimestamp"):
            meta["creationTimestamp"] = now_rfc3339()
        for owned in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(owned, None)
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        obj = {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
        _apply_defaults(resource, obj)
        return self._commit(resource, key, "ADDED", obj, None).copy()

    def update(self, resource: str, obj: JSONDict, *, check_rv: bool = True) -> JSONDict:
        """Replace an object; 409 if ``obj`` carries a resourceVersion that is not current.

        An object being deleted takes no new finalizers (422); once its last finalizer
        is removed and its grace period is over, the update deletes it instead
        (``shouldDeleteDuringUpdate``).
        """
        rt = RESOURCES[resource]
        obj = dict(obj)
        meta = dict(obj.get("metadata") or {})
        obj["metadata"] = meta
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or "") if rt.namespaced else ""
        if rt.namespaced and not namespace:
            namespace = "default"
            meta["namespace"] = namespace
        key = (namespace, name)
        current = self._tables[resource].objects.get(key)
        if current is None:
            raise not_found(rt.qualified, name)
        given_rv = meta.get("resourceVersion")
        if check_rv and given_rv not in (None, "") and str(given_rv) != str(current.rv):
            raise stale(rt.qualified, name)
        if meta.get("uid") not in (None, "", current.uid):
            raise conflict(
                rt.qualified,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, "
                f"UID in object meta: {current.uid}",
            )
        meta["uid"] = current.uid
        for field_name in KEPT_METADATA:
            if field_name in current.kept:
                meta[field_name] = current.kept[field_name]
            else:
                meta.pop(field_name, None)
        if current.deleting:
            finalizers = meta.get("finalizers") or ()
            causes = new_finalizer_causes(current.finalizers, finalizers)
            if causes:
                raise invalid(rt.kind, name, causes)
            if not finalizers and not current.kept.get("deletionGracePeriodSeconds"):
                return self._finish(resource, key, current)
        meta["resourceVersion"] = _RV_PLACEHOLDER
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        obj = {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
        template = encode(obj)
        same = template.replace(_RV_PLACEHOLDER_JSON, b'"' + str(current.rv).encode() + b'"', 1)
        if same == current.raw:
            # A no-op write keeps the resourceVersion and emits nothing, like the apiserver.
            return current.copy()
        return self._commit(resource, key, "MODIFIED", obj, current, template=template).copy()

    def delete(
        self,
        resource: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
        grace_period: int | None = None,
        user: str = "",
    ) -> JSONDict:
        """Delete an object, honouring preconditions and pod graceful deletion.

        Pods go as the pod registry deletes them: first ``deletionTimestamp`` is
        written (a MODIFIED event, even when the grace period is 0), then terminal,
        unscheduled and grace-0 pods are removed at once (DELETED); other pods wait
        for ``on_graceful``'s timer to call :meth:`finish_graceful`. Returns the object
        as the DELETE answer shows it: for a pod, its last stored state.
        """
        rt = RESOURCES[resource]
        key = (namespace if rt.namespaced else "", name)
        current = self._tables[resource].objects.get(key)
        if current is None:
            raise not_found(rt.qualified, name)
        # Checked as rest.BeforeDelete does, naming the kind (``Lease.coordination.k8s.io``).
        kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
        if uid is not None and uid != current.uid:
            raise conflict(
                kind,
                name,
                f"the UID in the precondition ({uid}) does not match the UID in record "
                f"({current.uid}). The object might have been deleted and then recreated",
            )
        if resource_version is not None and resource_version != str(current.rv):
            raise conflict(
                kind,
                name,
                f"the ResourceVersion in the precondition ({resource_version}) does not match "
                f"the ResourceVersion in record ({current.rv}). The object might have been "
                "modified",
            )
        if resource == "pods":
            self.deleted.append(
                DeletedRecord(current.copy(), current.rv, time.time(), dry_run, user)
            )
            return self._delete_pod(key, current, grace_period, dry_run=dry_run)
        if dry_run:
            return current.copy()
        if current.finalizers:
            return self._hold(resource, key, current)
        return self._finish(resource, key, current)

    def _delete_pod(
        self, key: Key, current: Stored, requested: int | None, *, dry_run: bool
    ) -> JSONDict:
        """The pod registry's graceful deletion (``rest.BeforeDelete``)."""
        obj = current.copy()
        meta = obj["metadata"]
        if "deletionTimestamp" in meta:
            # Already deleting: a grace period may only be shortened.
            pending = meta.get("deletionGracePeriodSeconds")
            if not pending:
                if dry_run or current.finalizers:
                    return obj
                # A deletion whose removal never happened: finish it, without a write.
                return self._remove("pods", key, current, answer=current)
            if requested is None or max(0, requested) >= pending:
                return obj
            grace = max(0, requested)
            started = _parse_time(meta["deletionTimestamp"]) - pending
            meta["deletionTimestamp"] = now_rfc3339(started + grace)
        else:
            grace = self._grace(current, requested)
            meta["deletionTimestamp"] = now_rfc3339(time.time() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        if dry_run:
            return obj
        marked = self._commit("pods", key, "MODIFIED", obj, current)
        if grace > 0:
            if self.on_graceful is not None:
                self.on_graceful(key[0], key[1], marked.uid, float(grace))
            return marked.copy()
        if marked.finalizers:
            return marked.copy()  # held until an update removes the last finalizer
        return self._remove("pods", key, marked, answer=marked)

    @staticmethod
    def _grace(current: Stored, requested: int | None) -> int:
        """The pod strategy's CheckGracefulDelete: terminal and unscheduled pods get 0."""
        if current.fields.get("status.phase") in TERMINAL_PHASES or not current.fields.get(
            "spec.nodeName"
        ):
            return 0
        if requested is not None:
            return max(0, requested)
        default = (current.obj.get("spec") or {}).get("terminationGracePeriodSeconds")
        return 30 if default is None else max(0, int(default))

    def finish_graceful(self, namespace: str, name: str, uid: str) -> None:
        """The simulated kubelet is done with a deleting pod: it deletes it with grace 0.

        As on a real cluster that is two writes, the shortened grace period (MODIFIED)
        and the removal (DELETED).
        """
        key = (namespace, name)
        current = self._tables["pods"].objects.get(key)
        if current is None or current.uid != uid or not current.deleting:
            return
        self._delete_pod(key, current, 0, dry_run=False)

    def _hold(self, resource: str, key: Key, current: Stored) -> JSONDict:
        """Delete an object its finalizers keep: mark it deleting now, leave it stored."""
        if current.deleting:
            return current.copy()
        obj = current.copy()
        obj["metadata"]["deletionTimestamp"] = now_rfc3339()
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        return self._commit(resource, key, "MODIFIED", obj, current).copy()

    def _finish(self, resource: str, key: Key, current: Stored) -> JSONDict:
        """Remove an object nothing holds any more (a namespace with its contents)."""
        if resource == "namespaces":
            self._purge_namespace(key[1])
        return self._remove(resource, key, current)

    def _remove(
        self, resource: str, key: Key, current: Stored, *, answer: Stored | None = None
    ) -> JSONDict:
        """Remove an object (a DELETED event at a new resourceVersion).

        Returns the object as DELETE answers it: ``answer`` (the last stored state, for
        pods) or the removed object at the removal's resourceVersion.
        """
        result = self._commit(resource, key, "DELETED", current.copy(), current).copy()
        if self.on_deleted is not None:
            self.on_deleted(resource, key[0], key[1])
        return result if answer is None else answer.copy()

    def _purge_namespace(self, namespace: str) -> None:
        for resource, rt in RESOURCES.items():
            if not rt.namespaced:
                continue
            for stored in list(self.iter_stored(resource, namespace)):
                self._remove(resource, (namespace, stored.fields["metadata.name"]), stored)

    # ------------------------------------------------------------ list & watch

    def check_watch_start(self, rv: int) -> None:
        """410 below the kept history, 504 beyond the present; LISTs at ``rv`` too."""
        if rv < self._floor:
            raise too_old(rv, self._floor)
        if rv > self._rv:
            raise too_large_rv(rv, self._rv)

    def changes_since(self, resource: str, rv: int) -> Iterable[Change]:
        """Changes to ``resource`` after ``rv`` (caller checked ``rv`` is not too old)."""
        first = self._history[0].rv if self._history else self._rv + 1
        start = max(0, rv + 1 - first)
        return (c for c in itertools.islice(self._history, start, None) if c.resource == resource)

    def subscribe(self, resource: str, namespace: str | None) -> Subscription:
        sub = Subscription(resource, namespace)
        self._subs[resource].add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs[sub.resource].discard(sub)

    def watcher_count(self) -> int:
        return sum(len(s) for s in self._subs.values())

    def compact(self) -> None:
        """Forget all history up to now: older resourceVersions answer 410.

        Open watches are expired with a 410 ERROR event, as when the apiserver's
        watch cache is re-initialised.
        """
        self._floor = self._rv
        self._history.clear()
        for subs in self._subs.values():
            for sub in subs:
                sub.expire("The resourceVersion for the provided watch is too old.")

    def list_page(
        self,
        resource: str,
        namespace: str | None,
        selector: Selector | None,
        *,
        limit: int = 0,
        start_after: Key | None = None,
        at_rv: int | None = None,
    ) -> Page:
        """A (possibly paginated) LIST, optionally as of an older resourceVersion."""
        table = self._table(resource)
        objects: dict[Key, Stored] | _Overlay = table.objects
        keys = table.keys()
        rv = self._rv
        if at_rv is not None and at_rv != self._rv:
            self.check_watch_start(at_rv)
            overrides: dict[Key, Stored | None] = {}
            for change in reversed(list(self.changes_since(resource, at_rv))):
                overrides[change.key] = change.prev
            objects = _Overlay(table.objects, overrides)
            gone = sorted(k for k in overrides if k not in table.objects)
            if gone:
                # Two sorted runs: timsort merges them in one linear pass.
                keys = sorted(keys + gone)
            rv = at_rv
        lo, hi = (0, len(keys)) if namespace is None else _ns_range(keys, namespace)
        if start_after is not None:
            lo = max(lo, bisect.bisect_right(keys, start_after))
        items: list[Stored] = []
        match = None if selector is None or selector.empty else selector.matches_index
        next_start: Key | None = None
        i = lo
        while i < hi:
            stored = objects.get(keys[i])
            i += 1
            if stored is None or (match is not None and not match(stored.fields, stored.labels)):
                continue
            items.append(stored)
            if limit and len(items) >= limit:
                if i < hi:
                    next_start = keys[i - 1]
                break
        remaining = None
        if next_start is not None and match is None:
            remaining = hi - i
        return Page(items, rv, next_start, remaining)


class _Overlay:
    """The table as it was at an older resourceVersion (current plus reverted changes)."""

    def __init__(self, base: dict[Key, Stored], overrides: dict[Key, Stored | None]) -> None:
        self._base = base
        self._overrides = overrides

    def get(self, key: Key) -> Stored | None:
        if key in self._overrides:
            return self._overrides[key]
        return self._base.get(key)


def _ns_range(keys: list[Key], namespace: str) -> tuple[int, int]:
    return (
        bisect.bisect_left(keys, (namespace, "")),
        bisect.bisect_left(keys, (namespace + "\x00", "")),
    )


def _parse_time(text: str) -> float:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return time.time()


def _apply_defaults(resource: str, obj: JSONDict) -> None:
    """Fill in what the apiserver defaults, copying (never mutating) the caller's dicts."""
    if resource == "pods":
        spec = obj.get("spec")
        if isinstance(spec, dict) or spec is None:
            obj["spec"] = {
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "schedulerName": "default-scheduler",
                "serviceAccountName": "default",
                **(spec or {}),
            }
        status = obj.get("status")
        if isinstance(status, dict) or status is None:
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort", **(status or {})}
    elif resource == "namespaces":
        # The namespace controller's finalizer is added whatever the client sent.
        spec = obj.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        finalizers = list(spec.get("finalizers") or [])
        if "kubernetes" not in finalizers:
            finalizers.append("kubernetes")
        obj["spec"] = {**spec, "finalizers": finalizers}
        status = obj.get("status")
        if isinstance(status, dict) or status is None:
            obj["status"] = {"phase": "Active", **(status or {})}
        meta = obj["metadata"]
        labels = meta.get("labels")
        if isinstance(labels, dict) or labels is None:
            meta["labels"] = {"kubernetes.io/metadata.name": meta["name"], **(labels or {})}


# ------------------------------------------------------------- continue tokens


def encode_continue(rv: int, start: Key) -> str:
    raw = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{start[0]}/{start[1]}\x00"},
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, Key]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        rv = int(data["rv"])
        ns, _, name = str(data["start"]).rstrip("\x00").partition("/")
        version = data.get("v")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from None
    if version != "meta.k8s.io/v1" or rv <= 0:
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion")
    return rv, (ns, name)


CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def continue_expired(store: Store, start: Key) -> ApiError:
    err = expired(CONTINUE_EXPIRED)
    err.metadata = {"continue": encode_continue(store.resource_version, start)}
    return err
