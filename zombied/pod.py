"""The small, immutable view of a pod that the rest of zombied works with.

`parse_pod` keeps only what rules, reaper and logs need, so memory grows with the
number of terminal pods, not the size of their specs. The input is treated as hostile:
namespace, name and uid (what a safe DELETE needs) are mandatory and checked, anything
else missing or malformed degrades to an empty value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

KEEP_ANNOTATION: Final = "zombied.io/keep"
#: The values of `KEEP_ANNOTATION` zombied understands, in any case.
KEEP_VALUES: Final = ("true", "false")
#: Set by the kubelet on the API's copy of a static pod: the kubelet owns that object.
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
TERMINAL_PHASES: Final = frozenset({"Failed", "Succeeded"})
#: What a pod's `PodSnapshot.terminated_at` was read from, most precise first.
FINISHED_AT: Final = "container finishedAt"
DISRUPTION_TIME: Final = "DisruptionTarget condition"
READY_TIME: Final = "Ready condition"
#: The kubelet's last status write (its ``managedFields`` entry, to the second): the
#: only time on a pod that a kubelet rejected at admission, or that a 1.20 kubelet
#: ended for a node shutdown, since those carry no conditions and no container states.
KUBELET_WRITE: Final = "kubelet status write"

# Caps on what a hostile server can make us hold per pod; real objects are far below.
_MAX_NAME: Final = 253
_MAX_UID: Final = 128
_MAX_REASON: Final = 256
_MAX_MESSAGE: Final = 1024
_MAX_KEEP: Final = 64
# What would change which object a DELETE's URL addresses; \s is str.isspace().
_UNSAFE_IN_PATH: Final = re.compile(r"[/%?#\\\s]")


class PodParseError(ValueError):
    """The object lacks a field needed to delete it safely; the message says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """What zombied remembers about one pod."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    phase: str = ""
    reason: str = ""
    message: str = ""
    node: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    deleting: bool = False
    #: The value of the keep annotation, else of a label with its key; None without both.
    keep_value: str | None = None
    keep_via: str = ""  # "annotation" or "label"
    #: A mirror pod: the API's copy of a static pod, which its kubelet owns.
    mirror: bool = False
    terminated_at: datetime | None = None
    #: Where ``terminated_at`` comes from (`FINISHED_AT`...); empty when it is None.
    terminated_source: str = ""
    #: The reason of a ``DisruptionTarget=True`` condition; kubelets before 1.26 never
    #: write one.
    disruption: str = ""
    #: That condition's message: the kubelet says there why it ended the pod.
    disruption_message: str = ""
    #: Only the labels the label selector asks about.
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """The work-queue and cache key."""
        return f"{self.namespace}/{self.name}"

    @property
    def owner(self) -> str:
        """The controlling owner as ``Kind/name``; empty when the pod has none."""
        return f"{self.owner_kind}/{self.owner_name}" if self.owner_kind else ""

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def keep(self) -> bool:
        """The pod asks to be kept: any value but ``false`` (in any case). An operator who
        wrote ``yes`` or nothing at all meant to keep it; deleting it would be the worse
        misreading."""
        return self.keep_value is not None and self.keep_value.strip().lower() != "false"

    @property
    def keep_unclear(self) -> bool:
        """The keep value is neither ``true`` nor ``false``: kept, and worth a word."""
        return self.keep_value is not None and self.keep_value.strip().lower() not in KEEP_VALUES


def parse_time(value: object) -> datetime | None:
    """Parse an RFC 3339 timestamp into an aware UTC datetime; None when invalid (a time
    without an offset included). RFC 3339 allows a lower-case ``t`` and ``z``."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        stamp = datetime.fromisoformat(value.strip().upper())
        return stamp.astimezone(UTC) if stamp.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


def parse_pod(obj: object, *, label_keys: frozenset[str] = frozenset()) -> PodSnapshot:
    """Build a `PodSnapshot` from a pod as the API serves it, keeping only the labels in
    ``label_keys``. `PodParseError` when namespace, name or uid is missing or unusable."""
    if not isinstance(obj, Mapping):
        raise PodParseError(f"pod is not an object but {type(obj).__name__}")
    metadata = _mapping(obj.get("metadata"))
    if metadata is None:
        raise PodParseError("metadata is missing or not an object")
    namespace = _identifier(metadata, "namespace", _MAX_NAME)
    name = _identifier(metadata, "name", _MAX_NAME)
    uid = _identifier(metadata, "uid", _MAX_UID)

    spec = _mapping(obj.get("spec")) or {}
    status = _mapping(obj.get("status")) or {}
    phase = _text(status.get("phase"), _MAX_REASON)
    owner_kind, owner_name = _owner(metadata.get("ownerReferences"))
    keep_via, keep_value = _keep(metadata)
    conditions = _conditions(status.get("conditions"))
    disruption = conditions.get("DisruptionTarget")
    if disruption is not None and disruption.get("status") != "True":
        disruption = None
    terminated_at, terminated_source = _terminated_at(
        status, disruption, conditions.get("Ready"), phase, metadata.get("managedFields")
    )

    return PodSnapshot(
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=_resource_version(metadata.get("resourceVersion")),
        phase=phase,
        reason=_text(status.get("reason"), _MAX_REASON),
        message=_text(status.get("message"), _MAX_MESSAGE),
        node=_text(spec.get("nodeName"), _MAX_NAME),
        owner_kind=owner_kind,
        owner_name=owner_name,
        deleting=metadata.get("deletionTimestamp") is not None,
        keep_value=keep_value,
        keep_via=keep_via,
        mirror=MIRROR_ANNOTATION in (_mapping(metadata.get("annotations")) or {}),
        terminated_at=terminated_at,
        terminated_source=terminated_source,
        disruption=(
            (_text(disruption.get("reason"), _MAX_REASON) or "unknown")
            if disruption is not None
            else ""
        ),
        disruption_message=(
            _text(disruption.get("message"), _MAX_MESSAGE) if disruption is not None else ""
        ),
        labels=_labels(metadata.get("labels"), label_keys) if label_keys else (),
    )


