"""Simulator-only surfaces: request log, deletion record, control API, tokens, robustness."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
import yaml

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
    watch = log.filter(verb="watch")[0]
    assert watch.query == "watch=1&timeoutSeconds=1"
    assert watch.duration >= 0.9


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


async def test_missing_or_unknown_token_is_401(sim: Simulator) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        async with http.get("/api/v1/pods") as r:
            assert r.status == 401
            assert (await r.json())["reason"] == "Unauthorized"
        async with http.get("/api/v1/pods", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
    assert sim.requests[-1].status == 401
    async with aiohttp.ClientSession(sim.url) as http:
        for path in ("/healthz", "/livez", "/readyz", "/version"):
            async with http.get(path) as r:
                assert r.status == 200, path


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
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods is forbidden: User "system:serviceaccount:zombied:zombied" cannot list resource '
        '"pods" in API group "" at the cluster scope'
    )


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
    rv = sim.store.resource_version
    async with http.post("/_sim/compact") as r:
        assert r.status == 200
    assert sim.store.oldest_resource_version == rv
    async with http.post(
        "/_sim/store/create", json={"resource": "pods", "object": pod("direct")}
    ) as r:
        assert r.status == 201
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
    for _ in range(2):
        before = sim.store.resource_version
        async with http.post("/_sim/churn", json={"events": 5}) as r:
            assert (await r.json())["events"] == 5
        assert sim.store.resource_version == before + 5
    async with http.get("/_sim/nothing") as r:
        assert r.status == 404
    async with http.post("/_sim/restart") as r:
        assert r.status == 200


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            {"data": b"{bad", "headers": {"Content-Type": "application/json"}},
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            {"data": b"[1,2]", "headers": {"Content-Type": "application/json"}},
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            {"data": b"\xff\xfe", "headers": {"Content-Type": "application/json"}},
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            {"data": b"{}", "headers": {"Content-Type": "text/plain"}},
            415,
        ),
        ("POST", "/api/v1/namespaces/ns/pods", {"json": {"metadata": "nope"}}, 400),
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            {"json": {"kind": "Node", "metadata": {"name": "x"}}},
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            {"data": b"{}", "headers": {"Content-Type": "application/json"}},
            415,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            {
                "data": b'[{"op":"remove","path":"/nope"}]',
                "headers": {"Content-Type": "application/json-patch+json"},
            },
            422,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            {
                "data": b'{"metadata":{"name":"other"}}',
                "headers": {"Content-Type": "application/merge-patch+json"},
            },
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            {"data": b"5", "headers": {"Content-Type": "application/merge-patch+json"}},
            400,
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods/p",
            {"data": b"{bad", "headers": {"Content-Type": "application/json"}},
            400,  # an undecodable DeleteOptions body (500 without a reason on 1.20)
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {"json": {"preconditions": "x"}}, 400),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {"json": {"gracePeriodSeconds": "soon"}}, 400),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods/p",
            {"params": {"propagationPolicy": "Sideways"}},
            422,
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods", {}, 405),
        ("GET", "/api/v1/pods", {"params": {"limit": "many"}}, 400),
        ("GET", "/api/v1/pods", {"params": {"resourceVersion": "-1"}}, 400),
        ("GET", "/api/v1/pods", {"params": {"resourceVersion": "-1", "limit": "5"}}, 400),
        ("GET", "/api/v1/pods", {"params": {"resourceVersionMatch": "Exact"}}, 422),
        (
            "GET",
            "/api/v1/pods",
            {"params": {"resourceVersionMatch": "Sometimes", "resourceVersion": "1"}},
            422,
        ),
        ("GET", "/api/v1/pods", {"params": {"watch": "1", "resourceVersion": "x"}}, 500),
        ("GET", "/api/v1/pods", {"params": {"watch": "1", "timeoutSeconds": "x"}}, 400),
        ("GET", "/api/v1/pods", {"params": {"labelSelector": "a in ("}}, 400),
        ("GET", "/api/v1/pods", {"params": {"fieldSelector": "nonsense"}}, 400),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, 404),
        ("GET", "/api/v1/namespaces/ns/pods/p/status/extra", {}, 404),
        ("GET", "/api/v1/widgets", {}, 404),
        ("GET", "/apis/apps/v1", {}, 404),
        ("GET", "/api/v2", {}, 404),
        ("GET", "/totally/elsewhere", {}, 404),
        ("GET", "/api/v1/nodes/n/status/x", {}, 404),
        ("PUT", "/api/v1/namespaces/ns/pods", {"json": {}}, 405),
        ("POST", "/version", {}, 405),
    ],
)
async def test_bad_requests_get_a_status_and_never_break_the_server(
    sim: Simulator,
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
) -> None:
    sim.store.create("pods", pod("p", phase="Running"))
    async with http.request(method, path, **kwargs) as r:
        body = await r.read()
        assert r.status == status, body
    assert json.loads(body)["kind"] == "Status"
    async with http.get("/api/v1/namespaces/ns/pods/p") as r:
        assert r.status == 200


async def test_discovery_documents(http: aiohttp.ClientSession) -> None:
    async with http.get("/version") as r:
        assert (await r.json())["major"] == "1"
    async with http.get("/api") as r:
        assert (await r.json())["versions"] == ["v1"]
    async with http.get("/api/v1") as r:
        names = {res["name"] for res in (await r.json())["resources"]}
    assert {"pods", "pods/status", "nodes", "namespaces", "events"} <= names
    async with http.get("/apis") as r:
        groups = [g["name"] for g in (await r.json())["groups"]]
    assert groups == ["coordination.k8s.io"]
    async with http.get("/apis/coordination.k8s.io") as r:
        assert (await r.json())["preferredVersion"]["version"] == "v1"
    async with http.get("/apis/coordination.k8s.io/v1") as r:
        assert [res["name"] for res in (await r.json())["resources"]] == ["leases"]
    async with http.get("/openapi/v3") as r:
        assert "api/v1" in (await r.json())["paths"]


def _pb_fields(data: bytes) -> list[tuple[int, bytes | int]]:
    """Top-level fields of a protobuf message (varint and length-delimited only)."""

    def varint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = data[pos]
            value |= (byte & 0x7F) << shift
            pos += 1
            shift += 7
            if not byte & 0x80:
                return value, pos

    fields: list[tuple[int, bytes | int]] = []
    pos = 0
    while pos < len(data):
        key, pos = varint(pos)
        if key & 7 == 0:
            value, pos = varint(pos)
            fields.append((key >> 3, value))
        else:
            assert key & 7 == 2, key
            size, pos = varint(pos)
            fields.append((key >> 3, data[pos : pos + size]))
            pos += size
    return fields


def _pb(data: bytes | int, *path: int) -> list[bytes]:
    """Every length-delimited value at field-number ``path`` below ``data``."""
    assert isinstance(data, bytes)
    if not path:
        return [data]
    return [
        found
        for number, value in _pb_fields(data)
        if number == path[0]
        for found in _pb(value, *path[1:])
    ]


async def test_openapi_v2_json_and_protobuf(http: aiohttp.ClientSession) -> None:
    async with http.get("/openapi/v2") as r:
        doc = await r.json()
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    # What client-go's OpenAPISchema() asks for, decoded as gnostic's openapi_v2.Document.
    accept = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    async with http.get("/openapi/v2", headers={"Accept": accept}) as r:
        assert r.status == 200
        assert r.content_type == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        data = await r.read()
    assert _pb(data, 1) == [b"2.0"]
    items = {_pb(item, 1)[0]: item for item in _pb(data, 8, 2)}
    pods = items[b"/api/v1/namespaces/{namespace}/pods/{name}"]
    (operation,) = _pb(pods, 2, 8)
    names = _pb(operation, 8, 1, 2, 3, 4)
    assert b"fieldValidation" in names
    extensions = {_pb(ext, 1)[0]: _pb(ext, 2, 2)[0] for ext in _pb(operation, 13)}
    gvk = yaml.safe_load(extensions[b"x-kubernetes-group-version-kind"])
    assert gvk == {"group": "", "version": "v1", "kind": "Pod"}
