"""From a told story to the recorded corpus (`kubesim.recorded`), and back.

`entries` takes each role's pod as the kubelet left it (the last version before anyone
deleted it), makes what differs from run to run stable (names, uids, versions, hashes;
times shifted so that the shutdown's announcement is `kubesim.recorded.EPOCH`), and
says what zombied decided and who deleted it. `shape` is what must not change between
two runs on the same release: what the kubelet wrote, with the numbers of free disk
and the like masked.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from zombied.pod import parse_pod, parse_time
from zombied.rules import Rule, RuleSet, judge

from kubesim.recorded import EPOCH
from tests.nodes.recorder import Seen
from tests.nodes.story import MIN_AGE_S, PHASES, ROLES, Story

RULES = RuleSet((Rule("node-shutdown", MIN_AGE_S), Rule("admission-rejected", MIN_AGE_S)))
_TIME = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z")
_DIGITS = re.compile(r"\d+")
#: Labels that a controller derives from a hash of its template.
_HASHED = ("pod-template-hash", "controller-revision-hash")


def last_seen(seen: list[Seen], until: float = float("inf")) -> Seen:
    """The pod as the kubelet left it: its last terminal state before anyone deleted it
    (a mirror pod turns Running again when its node returns), else its last state; of
    the states seen before monotonic time ``until`` when there are any."""
    alive = [
        s for s in seen if s.type != "DELETED" and not s.pod["metadata"].get("deletionTimestamp")
    ]
    alive = [s for s in alive if s.at < until] or alive
    terminal = [s for s in alive if s.pod.get("status", {}).get("phase") in ("Succeeded", "Failed")]
    return (terminal or alive or seen)[-1]


def verdict(pod: dict[str, Any]) -> str:
    judgement = judge(parse_pod(pod), RULES, first_seen=EPOCH)
    return judgement.rule or judgement.skip or "no-rule"


def deleted_by(story: Story, seen: list[Seen]) -> str | None:
    """The user whose DELETE removed this pod (a controller's service account by its
    name), from the audit log; None when nobody did."""
    if seen[-1].type != "DELETED" and not seen[-1].pod["metadata"].get("deletionTimestamp"):
        return None
    uid = seen[0].pod["metadata"]["uid"]
    name = seen[0].pod["metadata"]["name"]
    created = parse_time(seen[0].pod["metadata"]["creationTimestamp"])
    for event in story.deletes():
        body = event.get("requestObject") or {}
        same = (body.get("preconditions") or {}).get("uid") == uid
        if not same and event["objectRef"].get("name") == name and created is not None:
            sent = parse_time(event["requestReceivedTimestamp"][:19] + "Z")
            same = sent is not None and sent >= created and body.get("preconditions") is None
        if same and event["responseStatus"]["code"] in (200, 202):
            # A service account by its name: kube-system's controllers, zombied's own.
            user: str = event["user"]["username"]
            return user.rsplit(":", 1)[-1] if user.startswith("system:serviceaccount:") else user
    return "unknown"


def _shift(value: Any, origin: datetime) -> Any:
    if isinstance(value, dict):
        return {key: _shift(item, origin) for key, item in value.items()}
    if isinstance(value, list):
        return [_shift(item, origin) for item in value]
    if isinstance(value, str) and _TIME.match(value):
        moment = parse_time(value)
        if moment is not None:
            return (EPOCH + (moment - origin)).isoformat().replace("+00:00", "Z")
    return value


def normalise(pod: dict[str, Any], role: str, origin: datetime) -> dict[str, Any]:
    """``pod`` with what differs from run to run made stable, named after its role."""
    pod = json.loads(json.dumps(pod))
    meta = pod["metadata"]
    stable = str(uuid.uuid5(uuid.NAMESPACE_URL, f"zombied.test/{role}"))
    meta.update(name=role, uid=stable, resourceVersion="1")
    meta.pop("generateName", None)
    meta.pop("generation", None)
    for key in _HASHED:
        meta.get("labels", {}).pop(key, None)
    for key in meta.get("annotations", {}):
        meta["annotations"][key] = "recorded"
    for owner in meta.get("ownerReferences", []):
        owner["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"zombied.test/owner/{owner['name']}"))
        owner["name"] = role
    meta["managedFields"] = [
        {k: v for k, v in entry.items() if k != "fieldsV1"}
        for entry in meta.get("managedFields", [])
    ]
    status = pod.get("status", {})
    for key in ("containerStatuses", "initContainerStatuses"):
        for container in status.get(key, []):
            container.pop("containerID", None)
            container.pop("imageID", None)
            for state in (
                *container.get("state", {}).values(),
                *container.get("lastState", {}).values(),
            ):
                state.pop("containerID", None)
    return _shift(pod, origin)


def shape(pod: dict[str, Any]) -> dict[str, Any]:
    """What zombied reads of what the kubelet wrote, which must be the same on every run
    of a release: the phase, reason and message, the DisruptionTarget condition, and
    which of the pod's times tells when it ended. (Numbers such as free disk space are
    masked; conditions and container states that a kubelet writes again when it
    returns, or not, depending on when, are left out.)"""
    status = pod.get("status", {})
    disruption = next(
        (c for c in status.get("conditions", []) if c.get("type") == "DisruptionTarget"), None
    )

    def masked(text: object) -> object:
        return _DIGITS.sub("N", text) if isinstance(text, str) else text

    snapshot = parse_pod(pod)
    return {
        "phase": status.get("phase"),
        "reason": status.get("reason"),
        "message": masked(status.get("message")),
        "disruption": None
        if disruption is None
        else (
            disruption.get("status"),
            disruption.get("reason"),
            masked(disruption.get("message")),
        ),
        "time from": snapshot.terminated_source or None,
    }


def container_lost(pod: dict[str, Any]) -> bool:
    """The kubelet wrote the pod after the runtime had let go of its containers: each is
    ContainerStatusUnknown, with no times, in its state or (in the first terminal write,
    the state still waiting) in its last state."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all(
        any(
            (status.get(key, {}).get("terminated") or {}).get("reason") == "ContainerStatusUnknown"
            for key in ("state", "lastState")
        )
        for status in statuses
    )


def entries(story: Story) -> list[dict[str, Any]]:
    """One corpus entry per role of the story, in the story's order."""
    origin = story.announced_at.replace(microsecond=0)
    found: dict[str, dict[str, Any]] = {}
    for uid, seen in story.recorder.pods().items():
        role = story.roles.get(uid)
        if role is None or role in found:
            continue
        # As the kubelet of the role's part of the story left it: a returning kubelet
        # writes a terminal pod's container states again, or not, depending on when.
        last = last_seen(seen, until=story.phase_end(ROLES[role][0]))
        pod = last.pod
        found[role] = {
            "role": role,
            "scenario": PHASES[ROLES[role][0]],
            "description": ROLES[role][1],
            "verdict": verdict(pod),
            "deletedBy": deleted_by(story, seen),
            "pod": normalise(pod, role, origin),
        }
    return [found[role] for role in ROLES if role in found]


def write(target: Path, release: str, pods: list[dict[str, Any]]) -> None:
    document = {"kubelet": release, "pods": pods}
    target.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
