"""classify: every kubelet node-shutdown variant, the other rules, and the vetoes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zombied.pod import KEEP_ANNOTATION, PodParseError, PodSnapshot, parse_pod
from zombied.rules import (
    NODE_SHUTDOWN_REASONS,
    RULE_NAMES,
    Rule,
    RuleSet,
    Verdict,
    classify,
    describe,
    is_due,
    matches,
)

FINISHED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
FIRST_SEEN = datetime(2024, 5, 1, 12, 5, 0, tzinfo=UTC)
CREATED = "2020-01-01T00:00:00Z"

ALL_RULES = RuleSet(rules=(Rule("node-shutdown", 30), Rule("evicted", 600), Rule("failed", 3600)))

# The kubelet's graceful node shutdown, as design.md tabulates it.
KILLED_1_20 = ("Failed", "Shutdown", "Node is shutting, evicting pods")
KILLED_1_20_ALT = ("Failed", "Shutdown", "Node is shutting down, evicting pods")
REJECTED_1_20 = (
    "Failed",
    "Shutdown",
    "Pod Node is in progress of shutting down, not admitting any new pods",
)
KILLED_1_22 = ("Failed", "Terminated", "Pod was terminated in response to imminent node shutdown.")
REJECTED_1_22 = ("Failed", "NodeShutdown", "Pod Pod was rejected as the node is shutting down.")
SUCCEEDED_NEWEST = (
    "Succeeded",
    "Terminated",
    "Pod was terminated in response to imminent node shutdown.",
)

# (version, variant, (phase, reason, message), containers ran?, DisruptionTarget?)
KUBELET_TABLE = [
    ("1.20", "killed", KILLED_1_20, True, False),
    ("1.20", "killed-alt-message", KILLED_1_20_ALT, True, False),
    ("1.20", "rejected", REJECTED_1_20, False, False),
    ("1.21", "killed", KILLED_1_20, True, False),
    ("1.21", "killed-alt-message", KILLED_1_20_ALT, True, False),
    ("1.21", "rejected", REJECTED_1_20, False, False),
    ("1.22", "killed", KILLED_1_22, True, False),
    ("1.22", "rejected", REJECTED_1_22, False, False),
    ("1.25", "killed", KILLED_1_22, True, False),
    ("1.25", "rejected", REJECTED_1_22, False, False),
    ("1.26", "killed", KILLED_1_22, True, True),
    ("1.26", "rejected", REJECTED_1_22, False, False),
    ("1.29", "killed", KILLED_1_22, True, True),
    ("1.29", "rejected", REJECTED_1_22, False, False),
    ("newest", "killed", KILLED_1_22, True, True),
    ("newest", "rejected", REJECTED_1_22, False, False),
    ("newest", "succeeded", SUCCEEDED_NEWEST, True, True),
]


def kubelet_pod(
    status: tuple[str, str, str],
    *,
    ran: bool,
    disruption: bool,
    owner: str = "ReplicaSet",
    annotations: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    phase, reason, message = status
    pod_status: dict[str, Any] = {
        "phase": phase,
        "reason": reason,
        "message": message,
        "startTime": CREATED,
        "conditions": [],
    }
    if ran:
        exit_code = 0 if phase == "Succeeded" else 137
        pod_status["containerStatuses"] = [
            {
                "name": "app",
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "startedAt": CREATED,
                        "finishedAt": FINISHED.isoformat().replace("+00:00", "Z"),
                    }
                },
            }
        ]
    if disruption:
        pod_status["conditions"].append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": message,
                "lastTransitionTime": "2024-05-01T11:59:30Z",
            }
        )
    metadata: dict[str, Any] = {
        "namespace": "team-a",
        "name": "web-7d9f-abcde",
        "uid": "uid-1",
        "resourceVersion": "42",
        "creationTimestamp": CREATED,
        "annotations": annotations or {},
        "ownerReferences": [{"kind": owner, "name": "web-7d9f", "controller": True}],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2024-05-01T12:01:00Z"
    return {"metadata": metadata, "spec": {"nodeName": "spot-1"}, "status": pod_status}


def snapshot(**fields: Any) -> PodSnapshot:
    base: dict[str, Any] = {"namespace": "ns", "name": "p", "uid": "u", "phase": "Failed"}
    base.update(fields)
    return PodSnapshot(**base)


@pytest.mark.parametrize(
    ("version", "variant", "status", "ran", "disruption"),
    KUBELET_TABLE,
    ids=[f"{row[0]}-{row[1]}" for row in KUBELET_TABLE],
)
class TestKubeletTable:
    def test_default_rule_matches(
        self, version: str, variant: str, status: Any, ran: bool, disruption: bool
    ) -> None:
        pod = parse_pod(kubelet_pod(status, ran=ran, disruption=disruption))
        verdict = classify(pod, RuleSet(), first_seen=FIRST_SEEN)
        assert verdict.zombie
        assert verdict.rule == "node-shutdown"
        assert verdict.skip is None
        assert pod.disruption_target is disruption

    def test_due_is_measured_from_termination_never_creation(
        self, version: str, variant: str, status: Any, ran: bool, disruption: bool
    ) -> None:
        pod = parse_pod(kubelet_pod(status, ran=ran, disruption=disruption))
        verdict = classify(pod, RuleSet((Rule("node-shutdown", 45),)), first_seen=FIRST_SEEN)
        if ran:
            since = FINISHED
        elif disruption:
            since = datetime(2024, 5, 1, 11, 59, 30, tzinfo=UTC)
        else:
            since = FIRST_SEEN
        assert verdict.due == since + timedelta(seconds=45)
        assert not is_due(verdict, since + timedelta(seconds=44.999))
        assert is_due(verdict, since + timedelta(seconds=45))

    def test_node_shutdown_wins_over_other_rules(
        self, version: str, variant: str, status: Any, ran: bool, disruption: bool
    ) -> None:
        pod = parse_pod(kubelet_pod(status, ran=ran, disruption=disruption))
        assert classify(pod, ALL_RULES, first_seen=FIRST_SEEN).rule == "node-shutdown"

    @pytest.mark.parametrize(
        ("veto", "skip"),
        [
            ({"annotations": {KEEP_ANNOTATION: "true"}}, "keep-annotation"),
            ({"annotations": {KEEP_ANNOTATION: "TRUE"}}, "keep-annotation"),
            ({"deleting": True}, "deleting"),
            ({"owner": "job"}, "owner-excluded"),
        ],
    )
    def test_vetoes(
        self,
        version: str,
        variant: str,
        status: Any,
        ran: bool,
        disruption: bool,
        veto: dict[str, Any],
        skip: str,
    ) -> None:
        pod = parse_pod(kubelet_pod(status, ran=ran, disruption=disruption, **veto))
        rules = RuleSet(ALL_RULES.rules, exclude_owner_kinds=frozenset({"Job"}))
        assert classify(pod, rules, first_seen=FIRST_SEEN) == Verdict(zombie=False, skip=skip)

    def test_not_enabled(
        self, version: str, variant: str, status: Any, ran: bool, disruption: bool
    ) -> None:
        pod = parse_pod(kubelet_pod(status, ran=ran, disruption=disruption))
        verdict = classify(pod, RuleSet((Rule("evicted"),)), first_seen=FIRST_SEEN)
        assert verdict == Verdict(zombie=False, skip="no-rule")


class TestOtherRules:
    def test_evicted(self) -> None:
        pod = snapshot(reason="Evicted", terminated_at=FINISHED)
        assert classify(pod, RuleSet(), first_seen=FIRST_SEEN).skip == "no-rule"
        verdict = classify(pod, ALL_RULES, first_seen=FIRST_SEEN)
        assert verdict == Verdict(
            zombie=True, rule="evicted", due=FINISHED + timedelta(seconds=600)
        )

    @pytest.mark.parametrize("reason", ["", "OOMKilled", "Error", "DeadlineExceeded", "Evicted"])
    def test_failed_catches_every_failed_pod(self, reason: str) -> None:
        pod = snapshot(reason=reason)
        verdict = classify(pod, RuleSet((Rule("failed", 10),)), first_seen=FIRST_SEEN)
        assert verdict == Verdict(
            zombie=True, rule="failed", due=FIRST_SEEN + timedelta(seconds=10)
        )

    @pytest.mark.parametrize("reason", ["", "Completed", "Evicted"])
    def test_plain_succeeded_pods_are_left_alone(self, reason: str) -> None:
        pod = snapshot(phase="Succeeded", reason=reason)
        assert classify(pod, ALL_RULES, first_seen=FIRST_SEEN).skip == "no-rule"

    @pytest.mark.parametrize("reason", sorted(NODE_SHUTDOWN_REASONS))
    @pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown", "", "failed", "Bogus"])
    def test_non_terminal_is_never_a_zombie(self, phase: str, reason: str) -> None:
        pod = snapshot(phase=phase, reason=reason)
        assert classify(pod, ALL_RULES, first_seen=FIRST_SEEN) == Verdict(
            zombie=False, skip="not-terminal"
        )

    @pytest.mark.parametrize("reason", ["shutdown", "NODESHUTDOWN", "Terminating", "Preempted"])
    def test_reason_must_match_exactly(self, reason: str) -> None:
        pod = snapshot(reason=reason)
        assert not matches("node-shutdown", pod)

    def test_precedence_ignores_listing_order(self) -> None:
        rules = RuleSet((Rule("failed", 1), Rule("evicted", 2)))
        assert rules.names == ("evicted", "failed")
        verdict = classify(snapshot(reason="Evicted"), rules, first_seen=FIRST_SEEN)
        assert verdict.rule == "evicted"

    def test_zero_min_age(self) -> None:
        rules = RuleSet((Rule("node-shutdown", 0),))
        verdict = classify(snapshot(reason="Terminated"), rules, first_seen=FIRST_SEEN)
        assert verdict.due == FIRST_SEEN
        assert is_due(verdict, FIRST_SEEN)

    def test_first_seen_used_without_termination_time(self) -> None:
        verdict = classify(snapshot(reason="Shutdown"), RuleSet(), first_seen=FIRST_SEEN)
        assert verdict.due == FIRST_SEEN + timedelta(seconds=30)

    def test_vetoes_order(self) -> None:
        pod = snapshot(reason="Terminated", deleting=True, keep=True, owner_kind="Job")
        rules = RuleSet(exclude_owner_kinds=frozenset({"Job"}))
        assert classify(pod, rules, first_seen=FIRST_SEEN).skip == "deleting"
        pod = snapshot(reason="Terminated", keep=True, owner_kind="Job")
        assert classify(pod, rules, first_seen=FIRST_SEEN).skip == "keep-annotation"

    @pytest.mark.parametrize("kind", ["Job", "job", "JOB", "jOb"])
    def test_owner_kind_case_insensitive(self, kind: str) -> None:
        rules = RuleSet(exclude_owner_kinds=frozenset({"Job"}))
        pod = snapshot(reason="Terminated", owner_kind=kind)
        assert classify(pod, rules, first_seen=FIRST_SEEN).skip == "owner-excluded"
        rules = RuleSet(exclude_owner_kinds=frozenset({kind}))
        assert rules.excludes("Job")

    def test_bare_pod_not_excluded_by_empty_kind(self) -> None:
        rules = RuleSet(exclude_owner_kinds=frozenset({"Job", ""}))
        assert classify(snapshot(reason="Terminated"), rules, first_seen=FIRST_SEEN).zombie


class TestTypes:
    def test_rule_names(self) -> None:
        assert RULE_NAMES == ("node-shutdown", "evicted", "failed")

    @pytest.mark.parametrize(
        ("name", "min_age"), [("bogus", 1.0), ("node-shutdown", -1.0), ("evicted", float("nan"))]
    )
    def test_invalid_rule(self, name: str, min_age: float) -> None:
        with pytest.raises(ValueError, match="rule"):
            Rule(name, min_age)

    def test_duplicate_rules(self) -> None:
        with pytest.raises(ValueError, match="more than once"):
            RuleSet((Rule("failed"), Rule("failed", 5)))

    def test_ruleset_value_semantics(self) -> None:
        a = RuleSet((Rule("evicted", 5),), frozenset({"Job"}))
        b = RuleSet((Rule("evicted", 5),), frozenset({"Job"}))
        assert a == b
        assert hash(a) == hash(b)
        assert a.get("evicted") == Rule("evicted", 5)
        assert a.get("failed") is None
        assert RuleSet().names == ("node-shutdown",)
        assert RuleSet().get("node-shutdown") == Rule("node-shutdown", 30.0)

    def test_matches_unknown(self) -> None:
        with pytest.raises(ValueError, match="unknown rule"):
            matches("bogus", snapshot())

    def test_is_due_for_non_zombie(self) -> None:
        assert not is_due(Verdict(zombie=False, skip="no-rule"), FIRST_SEEN)

    def test_describe(self) -> None:
        pod = parse_pod(kubelet_pod(KILLED_1_22, ran=True, disruption=True))
        assert describe(pod) == {
            "namespace": "team-a",
            "pod": "web-7d9f-abcde",
            "uid": "uid-1",
            "phase": "Failed",
            "reason": "Terminated",
            "node": "spot-1",
            "owner": "ReplicaSet/web-7d9f",
            "terminated_at": "2024-05-01T12:00:00+00:00",
        }
        assert "owner" not in describe(snapshot())


# -- properties over random input -------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
timestamps = st.one_of(
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    json_values,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, json_values)


def mostly(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually well-formed, sometimes garbage: enough valid pods to reach the rules."""
    return st.integers(0, 9).flatmap(lambda roll: json_values if roll == 0 else strategy)


