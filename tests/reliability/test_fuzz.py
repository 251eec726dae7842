"""Hostile objects against the pure parsers: they skip, they never crash.

Whatever a broken or malicious API server sends, `parse_pod` either returns a
snapshot or raises `PodParseError`, `classify` answers every snapshot with a
consistent verdict, and `parse_event` either returns an event or raises
`EventParseError`. Anything else raised would kill a watch for every pod.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zombied.pod import PodParseError, PodSnapshot, parse_pod
from zombied.rules import RULE_NAMES, Rule, RuleSet, classify
from zombied.watch import EventParseError, parse_event, peek_event

from tests.reliability.profiles import budget

# Thousands of examples through the same few functions: the unit tests cover their
# lines, and tracing every example for coverage doubles the time.
pytestmark = pytest.mark.no_cover

# Keys that the parsers look at, so random objects reach deep into them.
KEYS = [
    "metadata",
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "annotations",
    "labels",
    "ownerReferences",
    "controller",
    "kind",
    "deletionTimestamp",
    "spec",
    "nodeName",
    "status",
    "phase",
    "reason",
    "message",
    "conditions",
    "type",
    "lastTransitionTime",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    "state",
    "terminated",
    "finishedAt",
    "zombied.io/keep",
    "object",
    "code",
]
TEXTS = [
    "Failed",
    "Succeeded",
    "Running",
    "Shutdown",
    "NodeShutdown",
    "Terminated",
    "Evicted",
    "True",
    "true",
    "DisruptionTarget",
    "Ready",
    "2024-02-30T25:61:61Z",
    "2024-05-01T10:00:00.123456789+05:30",
    "9999-12-31T23:59:60Z",
    "0001-01-01T00:00:00-23:59",
    "..",
    "a/b",
    "%2F",
    "",
    "\x00",
    "ADDED",
    "MODIFIED",
    "DELETED",
    "BOOKMARK",
    "ERROR",
    "Job",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(TEXTS)
    | st.text(max_size=20)
)
keys = st.sampled_from(KEYS) | st.text(max_size=8)
jsonish = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(keys, children, max_size=6)
        | st.tuples(children, children)
    ),
    max_leaves=40,
)


@st.composite
def mutated_pods(draw: st.DrawFn) -> Any:
    """A realistic terminal pod with a few fields replaced by arbitrary values."""
    pod: dict[str, Any] = {
        "metadata": {
            "name": "web-0",
            "namespace": "team-a",
            "uid": "0f1e2d3c-aaaa-4bbb-8ccc-000000000001",
            "resourceVersion": "42",
            "labels": {"app": "web"},
            "annotations": {"zombied.io/keep": "false"},
            "ownerReferences": [{"kind": "StatefulSet", "name": "web", "controller": True}],
        },
        "spec": {"nodeName": "spot-1"},
        "status": {
            "phase": "Failed",
            "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown.",
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": TEXTS[12]}
            ],
            "containerStatuses": [
                {"name": "web", "state": {"terminated": {"finishedAt": "2024-05-01T10:00:00Z"}}}
            ],
        },
    }
    for _ in range(draw(st.integers(1, 5))):
        path = draw(st.lists(st.sampled_from(KEYS[:27]), min_size=1, max_size=4))
        target: Any = pod
        for key in path[:-1]:
            if not isinstance(target, dict):
                break
            target = target.setdefault(key, {})
        if isinstance(target, dict):
            target[path[-1]] = draw(jsonish)
    return pod


rule_sets = st.builds(
    lambda names, ages, kinds: RuleSet(
        tuple(Rule(name, age) for name, age in zip(names, ages, strict=False)),
        frozenset(kinds),
    ),
    st.lists(st.sampled_from(RULE_NAMES), unique=True, max_size=3),
    st.lists(st.floats(0, 1e9), min_size=3, max_size=3),
    st.sets(st.sampled_from(["Job", "job", "StatefulSet", "", "DaemonSet"])),
)
FIRST_SEEN = datetime(2024, 5, 1, tzinfo=UTC)


def check_snapshot(snapshot: PodSnapshot, rules: RuleSet) -> None:
    assert snapshot.namespace
    assert snapshot.name
    assert snapshot.uid
    assert "/" not in snapshot.name + snapshot.namespace
    hash(snapshot)  # snapshots are immutable and usable as keys
    verdict = classify(snapshot, rules, first_seen=FIRST_SEEN)
    if verdict.zombie:
        assert verdict.rule in rules.names
        assert verdict.due is not None
        assert not snapshot.keep
        assert not snapshot.deleting
        assert snapshot.terminal
    else:
        assert verdict.skip
        assert verdict.rule is None


@budget(fuzz=True)
@given(obj=jsonish | mutated_pods(), rules=rule_sets)
def test_parse_pod_and_classify_never_crash(obj: Any, rules: RuleSet) -> None:
    try:
        snapshot = parse_pod(obj)
    except PodParseError as exc:
        reason = exc.reason
        assert reason
        return
    check_snapshot(snapshot, rules)


@budget(fuzz=True)
@given(pod=mutated_pods(), rules=rule_sets)
def test_mutated_pods_survive_a_json_round_trip(pod: Any, rules: RuleSet) -> None:
    # What the wire can carry: JSON only (tuples become lists, NaN stays as the parser
    # of Python accepts it).
    wire = json.loads(json.dumps(pod))
    try:
        snapshot = parse_pod(wire)
    except PodParseError:
        return
    check_snapshot(snapshot, rules)


lines = (
    st.binary(max_size=64)
    | st.text(max_size=64).map(str.encode)
    | jsonish.map(lambda o: json.dumps(o).encode())
    | st.builds(
        lambda kind, obj: json.dumps({"type": kind, "object": obj}).encode(),
        st.sampled_from(TEXTS) | jsonish,
        jsonish | mutated_pods(),
    )
)


@budget(fuzz=True)
@given(line=lines)
def test_parse_event_raises_only_event_parse_error(line: bytes) -> None:
    try:
        event = parse_event(line)
    except EventParseError as exc:
        why = str(exc)
        assert why
        return
    assert event.type in {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"}
    assert isinstance(event.object, dict)
    if event.type != "ERROR":
        with contextlib.suppress(PodParseError):
            parse_pod(event.object)


@budget(fuzz=True)
@given(line=lines)
def test_peek_event_agrees_with_parse_event(line: bytes) -> None:
    # The watch handles what peek_event reads without ever calling parse_event: the two
    # must agree on every line peek_event accepts.
    head = peek_event(line)
    if head is None:
        return
    event = parse_event(line)
    assert event.type == head.type
    assert event.resource_version == head.resource_version
    if head.type == "BOOKMARK":
        return
    metadata = event.object["metadata"]
    assert event.type == "DELETED" or metadata.get("deletionTimestamp") is not None
    assert (metadata["namespace"], metadata["name"]) == (head.namespace, head.name)
    assert head.uid == (metadata.get("uid") or None)
