"""Simulator-only watch behaviour: 410s, compaction, exact lists, cuts, fan-out, bookmarks."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anyio
import pytest
from testkit import eventually, pod

from kubesim import Simulator


async def read_events(resp: aiohttp.ClientResponse, n: int | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async for line in resp.content:
        if line.strip():
            events.append(json.loads(line))
            if n is not None and len(events) >= n:
                break
    return events


async def test_watch_from_before_compaction_is_410_expired(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("a"))
    old = sim.store.resource_version
    sim.store.create("pods", pod("b"))
    sim.compact()
    params = {"watch": "1", "resourceVersion": str(old - 1)}
    async with http.get("/api/v1/namespaces/ns/pods", params=params) as resp:
        assert resp.status == 410
        body = await resp.json()
    assert body["reason"] == "Expired"


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
    # A fresh token lets the client go on, inconsistently, from where it was.
    assert body["reason"] == "Expired"
    assert body["metadata"]["continue"]


async def test_exact_list_at_older_version_reverts_later_writes(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create("pods", pod("a"))
    sim.store.create("pods", pod("b"))
    rv = sim.store.resource_version
    sim.store.delete("pods", "ns", "a")
    sim.store.create("pods", pod("c"))
    sim.store.update("pods", pod("b", phase="Failed"), check_rv=False)
    async with http.get(
        "/api/v1/namespaces/ns/pods",
        params={"resourceVersion": str(rv), "resourceVersionMatch": "Exact"},
    ) as resp:
        body = await resp.json()
    assert [p["metadata"]["name"] for p in body["items"]] == ["a", "b"]
    assert body["items"][1]["status"]["phase"] == "Pending"
    assert body["metadata"]["resourceVersion"] == str(rv)


@pytest.mark.parametrize("cut", ["now", "after-2-events"])
async def test_injected_cuts_end_streams_abruptly(
    sim: Simulator, http: aiohttp.ClientSession, cut: str
) -> None:
    for i in range(5):
        sim.store.create("pods", pod(f"p{i}"))
    if cut == "after-2-events":
        sim.faults.cut_watches_after(2)
    async with http.get("/api/v1/pods", params={"watch": "true", "timeoutSeconds": "30"}) as resp:
        if cut == "now":
            await eventually(lambda: len(sim.server.streams) == 1)
            sim.faults.cut_watches()
        with anyio.fail_after(5), pytest.raises(aiohttp.ClientPayloadError):
            await read_events(resp)
    await eventually(lambda: len(sim.server.streams) == 0)


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
