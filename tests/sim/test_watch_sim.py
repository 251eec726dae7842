"""Simulator-only watch behaviour: 410s, compaction, cuts, restarts, fan-out, bookmarks."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from kubesim import Simulator
from tests.helpers import eventually


def pod(name: str, namespace: str = "ns", phase: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase},
    }


async def read_events(resp: aiohttp.ClientResponse, n: int | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async for line in resp.content:
        if line.strip():
            events.append(json.loads(line))
            if n is not None and len(events) >= n:
                break
    return events


async def test_watch_from_too_old_version_is_410_expired(sim: Simulator, kubeconfig: Any) -> None:
    sim.store.create("pods", pod("a"))
    old = sim.store.resource_version
    sim.store.create("pods", pod("b"))
    sim.compact()
    async with await config.new_client_from_config(str(kubeconfig)) as api:
        core = client.CoreV1Api(api)

        async def drain() -> None:
            async with watch.Watch().stream(
                core.list_namespaced_pod, "ns", resource_version=str(old - 1), timeout_seconds=5
            ) as stream:
                async for _ in stream:
                    pass

        with pytest.raises(ApiException) as info:
            await drain()
    assert info.value.status == 410
    assert info.value.reason == (
        f"Expired: too old resource version: {old - 1} ({sim.store.resource_version})"
    )


async def test_compaction_under_an_open_watch_sends_error_410(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("a"))
    rv = sim.store.resource_version
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={"watch": "1", "resourceVersion": str(rv), "timeoutSeconds": "10"},
    ) as resp:
        await eventually(lambda: len(sim.server.streams) == 1)
        sim.compact()
        with anyio.fail_after(5):
            events = await read_events(resp)
    assert [e["type"] for e in events] == ["ERROR"]
    status = events[0]["object"]
    assert status["kind"] == "Status"
    assert status["code"] == 410
    assert status["reason"] == "Expired"


async def test_expired_continue_token_is_410_with_a_fresh_token(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    for i in range(4):
        sim.store.create("pods", pod(f"p{i}"))
    async with http.get("/api/v1/namespaces/ns/pods", params={"limit": "2"}) as resp:
        token = (await resp.json())["metadata"]["continue"]
    sim.store.create("pods", pod("later"))
    sim.compact()
    async with http.get(
        "/api/v1/namespaces/ns/pods", params={"limit": "2", "continue": token}
    ) as resp:
        assert resp.status == 410
        body = await resp.json()
    assert body["reason"] == "Expired"
    assert "continue parameter is too old" in body["message"]
    assert body["metadata"]["continue"]


async def test_bad_continue_token_is_a_bad_request(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/pods", params={"continue": "!!!not-a-token"}) as resp:
        assert resp.status == 400


async def test_list_with_future_resource_version_is_too_large(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    future = sim.store.resource_version + 100
    async with http.get("/api/v1/pods", params={"resourceVersion": str(future)}) as resp:
        assert resp.status == 504
        body = await resp.json()
    assert body["message"].startswith(f"Too large resource version: {future}")


async def test_exact_list_at_older_version(sim: Simulator, http: aiohttp.ClientSession) -> None:
    sim.store.create("pods", pod("a"))
    rv = sim.store.resource_version
    sim.store.create("pods", pod("b"))
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={"resourceVersion": str(rv), "resourceVersionMatch": "Exact"},
    ) as resp:
        body = await resp.json()
    assert [p["metadata"]["name"] for p in body["items"]] == ["a"]
    assert body["metadata"]["resourceVersion"] == str(rv)


async def test_cut_watches_ends_streams_abruptly(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    async with http.get("/api/v1/pods", params={"watch": "true", "timeoutSeconds": "30"}) as resp:
        await eventually(lambda: len(sim.server.streams) == 1)
        sim.faults.cut_watches()
        with anyio.fail_after(5), pytest.raises(aiohttp.ClientPayloadError):
            await read_events(resp)
    await eventually(lambda: len(sim.server.streams) == 0)


async def test_cut_after_n_events(sim: Simulator, http: aiohttp.ClientSession) -> None:
    for i in range(5):
        sim.store.create("pods", pod(f"p{i}"))
    sim.faults.cut_watches_after(2)
    async with http.get("/api/v1/pods", params={"watch": "true", "timeoutSeconds": "30"}) as resp:
        with anyio.fail_after(5), pytest.raises(aiohttp.ClientPayloadError):
            await read_events(resp)


async def test_restart_cuts_connections_and_keeps_state(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("survivor"))
    rv = sim.store.resource_version
    async with http.get(
        "/api/v1/pods", params={"watch": "true", "resourceVersion": str(rv), "timeoutSeconds": "30"}
    ) as resp:
        await eventually(lambda: len(sim.server.streams) == 1)
        await sim.restart()
        with anyio.fail_after(5), pytest.raises(aiohttp.ClientError):
            await read_events(resp)
    async with http.get("/api/v1/namespaces/ns/pods/survivor") as resp:
        assert resp.status == 200
    assert sim.store.resource_version == rv


async def test_restart_with_downtime_refuses_then_serves(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(sim.restart, 0.5)
        await anyio.sleep(0.1)
        async with aiohttp.ClientSession() as fresh:
            with pytest.raises(aiohttp.ClientConnectionError):
                await fresh.get(sim.url + "/version")
    async with http.get("/version") as resp:
        assert resp.status == 200


async def test_injected_errors_carry_status_and_retry_after(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.faults.add_error(verb="list", resource="pods", status=429, retry_after=3, count=1)
    async with http.get("/api/v1/pods") as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "3"
        body = await resp.json()
        assert body["reason"] == "TooManyRequests"
    async with http.get("/api/v1/pods") as resp:
        assert resp.status == 200
    sim.faults.add_error(verb="delete", status=503)
    sim.store.create("pods", pod("a", phase="Failed"))
    async with http.delete("/api/v1/namespaces/ns/pods/a") as resp:
        assert resp.status == 503
        assert (await resp.json())["reason"] == "ServiceUnavailable"
    assert sim.store.get("pods", "ns", "a") is not None


async def test_fan_out_to_many_watchers_with_shared_selector(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    rv = sim.store.resource_version
    params = {
        "watch": "true",
        "resourceVersion": str(rv),
        "fieldSelector": "status.phase=Failed",
        "timeoutSeconds": "10",
    }
    results: list[list[str]] = []

    async def one() -> None:
        async with http.get("/api/v1/pods", params=params) as resp:
            events = await read_events(resp, 3)
        results.append([f"{e['type']} {e['object']['metadata']['name']}" for e in events])

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(one)
        await eventually(lambda: len(sim.server.streams) == 10)
        sim.store.create("pods", pod("ok"))
        created = sim.store.create("pods", pod("bad", phase="Failed"))
        sim.store.create("pods", pod("bad2", phase="Failed"))
        sim.store.update("pods", {**created, "status": {"phase": "Running"}})
    assert results == [["ADDED bad", "ADDED bad2", "DELETED bad"]] * 10


async def test_bookmark_reports_the_latest_version(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": "0",
            "timeoutSeconds": "10",
        },
    ) as resp:
        sim.store.create("pods", pod("a"))
        sim.store.create("leases", {"metadata": {"name": "other", "namespace": "x"}})
        current = sim.store.resource_version

        async def bookmark_seen() -> bool:
            event = json.loads(await resp.content.readline())
            return (
                event["type"] == "BOOKMARK"
                and int(event["object"]["metadata"]["resourceVersion"]) >= current
            )

        await eventually(bookmark_seen, timeout=5)


async def test_a_watch_without_resource_version_gets_no_bookmarks(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    # Served from etcd on a 1.20 server, which sends none: the harder case for a client.
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "1"},
    ) as resp:
        sim.store.create("pods", pod("a"))
        with anyio.fail_after(5):
            lines = [json.loads(line) async for line in resp.content if line.strip()]
    assert [e["type"] for e in lines] == ["ADDED"]


async def test_send_initial_events_ends_with_a_marked_bookmark(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("a"))
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "5",
        },
    ) as resp:
        events = await read_events(resp, 2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_graceful_delete_over_http_shows_deleted_event_after_grace(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    created = sim.store.create("pods", {**pod("busy", phase="Running"), "spec": {"nodeName": "n"}})
    rv = created["metadata"]["resourceVersion"]
    async with http.delete(
        "/api/v1/namespaces/ns/pods/busy", json={"gracePeriodSeconds": 1}
    ) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["metadata"]["deletionGracePeriodSeconds"] == 1
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "10"},
    ) as resp:
        with anyio.fail_after(5):
            events = await read_events(resp, 3)
    # The kubelet's own delete with grace 0 is two writes again: shortened, then removed.
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert [e["object"]["metadata"]["deletionGracePeriodSeconds"] for e in events] == [1, 0, 0]


async def test_client_leaving_mid_watch_is_not_a_server_error(
    sim: Simulator, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(300):
        sim.store.create("pods", pod(f"p{i}"))
    async with http.get("/api/v1/pods", params={"watch": "1", "timeoutSeconds": "30"}) as resp:
        await resp.content.readline()
        resp.close()
    await eventually(lambda: len(sim.server.streams) == 0)
    sim.store.create("pods", pod("after"))
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert sim.requests.filter(verb="watch")[0].status == 499


async def test_periodic_cuts_and_latency(sim: Simulator, http: aiohttp.ClientSession) -> None:
    sim.faults.cut_watches_every(0.3)
    async with http.get("/api/v1/pods", params={"watch": "1", "timeoutSeconds": "30"}) as resp:
        with anyio.fail_after(5), pytest.raises(aiohttp.ClientPayloadError):
            await read_events(resp)
    sim.faults.cut_watches_every(None)
    sim.faults.add_latency("list", "pods", 0.3)
    with anyio.fail_after(5):
        async with http.get("/api/v1/pods") as resp:
            assert resp.status == 200
    assert sim.requests.filter(verb="list")[-1].duration >= 0.3
