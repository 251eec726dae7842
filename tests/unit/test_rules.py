"""judge: every kubelet node-shutdown and admission-rejection variant, the other
rules, rules of one's own, and the vetoes."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs
from zombied.cache import PodCache
from zombied.pod import PodSnapshot, parse_pod
from zombied.queue import WorkQueue
from zombied.rules import (
    Decision,
    Judgement,
    Pattern,
    Rule,
    RuleSet,
    Selection,
    check_kind,
    judge,
    mismatch,
    precluded,
)

from tests.daemon import pods


@dataclass(frozen=True)
class Verdict:
    """What a judgement decides, for comparing with the expectation in one line."""

    zombie: bool
    rule: str | None = None
    due: datetime | None = None
    skip: str | None = None


def seen(judgement: Judgement) -> Verdict:
    return Verdict(judgement.zombie, judgement.rule, judgement.due, judgement.skip)


def due_at(judgement: Judgement, now: datetime) -> bool:
    return judgement.decision(now) is Decision.DELETE


FINISHED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
FIRST_SEEN = datetime(2024, 5, 1, 12, 5, 0, tzinfo=UTC)
DISRUPTED = datetime(2024, 5, 1, 11, 59, 30, tzinfo=UTC)
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
    ("1.20-1.21", "killed", KILLED_1_20, True, False),
    ("1.20-1.21", "killed-alt-message", KILLED_1_20_ALT, True, False),
    ("1.20-1.21", "rejected", REJECTED_1_20, False, False),
    ("1.22-1.25", "killed", KILLED_1_22, True, False),
    ("1.22-newest", "rejected", REJECTED_1_22, False, False),
    ("1.26-newest", "killed", KILLED_1_22, True, True),
    ("newest", "succeeded", SUCCEEDED_NEWEST, True, True),
]


def kubelet_pod(
    status: tuple[str, str, str],
    *,
    ran: bool,
    disruption: bool,
    owner: str = "ReplicaSet",
) -> dict[str, Any]:
    """The pod a kubelet leaves: its containers finished at ``FINISHED`` if it ``ran``,
    a ``DisruptionTarget`` condition (1.26+) if ``disruption``; created years before."""
    phase, reason, message = status
    obj = pods.pod(
        "web-7d9f-abcde",
        phase=phase,
        reason=reason,
        message=message,
        node="spot-1",
        owner=(owner, "web-7d9f"),
        finished_ago=0 if ran else None,
        at=FINISHED,
    )
    obj["metadata"] |= {"uid": "uid-1", "resourceVersion": "42", "creationTimestamp": CREATED}
    if disruption:
        since = {"reason": "TerminationByKubelet", "lastTransitionTime": pods.stamp(DISRUPTED)}
        condition = {"type": "DisruptionTarget", "status": "True", "message": message, **since}
        obj["status"]["conditions"] = [condition]
    return obj


def snapshot(**fields: Any) -> PodSnapshot:
    base: dict[str, Any] = {"namespace": "ns", "name": "p", "uid": "u", "phase": "Failed"}
    base.update(fields)
    return PodSnapshot(**base)


@pytest.mark.parametrize(
    ("version", "variant", "status", "ran", "disruption"),
    KUBELET_TABLE,
    ids=[f"{row[0]}-{row[1]}" for row in KUBELET_TABLE],
)
def test_node_shutdown_matches_every_kubelet_and_is_due_from_termination_never_creation(
    version: str, variant: str, status: Any, ran: bool, disruption: bool
) -> None:
    pod = parse_pod(kubelet_pod(status, ran=ran, disruption=disruption))
    verdict = judge(pod, RuleSet((Rule("node-shutdown", 45),)), first_seen=FIRST_SEEN)
    assert (verdict.zombie, verdict.rule, verdict.skip) == (True, "node-shutdown", None)
    # Without a time of its own (a 1.20 rejection) the pod is timed from first seen.
    since = FINISHED if ran else DISRUPTED if disruption else FIRST_SEEN
    assert verdict.due == since + timedelta(seconds=45)
    assert not due_at(verdict, since + timedelta(seconds=44.999))
    assert due_at(verdict, since + timedelta(seconds=45))
    assert judge(pod, ALL_RULES, first_seen=FIRST_SEEN).rule == "node-shutdown"
    verdict = judge(pod, RuleSet((Rule("evicted"),)), first_seen=FIRST_SEEN)
    assert seen(verdict) == Verdict(zombie=False, skip="no-rule")


@pytest.mark.parametrize(
    ("fields", "skip"),
    [
        ({"keep_value": "true"}, "keep-annotation"),
        ({"mirror": True}, "mirror-pod"),
        ({"deleting": True}, "deleting"),
        *(({"owner_kind": kind}, "owner-excluded") for kind in ("Job", "job", "jOb")),
        ({"owner_kind": ""}, None),  # an excluded "" names no owner: a bare pod is no Job
        # The first veto that applies is the one reported.
        ({"deleting": True, "keep_value": "true", "owner_kind": "Job"}, "deleting"),
        ({"keep_value": "true", "owner_kind": "Job"}, "keep-annotation"),
        ({"keep_value": "true", "phase": "Running"}, "not-terminal"),
        ({"deleting": True, "phase": "Running"}, "not-terminal"),
        *(({"phase": p}, "not-terminal") for p in ("Pending", "Running", "Unknown", "", "failed")),
    ],
)
def test_vetoes_win_over_every_rule_in_their_order(
    fields: dict[str, Any], skip: str | None
) -> None:
    pod = snapshot(**{"reason": "Terminated", **fields})
    rules = RuleSet(ALL_RULES.rules, exclude_owner_kinds=frozenset({"JOB", ""}))
    verdict = judge(pod, rules, first_seen=FIRST_SEEN)
    assert (verdict.zombie, verdict.skip) == (skip is None, skip)
    # Being deleted or not terminal holds before any rule, whatever the configuration.
    found = precluded(pod)
    assert (found.name if found else None) == (
        skip if skip in ("deleting", "not-terminal") else None
    )


class TestOtherRules:
    def test_evicted(self) -> None:
        pod = snapshot(reason="Evicted", terminated_at=FINISHED)
        assert judge(pod, RuleSet(), first_seen=FIRST_SEEN).skip == "no-rule"
        verdict = judge(pod, ALL_RULES, first_seen=FIRST_SEEN)
        assert seen(verdict) == Verdict(
            zombie=True, rule="evicted", due=FINISHED + timedelta(seconds=600)
        )

    @pytest.mark.parametrize("reason", ["", "OOMKilled", "Error", "DeadlineExceeded", "Evicted"])
    def test_failed_catches_every_failed_pod(self, reason: str) -> None:
        pod = snapshot(reason=reason)
        verdict = judge(pod, RuleSet((Rule("failed", 10),)), first_seen=FIRST_SEEN)
        assert seen(verdict) == Verdict(
            zombie=True, rule="failed", due=FIRST_SEEN + timedelta(seconds=10)
        )

    @pytest.mark.parametrize("reason", ["", "Completed", "Evicted"])
    def test_plain_succeeded_pods_are_left_alone(self, reason: str) -> None:
        pod = snapshot(phase="Succeeded", reason=reason)
        assert judge(pod, ALL_RULES, first_seen=FIRST_SEEN).skip == "no-rule"

    def test_precedence_ignores_listing_order(self) -> None:
        rules = RuleSet((Rule("failed", 1), Rule("evicted", 2)))
        assert rules.names == ("evicted", "failed")
        verdict = judge(snapshot(reason="Evicted"), rules, first_seen=FIRST_SEEN)
        assert verdict.rule == "evicted"


class TestTypes:
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
        assert RuleSet().names == ("node-shutdown", "admission-rejected")
        assert RuleSet().get("node-shutdown") == Rule("node-shutdown", 30.0)
        assert RuleSet().get("admission-rejected") == Rule("admission-rejected", 300.0)

    def test_a_pod_no_rule_matches_is_kept_whenever_asked(self) -> None:
        judgement = judge(snapshot(reason="Error"), RuleSet(), first_seen=FIRST_SEEN)
        assert judgement.decision(FIRST_SEEN + timedelta(days=365)) is Decision.KEEP


# -- admission rejections of a node that returns under the same name -------------------

# (kubelet versions, reason, message) as pkg/kubelet writes them: rejectPod prefixes
# "Pod " up to 1.25 and "Pod was rejected: " since 1.26; since 1.31 a failed predicate
# carries its description. NodeAffinity and OutOf<resource> as kubelets 1.20 and 1.37
# wrote them are test_recorded's.
ADMISSION_TABLE = [
    (
        "1.20-1.25",
        "OutOfnvidia.com/gpu",
        "Pod Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, capacity: 1",
    ),
    (
        "1.20-1.25",
        "UnexpectedAdmissionError",
        "Pod Update plugin resources failed due to requested number of devices unavailable for "
        "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected.",
    ),
    (
        "1.20-1.25",
        "UnexpectedAdmissionError",
        "Pod Allocate failed due to no healthy devices present; cannot allocate unhealthy "
        "devices nvidia.com/gpu, which is unexpected",
    ),
    (
        "1.20-1.25",
        "UnexpectedAdmissionError",
        "Pod Unexpected error while attempting to recover from admission failure: preemption: "
        "error finding a set of pods to preempt",
    ),
    ("1.26-1.30", "NodePorts", "Pod was rejected: Predicate NodePorts failed"),
    (
        "1.26-newest",
        "UnexpectedAdmissionError",
        "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate "
        "unhealthy devices nvidia.com/gpu, which is unexpected",
    ),
    (
        "1.31-newest",
        "NodeName",
        "Pod was rejected: Predicate NodeName failed: node(s) didn't match the requested node name",
    ),
    (
        "1.31-newest",
        "TaintToleration",
        "Pod was rejected: Predicate TaintToleration failed: node(s) had untolerated taint(s)",
    ),
]


def rejected(reason: str, message: str, *, phase: str = "Failed", **meta: Any) -> dict[str, Any]:
    return kubelet_pod((phase, reason, message), ran=True, disruption=False, **meta)


class TestAdmissionRejected:
    @pytest.mark.parametrize(
        ("versions", "reason", "message"),
        ADMISSION_TABLE,
        ids=[f"{v}-{r}-{i}" for i, (v, r, _) in enumerate(ADMISSION_TABLE)],
    )
    def test_kubelet_shapes_match_by_default(
        self, versions: str, reason: str, message: str
    ) -> None:
        pod = parse_pod(rejected(reason, message))
        verdict = judge(pod, RuleSet(), first_seen=FIRST_SEEN)
        assert verdict.zombie
        assert verdict.rule == "admission-rejected"
        assert verdict.due == FINISHED + timedelta(minutes=5)

    @pytest.mark.parametrize(
        ("reason", "message"),
        [
            # reasons the kubelet never writes on admission, or not this rule's
            ("Evicted", "Pod The node was low on resource: memory."),
            ("OutOf", "Pod Node didn't have enough resource: , requested: 1"),
            ("outOfcpu", "Pod Node didn't have enough resource: cpu, requested: 1"),
            ("NodeAffinity ", "Pod Predicate NodeAffinity failed"),
            ("TopologyAffinityError", "Resources cannot be allocated with Topology locality"),
            ("Unschedulable", "0/3 nodes are available: 3 Insufficient cpu."),
            # a genuine reason with a message the kubelet never wrote
            ("NodeAffinity", "node(s) didn't match Pod's node affinity/selector"),
            ("OutOfcpu", "Insufficient cpu"),
            ("UnexpectedAdmissionError", "something else went wrong"),
            ("NodeAffinity", "Pod Predicate NodePortsX failed"),
            ("NodeAffinity", ""),
        ],
    )
    def test_anything_else_is_left_alone(self, reason: str, message: str) -> None:
        pod = parse_pod(rejected(reason, message))
        verdict = judge(pod, RuleSet(), first_seen=FIRST_SEEN)
        assert not verdict.zombie
        assert verdict.skip == "no-rule"


# -- rules of one's own -------------------------------------------------------------------

GPU = Pattern(
    frozenset({"Failed"}),
    frozenset({"UnexpectedAdmissionError"}),
    message=re.compile(r"nvidia\.com/gpu"),
    owner_kinds=frozenset({"ReplicaSet", "statefulset"}),
)


class TestCustomRules:
    def test_matches_reason_message_and_owner(self) -> None:
        rules = RuleSet((Rule("gpu-not-ready", 600, GPU),))
        pod = parse_pod(rejected("UnexpectedAdmissionError", ADMISSION_TABLE[2][2]))
        verdict = judge(pod, rules, first_seen=FIRST_SEEN)
        assert verdict.rule == "gpu-not-ready"
        assert verdict.due == FINISHED + timedelta(minutes=10)
        # StatefulSet matches "statefulset": owner kinds compare case-insensitively
        pod = parse_pod(
            rejected("UnexpectedAdmissionError", "x nvidia.com/gpu", owner="StatefulSet")
        )
        assert judge(pod, rules, first_seen=FIRST_SEEN).rule == "gpu-not-ready"

    def test_precedence_builtins_then_custom_then_failed(self) -> None:
        catch = Pattern(frozenset({"Failed"}), frozenset({"NodeAffinity", "Oops"}))
        rules = RuleSet((Rule("failed", 1), Rule("mine", 2, catch), Rule("admission-rejected", 3)))
        assert rules.names == ("admission-rejected", "mine", "failed")
        nodeaffinity = parse_pod(rejected("NodeAffinity", "Pod Predicate NodeAffinity failed"))
        assert judge(nodeaffinity, rules, first_seen=FIRST_SEEN).rule == "admission-rejected"
        oops = parse_pod(rejected("Oops", "whatever"))
        assert judge(oops, rules, first_seen=FIRST_SEEN).rule == "mine"
        # rules of one's own keep the order they are listed in
        rules = RuleSet((Rule("b", 0, catch), Rule("a", 0, GPU)))
        assert rules.names == ("b", "a")

    @pytest.mark.parametrize(
        ("phases", "named"),
        [(set(), "Failed"), ({"Faild"}, "Faild"), ({"Failed", "Running"}, "Running")],
    )
    def test_invalid_phases(self, phases: set[str], named: str) -> None:
        with pytest.raises(ValueError, match=f"^phases: .*{named}"):
            Pattern(frozenset(phases), frozenset({"X"}))

    def test_cannot_redefine_a_builtin(self) -> None:
        with pytest.raises(ValueError, match="built-in"):
            Rule("node-shutdown", 0, GPU)


GPU_RULE = Rule("gpu-not-ready", 600, GPU)
GPU_POD = {"reason": "UnexpectedAdmissionError", "message": "nvidia.com/gpu", "owner_kind": "Job"}


@pytest.mark.parametrize(
    ("rule", "fields", "named"),
    [
        *((Rule("node-shutdown"), {"reason": r}, "reason") for r in ("shutdown", "Preempted")),
        (Rule("admission-rejected"), {"phase": "Succeeded"}, "phase"),
        (Rule("admission-rejected"), {"reason": "Evicted"}, "reason"),
        (Rule("admission-rejected"), {"reason": "NodeAffinity", "message": "bogus"}, "message"),
        (GPU_RULE, {**GPU_POD, "owner_kind": "ReplicaSet", "message": "amd.com/gpu"}, "message"),
        (GPU_RULE, GPU_POD, "owner kind 'Job'"),
        (GPU_RULE, {**GPU_POD, "owner_kind": ""}, "owner kind '<none>'"),
        (GPU_RULE, {**GPU_POD, "owner_kind": "ReplicaSet", "reason": "OutOfcpu"}, "reason"),
    ],
)
def test_a_rule_that_does_not_fit_says_which_field(
    rule: Rule, fields: dict[str, Any], named: str
) -> None:
    pod = snapshot(**fields)
    why = mismatch(rule, pod)
    assert why is not None
    assert why.startswith(named)
    assert seen(judge(pod, RuleSet((rule,)), first_seen=FIRST_SEEN)) == Verdict(
        False, skip="no-rule"
    )


class TestDecidedOnce:
    """What every front end asks the rules, answered in one place."""

    def test_a_rule_that_does_not_match_has_no_due_time(self) -> None:
        rules = RuleSet((Rule("node-shutdown"), Rule("evicted")))
        judgement = judge(snapshot(reason="Evicted"), rules, first_seen=FIRST_SEEN)
        due = {check.rule.name: check.due for check in judgement.rules}
        assert due == {"node-shutdown": None, "evicted": FIRST_SEEN + timedelta(seconds=30)}

    def test_scope(self) -> None:
        scope = Selection(("a", "b"), ("c",), "app=web")
        assert scope.excludes_namespace("a") is None
        assert scope.excludes_namespace("d") is not None
        assert Selection(exclude_namespaces=("c",)).excludes_namespace("c") is not None
        labelled = snapshot(namespace="a", labels=(("app", "web"),))
        assert scope.excludes(labelled) is None
        assert scope.excludes(snapshot(namespace="a")) is not None
        with pytest.raises(ValueError, match="'b' is also listed"):
            Selection(("a", "b"), ("b",))

    @pytest.mark.parametrize(
        ("kind", "accepted"),
        [
            ("ReplicaSet", True),
            ("job", True),
            ("Workflow", True),  # a custom controller's kind: it may own pods
            ("Deployment", False),  # its ReplicaSets own the pods
            ("cronjob", False),  # its Jobs own the pods
            ("ReplicaSets", False),
            ("statefulsets", False),
        ],
    )
    def test_owner_kinds_that_own_pods(self, kind: str, accepted: bool) -> None:
        if accepted:
            assert check_kind(kind) == kind
        else:
            with pytest.raises(ValueError, match=kind):
                check_kind(kind)


def test_the_daemon_logs_a_keep_value_it_does_not_understand_once() -> None:
    cache = PodCache(RuleSet(), WorkQueue())
    unclear = snapshot(reason="Terminated", keep_value="yes", keep_via="label")
    with capture_logs() as logs:
        cache.upsert(unclear)
        cache.upsert(replace(unclear, resource_version="2"))  # the same value: said once
        cache.upsert(snapshot(namespace="ns", name="q", uid="v", keep_value="true"))
    said = [entry for entry in logs if entry["event"] == "pod.keep_not_understood"]
    assert [(entry["pod"], entry["value"], entry["via"]) for entry in said] == [
        ("p", "yes", "label")
    ]
