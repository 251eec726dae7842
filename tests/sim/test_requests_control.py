"""Simulator-only surfaces: request log, deletion record, control API, tokens, robustness."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from kubesim import RequestLog, RequestRecord, Simulator
from kubesim.rbac import PolicyRule


def pod(name: str, namespace: str = "ns", phase: str = "Failed") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase},
    }


async def test_request_log_counts_by_verb_and_resource(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("a"))
    sim.store.create("pods", pod("b"))
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
    created = sim.store.create("pods", pod("z"))
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


async def test_restricted_token_gets_the_apiserver_403(sim: Simulator) -> None:
    token = sim.add_token(
        "system:serviceaccount:zombied:zombied",
        [PolicyRule(api_groups=[""], resources=["pods"], verbs=["list", "watch"], namespace="ns")],
    )
    async with aiohttp.ClientSession(sim.url, headers={"Authorization": f"Bearer {token}"}) as h:
        async with h.get("/api/v1/namespaces/ns/pods") as r:
            assert r.status == 200
        async with h.get("/api/v1/pods") as r:
            assert r.status == 403
            body = await r.json()
        async with h.get("/_sim/stats") as r:
            assert r.status == 404
    async with aiohttp.ClientSession(sim.url) as anonymous:
        for path in ("/healthz", "/livez", "/readyz", "/version"):
            async with anonymous.get(path) as r:
                assert r.status == 200, path
    assert body["reason"] == "Forbidden"


async def test_control_api(sim: Simulator, http: aiohttp.ClientSession) -> None:
    async with http.post("/_sim/scenario", json={"nodes": 2, "pods": 10}) as r:
        assert r.status == 200
        built = await r.json()
    assert built["pods"] == 10
    node = built["nodes"][0]
    async with http.post("/_sim/preempt", json={"node": node, "version": "1.28"}) as r:
        assert r.status == 200
        result = await r.json()
    assert result["node"] == node
    async with http.post(
        "/_sim/faults", json={"spec": "error:verb=list,resource=nodes,status=500"}
    ) as r:
        assert r.status == 200
    async with http.get("/api/v1/nodes") as r:
        assert r.status == 500
    async with http.post("/_sim/faults/clear") as r:
        assert r.status == 200
    async with http.get("/api/v1/nodes") as r:
        assert r.status == 200
    async with http.post("/_sim/faults", json={"spec": "nonsense"}) as r:
        assert r.status == 400
    sim.store.create("pods", pod("direct"))
    async with http.post(
        "/_sim/store/update", json={"resource": "pods", "object": pod("direct", phase="Running")}
    ) as r:
        assert (await r.json())["status"]["phase"] == "Running"
    async with http.delete("/api/v1/namespaces/ns/pods/direct") as r:
        assert r.status == 200
    async with http.get("/_sim/deleted") as r:
        deleted = await r.json()
    assert deleted[-1]["obj"]["metadata"]["name"] == "direct"
    async with http.get("/_sim/requests") as r:
        summary = await r.json()
    assert summary["counts"]["list nodes"] == 2
    assert summary["counts"]["delete pods"] == 1
    async with http.get("/_sim/requests", params={"full": "1"}) as r:
        full = await r.json()
    assert full["records"][-1]["verb"] == "delete"
    async with http.get("/_sim/stats") as r:
        stats = await r.json()
    assert stats["objects"]["nodes"] == 2
    body = {"node": node, "version": "1.28", "reasons": ["OutOfmemory"]}
    async with http.post("/_sim/return-node", json=body) as r:
        returned = await r.json()
    assert returned["variant"] == "returned"
    async with http.get("/_sim/nothing") as r:
        assert r.status == 404


JSON = "application/json"
MERGE = "application/merge-patch+json"


# What the contract suite does not ask of every server: each answer is a Status, and the
# server serves on.
@pytest.mark.parametrize(
    ("method", "path", "content_type", "data", "status"),
    [
        ("PATCH", "/api/v1/namespaces/ns/pods/p", MERGE, b'{"metadata":{"name":"other"}}', 400),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", MERGE, b"5", 400),
        ("DELETE", "/api/v1/namespaces/ns/pods", None, None, 405),
        ("PUT", "/api/v1/namespaces/ns/pods", JSON, b"{}", 405),
        ("POST", "/version", None, None, 405),
        ("GET", "/api/v1/pods?limit=many", None, None, 400),
        ("GET", "/api/v1/pods?continue=!!!not-a-token", None, None, 400),
        ("GET", "/api/v1/pods?resourceVersion=999999", None, None, 504),
        ("GET", "/api/v1/pods?watch=1&timeoutSeconds=x", None, None, 400),
        ("GET", "/api/v1/pods?sendInitialEvents=true", None, None, 422),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", None, None, 404),
        ("GET", "/api/v1/namespaces/ns/pods/p/status/extra", None, None, 404),
        ("GET", "/api/v1/nodes/n/status/x", None, None, 404),
        ("GET", "/api/v2", None, None, 404),
    ],
)
async def test_bad_requests_get_a_status_and_never_break_the_server(
    sim: Simulator,
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    content_type: str | None,
    data: bytes | None,
    status: int,
) -> None:
    sim.store.create("pods", pod("p", phase="Running"))
    headers = {"Content-Type": content_type} if content_type else {}
    async with http.request(method, path, data=data, headers=headers) as r:
        body = await r.read()
        assert r.status == status, body
    assert json.loads(body)["kind"] == "Status"
    async with http.get("/api/v1/namespaces/ns/pods/p") as r:
        assert r.status == 200
