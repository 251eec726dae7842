"""Scenario builders and the cluster driver: kubelet shutdown statuses, owners, replacements."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from kubesim import Simulator
from kubesim.recorded import recorded
from kubesim.scenario import (
    Cluster,
    Owner,
    node_ready,
    pod_object,
    shutdown_pod,
    shutdown_status,
)
from kubesim.store import Store

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-03-01T12:00:00Z"
EARLIER = datetime(2026, 3, 1, 11, 0, 0, tzinfo=UTC)

OLD_KILLED = "Node is shutting, evicting pods"
OLD_REJECTED = "Pod Node is in progress of shutting down, not admitting any new pods"
KILLED = "Pod was terminated in response to imminent node shutdown."
REJECTED = "Pod Pod was rejected as the node is shutting down."

# Kubelets not recorded here, as documented: version, variant -> phase, reason, message,
# DisruptionTarget condition.
TABLE: list[tuple[str, str, tuple[str, str, str, bool]]] = [
    ("1.20", "rejected", ("Failed", "Shutdown", OLD_REJECTED, False)),
    ("1.22", "terminated", ("Failed", "Terminated", KILLED, False)),
    ("1.22", "rejected", ("Failed", "NodeShutdown", REJECTED, False)),
    ("1.26", "terminated", ("Failed", "Terminated", KILLED, True)),
]
#: Versions and variants whose pods a recorded kubelet wrote: release, role replayed.
REPLAYED = [
    ("1.20", "terminated", "v1.20.2", "stubborn"),
    ("v1.37.2", "terminated", "v1.37.2", "stubborn"),
    ("newest", "succeeded", "v1.37.2", "graceful"),
    ("newest", "rejected", "v1.37.2", "late"),
    ("1.29", "succeeded", "v1.37.2", "graceful"),
]


def conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in pod["status"].get("conditions", [])}


def running_pod(owner: Owner | None = None) -> dict[str, Any]:
    return pod_object(
        "team-a",
        "api-7d4b9c8f6d-x7k2p",
        node="node-0",
        app="api",
        owner=owner,
        now=EARLIER,
        rng=random.Random(1),
    )


@pytest.mark.parametrize(("version", "variant", "expected"), TABLE)
def test_documented_shutdown_status(
    version: str, variant: str, expected: tuple[str, str, str, bool]
) -> None:
    phase, reason, message, disruption = expected
    shutdown = shutdown_status(version, variant)
    assert (shutdown.phase, shutdown.reason, shutdown.message) == (phase, reason, message)
    assert shutdown.disruption_target is disruption
    before = running_pod(Owner("ReplicaSet", "api-7d4b9c8f6d", "rs-uid"))
    pod = shutdown_pod(before, version=version, variant=variant, now=NOW)
    status = pod["status"]
    assert (status["phase"], status["reason"], status["message"]) == (phase, reason, message)
    conds = conditions(pod)
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["lastTransitionTime"] == NOW_TEXT
    if disruption:
        target = conds["DisruptionTarget"]
        assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
        assert target["message"] == message
    else:
        assert "DisruptionTarget" not in conds
    [container] = status["containerStatuses"]
    assert set(container["state"]) == {"terminated"}
    assert container["state"]["terminated"]["finishedAt"] == NOW_TEXT
    # The input is left alone: builders are pure.
    assert before["status"]["phase"] == "Running"
    assert pod["metadata"] == before["metadata"]


@pytest.mark.parametrize(("version", "variant", "release", "role"), REPLAYED)
def test_recorded_kubelets_are_replayed(
    version: str, variant: str, release: str, role: str
) -> None:
    written = next(pod for pod in recorded(release) if pod.role == role).pod
    before = running_pod(Owner("ReplicaSet", "api-7d4b9c8f6d", "rs-uid"))
    pod = shutdown_pod(before, version=version, variant=variant, now=NOW)
    status, original = pod["status"], written["status"]
    for key in ("phase", "reason", "message"):
        assert status.get(key) == original.get(key)
    assert {
        (c["type"], c["status"], c.get("reason"), c.get("message"))
        for c in status.get("conditions", [])
    } == {
        (c["type"], c["status"], c.get("reason"), c.get("message"))
        for c in original.get("conditions", [])
    }
    assert [c["name"] for c in status.get("containerStatuses", [])] == (
        ["api"] if original.get("containerStatuses") else []
    )
    kubelet = [e for e in pod["metadata"]["managedFields"] if e["manager"] == "kubelet"]
    assert kubelet[-1]["time"] <= NOW_TEXT
    assert NOW_TEXT in str(status) + str(kubelet)
    assert before["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("version", "variant", "at_fault"),
    [
        ("1.19", "terminated", "1.19"),  # no graceful node shutdown before 1.20
        ("2.0", "terminated", "2.0"),
        ("banana", "terminated", "banana"),
        ("1.22", "exploded", "exploded"),
        ("1.21", "succeeded", "1.21"),  # Succeeded shut-down pods came with 1.29
        ("1.28", "succeeded", "1.28"),
    ],
)
def test_a_status_no_kubelet_wrote_is_refused_naming_why(
    version: str, variant: str, at_fault: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(at_fault)):
        shutdown_status(version, variant)


@pytest.fixture
def store() -> Store:
    return Store(seed=3)


@pytest.fixture
def cluster(store: Store) -> Cluster:
    return Cluster(store, random.Random(3), clock=lambda: NOW)


def pods_by_owner(store: Store) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in store.list("pods"):
        refs = pod["metadata"].get("ownerReferences") or [{"kind": "bare"}]
        out.setdefault(refs[0]["kind"], []).append(pod)
    return out


def test_build_spreads_mixed_owners(store: Store, cluster: Cluster) -> None:
    result = cluster.build(nodes=3, pods=30, namespaces=("team-a", "team-b", "team-c"))
    assert result.pods == 30
    assert result.nodes == ["node-0", "node-1", "node-2"]
    assert {n["metadata"]["name"] for n in store.list("nodes")} == set(result.nodes)
    assert {"team-a", "team-b", "team-c"} <= {
        n["metadata"]["name"] for n in store.list("namespaces")
    }
    pods = store.list("pods")
    assert len(pods) == 30
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    assert {p["metadata"]["namespace"] for p in pods} == {"team-a", "team-b", "team-c"}
    assert {p["spec"]["nodeName"] for p in pods} == set(result.nodes)
    owners = pods_by_owner(store)
    assert set(owners) == {"ReplicaSet", "StatefulSet", "Job", "DaemonSet", "bare"}
    assert len(owners["ReplicaSet"]) > 15
    assert sorted(p["metadata"]["name"] for p in owners["StatefulSet"]) == [
        "web-0",
        "web-1",
        "web-2",
    ]
    assert sorted(p["spec"]["nodeName"] for p in owners["DaemonSet"]) == result.nodes
    for pod in owners["ReplicaSet"]:
        ref = pod["metadata"]["ownerReferences"][0]
        assert ref["controller"] is True
        assert pod["metadata"]["name"].startswith(ref["name"] + "-")
        assert pod["metadata"]["labels"]["pod-template-hash"] in ref["name"]
    for pod in owners["Job"]:
        assert pod["spec"]["restartPolicy"] == "Never"
        assert (
            pod["metadata"]["labels"]["job-name"] == pod["metadata"]["ownerReferences"][0]["name"]
        )


def test_build_is_deterministic_with_a_seed() -> None:
    def names(seed: int) -> list[str]:
        store = Store(seed=seed)
        Cluster(store, random.Random(seed), clock=lambda: NOW).build()
        return [p["metadata"]["name"] for p in store.list("pods")]

    assert names(5) == names(5)
    assert names(5) != names(6)


def test_preempt_turns_the_nodes_pods_into_zombies(store: Store, cluster: Cluster) -> None:
    cluster.build()
    on_node = {
        p["metadata"]["uid"] for p in store.list("pods") if p["spec"]["nodeName"] == "node-0"
    }
    result = cluster.preempt("node-0", version="1.26")
    assert {z.uid for z in result.zombies} == on_node
    for ref in result.zombies:
        pod = store.get("pods", ref.namespace, ref.name)
        assert pod is not None
        assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Terminated")
        assert conditions(pod)["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    node = store.get("nodes", "", "node-0")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    assert conditions(node)["Ready"]["status"] == "False"
    assert not node_ready(node)


def test_preempt_replaces_like_controllers(store: Store, cluster: Cluster) -> None:
    cluster.build()
    result = cluster.preempt("node-1", version="1.22")
    zombies = {z.uid: store.get("pods", z.namespace, z.name) for z in result.zombies}
    kinds = {
        uid: (pod["metadata"].get("ownerReferences") or [{"kind": "bare"}])[0]["kind"]
        for uid, pod in zombies.items()
        if pod is not None
    }
    replaced_kinds = sorted(k for k in kinds.values() if k in ("ReplicaSet", "Job"))
    assert len(result.replacements) == len(replaced_kinds)
    zombie_names = {z.name for z in result.zombies}
    for ref in result.replacements:
        pod = store.get("pods", ref.namespace, ref.name)
        assert pod is not None
        assert ref.name not in zombie_names
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"] in ("node-0", "node-2")
        assert pod["metadata"]["ownerReferences"][0]["kind"] in ("ReplicaSet", "Job")
    assert [r.name for r in result.awaiting_replacement] == ["web-1"]
    assert {kinds[r.uid] for r in result.not_replaced} == {"DaemonSet"} | (
        {"bare"} if "bare" in kinds.values() else set()
    )


def test_statefulset_name_comes_back_with_a_new_uid(store: Store, cluster: Cluster) -> None:
    cluster.build()
    result = cluster.preempt("node-0")
    [web0] = result.awaiting_replacement
    assert web0.name == "web-0"
    assert cluster.replace_deleted() == []  # the zombie still holds the name
    store.delete("pods", web0.namespace, web0.name, uid=web0.uid)
    [replacement] = cluster.replace_deleted()
    assert (replacement.namespace, replacement.name) == (web0.namespace, "web-0")
    assert replacement.uid != web0.uid
    pod = store.get("pods", web0.namespace, "web-0")
    assert pod is not None
    assert pod["metadata"]["uid"] == replacement.uid
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] != "node-0"
    assert pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "web-0"
    assert cluster.awaiting_replacement == []


async def test_the_simulator_recreates_a_deleted_statefulset_pod(sim: Simulator) -> None:
    sim.cluster.build()
    [web0] = sim.cluster.preempt("node-0", version="1.20").awaiting_replacement
    sim.store.delete("pods", web0.namespace, "web-0", uid=web0.uid)
    pod = sim.store.get("pods", web0.namespace, "web-0")
    assert pod is not None
    assert pod["metadata"]["uid"] != web0.uid


@pytest.mark.parametrize(
    ("node", "options", "at_fault"),
    [("node-0", {"variant": "nope"}, "nope"), ("node-9", {}, "node-9")],
)
def test_preempt_validates_first(
    store: Store, cluster: Cluster, node: str, options: dict[str, Any], at_fault: str
) -> None:
    cluster.build()
    with pytest.raises(ValueError, match=at_fault):
        cluster.preempt(node, **options)
    assert {p["status"]["phase"] for p in store.list("pods")} == {"Running"}
