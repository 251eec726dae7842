"""The simulator's store: resourceVersions, history window, compaction, graceful deletion."""

from __future__ import annotations

import pytest
from testkit import eventually, pod

from kubesim import Simulator
from kubesim.status import ApiError
from kubesim.store import Store


def test_every_write_bumps_one_global_resource_version() -> None:
    store = Store()
    start = store.resource_version
    created = store.create("pods", pod("a"))
    assert int(created["metadata"]["resourceVersion"]) == store.resource_version
    store.create("leases", {"metadata": {"name": "l", "namespace": "ns"}})
    updated = store.update("pods", {**created, "status": {"phase": "Failed"}})
    assert int(updated["metadata"]["resourceVersion"]) == store.resource_version
    # a pod, a namespace created on the fly, a lease, an update
    assert store.resource_version == start + 4


def test_objects_are_copied_in_and_out() -> None:
    store = Store()
    obj = pod("a")
    created = store.create("pods", obj)
    created["metadata"]["name"] = "changed"
    obj["metadata"]["name"] = "changed"
    got = store.get("pods", "ns", "a")
    assert got is not None
    got["status"]["phase"] = "Mutated"
    again = store.get("pods", "ns", "a")
    assert again is not None
    assert again["metadata"]["name"] == "a"
    assert again["status"]["phase"] == "Pending"


def test_pods_on_node_follows_binding_moves_and_deletes() -> None:
    store = Store()

    def on(node: str) -> list[str]:
        return [p["metadata"]["name"] for p in store.pods_on_node(node)]

    b = store.create("pods", {**pod("b"), "spec": {"nodeName": "n1"}})
    store.create("pods", {**pod("a", "other"), "spec": {"nodeName": "n1"}})
    store.create("pods", pod("unbound"))
    assert on("n1") == ["b", "a"]  # ns/b sorts before other/a
    store.update("pods", {**b, "spec": {"nodeName": "n2"}})
    assert (on("n1"), on("n2")) == (["a"], ["b"])
    store.delete("pods", "other", "a", grace_period=0)
    store.delete("pods", "ns", "b", grace_period=0)
    assert (on("n1"), on("n2"), on("")) == ([], [], [])


def test_history_window_expires_old_versions() -> None:
    store = Store(history_window=5)
    first = store.create("pods", pod("a"))
    rv = int(first["metadata"]["resourceVersion"])
    store.check_watch_start(rv)
    for i in range(6):
        store.create("pods", pod(f"p{i}"))
    with pytest.raises(ApiError) as info:
        store.check_watch_start(rv)
    assert (info.value.code, info.value.reason) == (410, "Expired")
    store.check_watch_start(store.oldest_resource_version)


async def test_running_pod_vanishes_after_its_grace_period(sim: Simulator) -> None:
    sim.store.create("pods", {**pod("busy", phase="Running"), "spec": {"nodeName": "n1"}})
    deleting = sim.store.delete("pods", "ns", "busy", grace_period=1)
    assert deleting["metadata"]["deletionTimestamp"]
    assert sim.store.get("pods", "ns", "busy") is not None
    await eventually(lambda: sim.store.get("pods", "ns", "busy") is None, timeout=5)


def test_namespace_delete_removes_its_objects() -> None:
    store = Store()
    store.create("pods", pod("a"))
    store.create("leases", {"metadata": {"name": "l", "namespace": "ns"}})
    store.delete("namespaces", "", "ns")
    assert store.list("pods") == []
    assert store.list("leases") == []
    assert store.get("namespaces", "", "ns") is None
