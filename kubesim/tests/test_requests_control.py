"""Simulator-only surfaces: the request log, the deletion record, who may use its own API."""

from __future__ import annotations

import aiohttp
from testkit import pod

from kubesim import RequestLog, RequestRecord, Simulator
from kubesim.rbac import PolicyRule


async def test_request_log_counts_by_verb_and_resource(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("a", phase="Failed"))
    sim.store.create("pods", pod("b", phase="Failed"))
    async with http.get("/api/v1/pods"):
        pass
    async with http.get("/api/v1/namespaces/ns/pods/a"):
        pass
    async with http.get(
        "/api/v1/namespaces/ns/pods", params={"watch": "1", "timeoutSeconds": "1"}
    ) as r:
        await r.read()
    async with http.delete("/api/v1/namespaces/ns/pods/a"):
        pass
    async with http.delete("/api/v1/namespaces/ns/pods/a"):
        pass
    async with http.patch(
        "/api/v1/namespaces/ns/pods/b/status",
        json={"status": {"reason": "Terminated"}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass
    async with http.put(
        "/apis/coordination.k8s.io/v1/namespaces/ns/leases/none",
        json={"metadata": {"name": "none"}},
    ):
        pass
    log = sim.requests
    assert log.count("list", "pods") == 1
    assert log.count("get", "pods") == 1
    assert log.count("watch", "pods") == 1
    assert log.count("delete", "pods") == 2
    assert log.count("patch", "pods/status") == 1
    assert log.count("update", "leases") == 1
    deletes = log.filter(verb="delete")
    assert [r.status for r in deletes] == [200, 404]
    assert deletes[0].namespace == "ns"
    assert deletes[0].name == "a"
    assert deletes[0].user == "system:admin"
    assert all(r.bytes > 0 for r in log)
    assert log.filter(verb="watch")[0].query == "watch=1&timeoutSeconds=1"


def test_request_log_counts_stay_exact_past_the_bound() -> None:
    log = RequestLog(maxlen=3)
    for i in range(10):
        log.add(RequestRecord("list", "nodes", "", "", "/api/v1/nodes", "", 200, 2, 0.0, "u", i))
    assert len(log) == 3
    assert [r.time for r in log] == [7, 8, 9]
    assert log.count("list", "nodes") == 10


async def test_deleted_records_keep_the_object_user_and_dry_run(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    created = sim.store.create("pods", pod("z", phase="Failed"))
    async with http.delete("/api/v1/namespaces/ns/pods/z", params={"dryRun": "All"}) as r:
        assert r.status == 200
    async with http.delete("/api/v1/namespaces/ns/pods/z") as r:
        assert r.status == 200
    assert [(d.obj["metadata"]["uid"], d.dry_run, d.user) for d in sim.deleted] == [
        (created["metadata"]["uid"], True, "system:admin"),
        (created["metadata"]["uid"], False, "system:admin"),
    ]
    assert sim.deleted[1].obj["status"]["phase"] == "Failed"
    assert sim.deleted[1].rv == int(created["metadata"]["resourceVersion"])


async def test_the_simulator_api_is_for_its_administrator_and_probes_for_anyone(
    sim: Simulator,
) -> None:
    token = sim.add_token("restricted", [PolicyRule(("*",), ("*",), ("*",))])
    async with aiohttp.ClientSession(sim.url, headers={"Authorization": f"Bearer {token}"}) as h:
        async with h.get("/api/v1/pods") as r:
            assert r.status == 200
        async with h.get("/_sim/stats") as r:
            assert r.status == 404
    async with aiohttp.ClientSession(sim.url) as anonymous:
        for path in ("/healthz", "/livez", "/readyz", "/version"):
            async with anonymous.get(path) as r:
                assert r.status == 200, path