def _keep(metadata: Mapping[str, object]) -> tuple[str, str | None]:
    """Where the pod says whether to keep it, and what: the annotation, else a label of
    the same key (a common slip, and a label is as clear a wish)."""
    for where in ("annotation", "label"):
        value = (_mapping(metadata.get(where + "s")) or {}).get(KEEP_ANNOTATION)
        if isinstance(value, str):
            return where, value[:_MAX_KEEP]
    return "", None


def _labels(value: object, keys: frozenset[str]) -> tuple[tuple[str, str], ...]:
    labels = _mapping(value) or {}
    return tuple(sorted((key, text) for key in keys if isinstance(text := labels.get(key), str)))


def _mapping(value: object) -> Mapping[str, object] | None:
    return value if isinstance(value, Mapping) else None


def _text(value: object, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    return value if len(value) <= limit else value[:limit]


def _identifier(metadata: Mapping[str, object], field_name: str, limit: int) -> str:
    value = metadata.get(field_name)
    if value is None:
        raise PodParseError(f"metadata.{field_name} is missing")
    if not isinstance(value, str):
        raise PodParseError(f"metadata.{field_name} is not a string but {type(value).__name__}")
    if not value:
        raise PodParseError(f"metadata.{field_name} is empty")
    if len(value) > limit:
        raise PodParseError(f"metadata.{field_name} is longer than {limit} characters")
    # Part of the DELETE's URL path: nothing may change which object it addresses.
    if value in {".", ".."} or not value.isprintable() or _UNSAFE_IN_PATH.search(value):
        raise PodParseError(f"metadata.{field_name} {value!r} is not a valid name")
    return value


def _resource_version(value: object) -> str:
    if isinstance(value, str):
        return value[:_MAX_NAME]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def _owner(value: object) -> tuple[str, str]:
    if not isinstance(value, list):
        return "", ""
    refs = [ref for ref in value if isinstance(ref, Mapping)]
    if not refs:
        return "", ""
    chosen = next((ref for ref in refs if ref.get("controller") is True), refs[0])
    return _text(chosen.get("kind"), _MAX_REASON), _text(chosen.get("name"), _MAX_NAME)


def _conditions(value: object) -> dict[str, Mapping[str, object]]:
    found: dict[str, Mapping[str, object]] = {}
    if isinstance(value, list):
        for cond in value:
            if isinstance(cond, Mapping):
                kind = cond.get("type")
                if isinstance(kind, str):
                    found.setdefault(kind, cond)
    return found


def _finished_times(status: Mapping[str, object]) -> Iterator[datetime]:
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        statuses = status.get(key)
        if not isinstance(statuses, list):
            continue
        for container in statuses:
            state = _mapping(container.get("state")) if isinstance(container, Mapping) else None
            terminated = _mapping(state.get("terminated")) if state else None
            if terminated is not None:
                finished = parse_time(terminated.get("finishedAt"))
                if finished is not None:
                    yield finished


def _kubelet_writes(managed_fields: object) -> Iterator[datetime]:
    if not isinstance(managed_fields, list):
        return
    for entry in managed_fields:
        # Since 1.22 the entry names the status subresource; before, only the manager.
        if (
            isinstance(entry, Mapping)
            and entry.get("manager") == "kubelet"
            and entry.get("subresource", "status") == "status"
        ):
            stamp = parse_time(entry.get("time"))
            if stamp is not None:
                yield stamp


def _terminated_at(
    status: Mapping[str, object],
    disruption: Mapping[str, object] | None,
    ready: Mapping[str, object] | None,
    phase: str,
    managed_fields: object,
) -> tuple[datetime | None, str]:
    latest = max(_finished_times(status), default=None)
    if latest is not None:
        return latest, FINISHED_AT
    if disruption is not None:
        stamp = parse_time(disruption.get("lastTransitionTime"))
        if stamp is not None:
            return stamp, DISRUPTION_TIME
    if phase not in TERMINAL_PHASES:
        return None, ""
    if ready is not None:
        stamp = parse_time(ready.get("lastTransitionTime"))
        if stamp is not None:
            return stamp, READY_TIME
    # The last write is at or after the one that made the pod terminal: a later write
    # only makes the pod due later, never sooner.
    written = max(_kubelet_writes(managed_fields), default=None)
    return (written, KUBELET_WRITE) if written is not None else (None, "")