container_statuses = st.lists(
    maybe(
        st.fixed_dictionaries(
            {
                "state": maybe(
                    st.fixed_dictionaries(
                        {"terminated": maybe(st.fixed_dictionaries({"finishedAt": timestamps}))}
                    )
                )
            }
        )
    ),
    max_size=3,
)
conditions = st.lists(
    maybe(
        st.fixed_dictionaries(
            {
                "type": maybe(st.sampled_from(["Ready", "DisruptionTarget", "PodScheduled"])),
                "status": maybe(st.sampled_from(["True", "False"])),
                "lastTransitionTime": timestamps,
            }
        )
    ),
    max_size=3,
)
owner_refs = st.lists(
    maybe(
        st.fixed_dictionaries(
            {
                "kind": maybe(
                    st.sampled_from(["Job", "job", "ReplicaSet", "StatefulSet", "DaemonSet"])
                ),
                "name": maybe(st.text(max_size=5)),
                "controller": maybe(st.booleans()),
            }
        )
    ),
    max_size=3,
)
raw_pods = st.fixed_dictionaries(
    {
        "metadata": mostly(
            st.fixed_dictionaries(
                {
                    "namespace": mostly(st.sampled_from(["default", "team-a"])),
                    "name": mostly(st.from_regex(r"[a-z0-9][-a-z0-9.]{0,8}", fullmatch=True)),
                    "uid": mostly(st.uuids().map(str)),
                },
                optional={
                    "resourceVersion": maybe(st.integers(0).map(str)),
                    "deletionTimestamp": maybe(timestamps),
                    "annotations": maybe(
                        st.dictionaries(
                            st.sampled_from([KEEP_ANNOTATION, "other"]),
                            maybe(st.sampled_from(["true", "True", "false", ""])),
                        )
                    ),
                    "labels": json_values,
                    "ownerReferences": maybe(owner_refs),
                },
            )
        ),
    },
    optional={
        "spec": maybe(st.fixed_dictionaries({"nodeName": maybe(st.text(max_size=5))})),
        "status": mostly(
            st.fixed_dictionaries(
                {
                    "phase": mostly(st.sampled_from(["Failed", "Succeeded", "Running", "Pending"])),
                    "reason": mostly(
                        st.sampled_from([*NODE_SHUTDOWN_REASONS, "Evicted", "OOMKilled", ""])
                    ),
                },
                optional={
                    "message": json_values,
                    "containerStatuses": maybe(container_statuses),
                    "initContainerStatuses": maybe(container_statuses),
                    "conditions": maybe(conditions),
                },
            )
        ),
    },
)
rule_sets = st.builds(
    RuleSet,
    rules=st.lists(st.sampled_from(RULE_NAMES), unique=True).map(
        lambda names: tuple(Rule(n, 7) for n in names)
    ),
    exclude_owner_kinds=st.frozensets(st.sampled_from(["Job", "DaemonSet", "statefulset"])),
)


