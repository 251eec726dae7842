"""Hostile objects against the pod parser and the rules: a zombie only where design.md
says so, and never a crash.

Whatever a broken or malicious API server sends, `parse_pod` either returns a
snapshot or raises `PodParseError`, and `judge` answers every snapshot with a
consistent judgement under any configuration (rules, owner exclusions, namespaces,
label selector): a zombie is terminal, in scope, neither kept nor being deleted.
Anything else raised would kill a watch for every pod. (Hostile watch lines are
tests/daemon/test_watcher's.)
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zombied.pod import PodParseError, PodSnapshot, parse_pod
from zombied.rules import RULE_NAMES, Decision, Rule, RuleSet, Selection, judge

from tests.daemon import pods
from tests.reliability.profiles import budget

# Thousands of examples through the same few functions: the unit tests cover their
# lines, and tracing every example for coverage doubles the time.
pytestmark = pytest.mark.no_cover

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
    "Job",
]

#: A realistic terminal pod, which `mutated_pods` changes in a few places.
POD: dict[str, Any] = pods.zombie(
    "web-0",
    uid="0f1e2d3c-aaaa-4bbb-8ccc-000000000001",
    owner=("StatefulSet", "web"),
    annotations={"zombied.io/keep": "false"},
    at=datetime(2024, 5, 1, 10, tzinfo=UTC),
)
POD["metadata"]["resourceVersion"] = "42"
POD["status"]["conditions"] = [
    {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}
]


def keys_of(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(keys_of(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_of(item) for item in value))
    return set()


#: The keys the parsers look at, so that random objects reach deep into them.
POD_KEYS = sorted(
    keys_of(POD) | {"deletionTimestamp", "initContainerStatuses", "ephemeralContainerStatuses"}
)
KEYS = [*POD_KEYS, "tier"]

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
    """`POD` with a few fields replaced by arbitrary values."""
    pod = copy.deepcopy(POD)
    for _ in range(draw(st.integers(1, 5))):
        path = draw(st.lists(st.sampled_from(POD_KEYS), min_size=1, max_size=4))
        target: Any = pod
        for key in path[:-1]:
            if not isinstance(target, dict):
                break
            target = target.setdefault(key, {})
        if isinstance(target, dict):
            target[path[-1]] = draw(jsonish)
    return pod


selections = st.builds(
    # A namespace both watched and excluded is refused: exclude only the others.
    lambda names, excluded, labels: Selection(
        names, tuple(ns for ns in excluded if ns not in names), labels
    ),
    st.lists(st.sampled_from(["team-a", "team-b", ".."]), max_size=2).map(tuple),
    st.lists(st.sampled_from(["team-a", "kube-system"]), max_size=1).map(tuple),
    st.sampled_from(["", "app=web", "app!=web,tier", "!tier", "app in (web,db)"]),
)
rule_sets = st.builds(
    lambda names, ages, kinds, scope: RuleSet(
        tuple(Rule(name, age) for name, age in zip(names, ages, strict=False)),
        frozenset(kinds),
        scope,
    ),
    st.lists(st.sampled_from(RULE_NAMES), unique=True, max_size=3),
    st.lists(st.floats(0, 1e9), min_size=3, max_size=3),
    st.sets(st.sampled_from(["Job", "job", "StatefulSet", "", "DaemonSet"])),
    selections,
)
FIRST_SEEN = datetime(2024, 5, 1, tzinfo=UTC)
#: Far past every due time the drawn min ages allow.
LATER = FIRST_SEEN + timedelta(days=20_000)


def check_snapshot(snapshot: PodSnapshot, rules: RuleSet) -> None:
    assert snapshot.namespace
    assert snapshot.name
    assert snapshot.uid
    assert "/" not in snapshot.name + snapshot.namespace
    assert {key for key, _ in snapshot.labels} <= rules.scope.label_keys
    hash(snapshot)  # snapshots are immutable and usable as keys
    judgement = judge(snapshot, rules, first_seen=FIRST_SEEN)
    decision = judgement.decision(LATER)
    if judgement.zombie:
        assert judgement.rule in rules.names
        assert judgement.due is not None
        assert judgement.skip is None
        assert decision is Decision.DELETE
        assert snapshot.terminal
        assert not snapshot.keep
        assert not snapshot.deleting
        assert rules.scope.excludes(snapshot) is None
    else:
        assert judgement.skip
        assert judgement.rule is judgement.due is None
        assert decision is Decision.KEEP


@budget(fuzz=True)
@given(
    obj=jsonish
    | mutated_pods()
    # What the wire can carry: JSON only (tuples become lists).
    | mutated_pods().map(lambda pod: json.loads(json.dumps(pod))),
    rules=rule_sets,
)
def test_parse_pod_and_judge_never_crash(obj: Any, rules: RuleSet) -> None:
    try:
        snapshot = parse_pod(obj, label_keys=rules.scope.label_keys)
    except PodParseError as exc:
        reason = exc.reason
        assert reason
        return
    check_snapshot(snapshot, rules)
