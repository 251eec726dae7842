"""Where kube-apiserver releases answer differently: what holds on every one.

The contract runs on v1.20.2 and v1.37.2. Where the two answer one request differently,
a test here asserts the part they share and, where a controller must cope with either
answer, the set of answers it may get; what both answer alike is asserted exactly. A
controller built on this contract works on both, and on every release in between.

Where releases differ, :func:`by_version` names each one's answer, so the simulator's
two modes are held to the release they imitate.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from tests.contract.conftest import Server, by_version, make_pod, raw
from tests.helpers import eventually

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def invalid(body: bytes, kind: str, *words: str) -> None:
    """``body`` is a 422 Invalid Status about ``kind`` whose message has every word."""
    status = json.loads(body)
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 422, "Invalid")
    assert status["details"]["kind"] == kind
    for word in words:
        assert word in status["message"], status["message"]


async def current_rv(core: client.CoreV1Api, namespace: str) -> int:
    resp = await core.list_namespaced_pod(namespace, _preload_content=False)
    return int(json.loads(await resp.read())["metadata"]["resourceVersion"])


# -- streaming lists (WatchList) ----------------------------------------------------------
# A watch with sendInitialEvents=true and resourceVersionMatch=NotOlderThan is a list
# sent as a stream: 1.20 refuses it (422: resourceVersionMatch is forbidden for a watch),
# newer servers send the current state as ADDED events, then a bookmark annotated
# k8s.io/initial-events-end. A client asking for one must fall back to list-then-watch on
# the 422.

STREAMING = [
    ("watch", "true"),
    ("sendInitialEvents", "true"),
    ("resourceVersionMatch", "NotOlderThan"),
    ("timeoutSeconds", "2"),
]
BOOKMARKED = [*STREAMING, ("allowWatchBookmarks", "true")]


async def test_a_streaming_list_is_refused_or_ends_its_initial_events_with_a_bookmark(
    server: Server, api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    pods = [await make_pod(core, namespace, name) for name in ("a", "b")]
    path = f"/api/v1/namespaces/{namespace}/pods"
    code, body = await raw(api, "GET", path, query=BOOKMARKED)
    assert code in by_version(server, v1_20=422, current=200), body
    if code == 422:
        invalid(body, "ListOptions", "resourceVersionMatch")
        return
    events = lines(body)
    initial = [e for e in events if e["type"] == "ADDED"]
    assert sorted(e["object"]["metadata"]["name"] for e in initial) == ["a", "b"]
    end = next(e for e in events if e["type"] != "ADDED")
    assert events.index(end) == len(initial), "the initial events come first"
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}
    newest = max(int(p["metadata"]["resourceVersion"]) for p in pods)
    assert int(end["object"]["metadata"]["resourceVersion"]) >= newest


async def test_a_streaming_list_without_bookmarks_is_answered_as_one_with_them(
    server: Server, api: ApiClient, namespace: str
) -> None:
    # The end of the initial events is a bookmark, yet v1.37.2 serves the stream without
    # allowWatchBookmarks too (without that bookmark); 1.20 refuses both alike.
    path = f"/api/v1/namespaces/{namespace}/pods"
    with_bookmarks, _ = await raw(api, "GET", path, query=BOOKMARKED)
    without, body = await raw(api, "GET", path, query=STREAMING)
    assert without == with_bookmarks, body
    if without == 200:
        assert {e["type"] for e in lines(body)} <= {"ADDED"}


async def test_send_initial_events_without_not_older_than_is_ignored_or_refused(
    server: Server, api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    # 1.20 does not know the parameter and ignores it; newer servers refuse it without
    # resourceVersionMatch=NotOlderThan on a watch, and on any list.
    await make_pod(core, namespace, "a")
    path = f"/api/v1/namespaces/{namespace}/pods"
    query = [("watch", "true"), ("sendInitialEvents", "true"), ("timeoutSeconds", "1")]
    code, body = await raw(api, "GET", path, query=query)
    assert code in by_version(server, v1_20=200, current=422), body
    if code == 422:
        invalid(body, "ListOptions", "resourceVersionMatch")
    else:
        events = [(e["type"], e["object"]["metadata"]["name"]) for e in lines(body)]
        assert events == [("ADDED", "a")]
    code, body = await raw(api, "GET", path, query=[("sendInitialEvents", "true")])
    assert code in by_version(server, v1_20=200, current=422), body
    if code == 422:
        invalid(body, "ListOptions", "sendInitialEvents")
    else:
        assert [p["metadata"]["name"] for p in json.loads(body)["items"]] == ["a"]


# -- resourceVersions beyond the present --------------------------------------------------


async def test_a_list_beyond_the_present_is_a_timeout_to_retry(
    server: Server, api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    future = str(await current_rv(core, namespace) + 1_000_000)
    path = f"/api/v1/namespaces/{namespace}/pods"
    code, body = await raw(api, "GET", path, query=[("resourceVersion", future)])
    assert code == 504, body
    status = json.loads(body)
    assert status["reason"] == "Timeout"
    assert status["message"].startswith(f"Timeout: Too large resource version: {future}")
    assert status["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]
    assert status["details"]["retryAfterSeconds"] == 1
    # An Exact list goes to etcd: 1.20 passes on etcd's error as a 500, newer servers
    # wait for the version like any other list and answer the same 504.
    query = [("resourceVersion", future), ("resourceVersionMatch", "Exact")]
    code, body = await raw(api, "GET", path, query=query)
    assert code in by_version(server, v1_20=500, current=504), body
    assert json.loads(body)["kind"] == "Status"


async def test_a_watch_beyond_the_present_is_accepted_and_silent(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    # The watch cache waits for the version to come: no error, no event, on both.
    future = str(await current_rv(core, namespace) + 1_000_000)
    query = [("watch", "true"), ("resourceVersion", future), ("timeoutSeconds", "1")]
    code, body = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
    assert (code, lines(body)) == (200, [])


async def test_a_list_at_version_zero_ignores_the_limit(
    core: client.CoreV1Api, namespace: str
) -> None:
    # Served from the watch cache, which does not paginate: everything, no continue. The
    # cache may trail the writes (resourceVersion 0 is "any version"), so wait for it.
    for name in ("a", "b", "c"):
        await make_pod(core, namespace, name)

    async def all_in_one_answer() -> bool:
        resp = await core.list_namespaced_pod(
            namespace, resource_version="0", limit=1, _preload_content=False
        )
        data = json.loads(await resp.read())
        assert "continue" not in data["metadata"]
        return sorted(p["metadata"]["name"] for p in data["items"]) == ["a", "b", "c"]

    await eventually(all_in_one_answer)


# -- field selectors ---------------------------------------------------------------------


async def test_node_name_selects_on_both_and_host_network_is_unknown_to_1_20(
    server: Server, api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "pod", nodeName="node-1")
    await make_pod(core, namespace, "host", nodeName="node-2", hostNetwork=True)
    path = f"/api/v1/namespaces/{namespace}/pods"

    async def selected(selector: str) -> tuple[int, Any]:
        code, body = await raw(api, "GET", path, query=[("fieldSelector", selector)])
        data = json.loads(body)
        return code, sorted(p["metadata"]["name"] for p in data["items"]) if code == 200 else data

    assert await selected("spec.nodeName=node-1") == (200, ["pod"])
    assert await selected("spec.nodeName!=node-1") == (200, ["host"])
    # A label 1.20 refuses (400) and newer servers select by.
    code, answer = await selected("spec.hostNetwork=false")
    assert code in by_version(server, v1_20=400, current=200), answer
    if code == 400:
        assert answer["reason"] == "BadRequest"
        assert answer["message"] == "field label not supported: spec.hostNetwork"
    else:
        assert answer == ["pod"]
        assert await selected("spec.hostNetwork=true") == (200, ["host"])


# -- what the server says it is ----------------------------------------------------------


async def test_version_names_the_release(server: Server, api: ApiClient) -> None:
    code, body = await raw(api, "GET", "/version")
    assert code == 200, body
    version = json.loads(body)
    assert version["gitVersion"] in by_version(server, v1_20="v1.20.2", current="v1.37.2")
    major, minor = version["major"], version["minor"].rstrip("+")
    assert major == "1"
    assert minor.isdigit()
    assert version["gitVersion"].startswith(f"v{major}.{minor}.")
    assert version["platform"]
    assert version["goVersion"].startswith("go")
    # Newer servers add the version they emulate (compatibility versions, 1.31+).
    if "emulationMajor" in version:
        assert (version["emulationMajor"], version["emulationMinor"]) == (major, minor)
    if server.real and server.name.startswith("kube-apiserver-"):
        assert version["gitVersion"] == server.name.removeprefix("kube-apiserver-")


async def test_discovery_serves_what_zombied_uses(api: ApiClient) -> None:
    # The groups and subresources around them differ (1.20 still serves extensions,
    # newer ones resource.k8s.io, pods/ephemeralcontainers...); these do not.
    code, body = await raw(api, "GET", "/api")
    assert code == 200, body
    assert "v1" in json.loads(body)["versions"]

    async def verbs(path: str) -> dict[str, set[str]]:
        code, body = await raw(api, "GET", path)
        assert code == 200, body
        return {r["name"]: set(r["verbs"]) for r in json.loads(body)["resources"]}

    core_v1 = await verbs("/api/v1")
    assert {"get", "list", "watch", "delete"} <= core_v1["pods"]
    assert {"create", "patch"} <= core_v1["events"]
    assert "pods/status" in core_v1
    code, body = await raw(api, "GET", "/apis")
    assert code == 200, body
    served = {g["name"]: [v["version"] for v in g["versions"]] for g in json.loads(body)["groups"]}
    assert "v1" in served["coordination.k8s.io"]
    leases = await verbs("/apis/coordination.k8s.io/v1")
    assert {"create", "get", "update"} <= leases["leases"]