@settings(max_examples=400, deadline=None)
@given(obj=st.one_of(raw_pods, json_values), rules=rule_sets)
def test_random_pods_never_crash_and_vetoes_hold(obj: object, rules: RuleSet) -> None:
    try:
        pod = parse_pod(obj)
    except PodParseError:
        return
    verdict = classify(pod, rules, first_seen=FIRST_SEEN)
    assert verdict.zombie == (verdict.skip is None)
    if pod.keep or pod.deleting or rules.excludes(pod.owner_kind) or not pod.terminal:
        assert not verdict.zombie
    if verdict.zombie:
        assert verdict.rule in rules.names
        assert verdict.due is not None
        since = pod.terminated_at or FIRST_SEEN
        assert verdict.due - since == timedelta(seconds=7)
    else:
        assert verdict.rule is None
        assert verdict.due is None
    describe(pod)


snapshots = st.builds(
    PodSnapshot,
    namespace=st.just("ns"),
    name=st.just("p"),
    uid=st.just("u"),
    phase=st.sampled_from(["Failed", "Succeeded", "Running", "Pending", "Unknown", ""]),
    reason=st.sampled_from([*sorted(NODE_SHUTDOWN_REASONS), "Evicted", "OOMKilled", ""]),
    owner_kind=st.sampled_from(["", "Job", "JOB", "ReplicaSet", "StatefulSet", "DaemonSet"]),
    deleting=st.booleans(),
    keep=st.booleans(),
    terminated_at=st.none() | st.datetimes(timezones=st.just(UTC)),
)


@settings(max_examples=400, deadline=None)
@given(pod=snapshots, rules=rule_sets)
def test_classify_properties(pod: PodSnapshot, rules: RuleSet) -> None:
    verdict = classify(pod, rules, first_seen=FIRST_SEEN)
    vetoed = pod.keep or pod.deleting or rules.excludes(pod.owner_kind)
    if vetoed or not pod.terminal:
        assert not verdict.zombie
    else:
        expected = next((r.name for r in rules.ordered() if matches(r.name, pod)), None)
        assert verdict.rule == expected
        assert verdict.zombie == (expected is not None)
