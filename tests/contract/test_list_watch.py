"""A Kubernetes API server lists and watches pods with resourceVersion semantics."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import (
    Server,
    by_version,
    checked,
    fresh_namespace,
    make_pod,
    raw,
    refused,
    set_phase,
    status_of,
    watch_lines,
    watch_pods,
)


async def list_raw(core: client.CoreV1Api, namespace: str, **kw: Any) -> dict[str, Any]:
    resp = await core.list_namespaced_pod(namespace, _preload_content=False, **kw)
    return await checked(resp)


def names(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


async def test_list_returns_items_and_a_resource_version(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "a")
    await make_pod(core, namespace, "b")
    data = await list_raw(core, namespace)
    assert data["kind"] == "PodList"
    assert data["apiVersion"] == "v1"
    assert int(data["metadata"]["resourceVersion"]) > 0
    assert sorted(p["metadata"]["name"] for p in data["items"]) == ["a", "b"]


async def test_watch_from_list_version_sees_every_later_change_once_in_order(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "before")
    rv = (await list_raw(core, namespace))["metadata"]["resourceVersion"]
    await make_pod(core, namespace, "p")
    await set_phase(core, namespace, "p", "Failed")
    await core.delete_namespaced_pod("p", namespace)
    events = await watch_pods(
        api, namespace, ("resourceVersion", rv), ("timeoutSeconds", "5"), until=4
    )
    # Deleting the terminal pod is two writes: deletionTimestamp, then the removal.
    assert names(events) == [("ADDED", "p"), ("MODIFIED", "p"), ("MODIFIED", "p"), ("DELETED", "p")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)
    assert rvs[0] > int(rv)


@pytest.mark.parametrize(
    "query",
    [
        [("watch", "true")],
        [("watch", "True")],
        [("watch", "1")],
        [("watch", "true"), ("resourceVersion", "0")],
    ],
    ids=["true", "True", "1", "from-0"],
)
async def test_watch_without_version_starts_with_current_state(
    api: ApiClient, core: client.CoreV1Api, namespace: str, query: list[tuple[str, str]]
) -> None:
    # However the flag is spelled; resourceVersion 0 is "any version" too.
    await make_pod(core, namespace, "one")
    await make_pod(core, namespace, "two")
    path = f"/api/v1/namespaces/{namespace}/pods"
    events = await watch_lines(api, path, [*query, ("timeoutSeconds", "5")], until=2)
    assert sorted(names(events)) == [("ADDED", "one"), ("ADDED", "two")]


async def test_kubernetes_asyncio_watch_stream_sees_live_events(
    core: client.CoreV1Api, namespace: str
) -> None:
    rv = (await list_raw(core, namespace))["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async with watch.Watch().stream(
            core.list_namespaced_pod, namespace, resource_version=rv, timeout_seconds=10
        ) as stream:
            async for event in stream:
                seen.append((event["type"], event["object"].metadata.name))
                if len(seen) == 3:
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await make_pod(core, namespace, "live")
        await core.delete_namespaced_pod("live", namespace)
    assert seen == [("ADDED", "live"), ("MODIFIED", "live"), ("DELETED", "live")]


async def test_bookmarks_when_sent_carry_only_a_resource_version(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    # The stream ends at timeoutSeconds. Bookmarks are optional: a 1.20 server sends none
    # on a watch without a resourceVersion (served from etcd) and one shortly before
    # timeoutSeconds on a watch from the cache; newer ones about once a minute. Nothing may
    # depend on getting one.
    await make_pod(core, namespace, "p")
    rv = (await list_raw(core, namespace))["metadata"]["resourceVersion"]
    with anyio.fail_after(15):
        bookmarks = ("allowWatchBookmarks", "true")
        events = await watch_pods(
            api, namespace, ("resourceVersion", rv), bookmarks, ("timeoutSeconds", "2")
        )
    assert {e["type"] for e in events} <= {"BOOKMARK"}
    for event in events:
        obj = event["object"]
        assert obj["kind"] == "Pod"
        assert obj["apiVersion"] == "v1"
        assert int(obj["metadata"]["resourceVersion"]) >= int(rv)
        assert "name" not in obj["metadata"]


async def test_field_selector_turns_leaving_into_deleted_and_entering_into_added(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "p")
    rv = (await list_raw(core, namespace))["metadata"]["resourceVersion"]
    await set_phase(core, namespace, "p", "Running")
    failed = await set_phase(core, namespace, "p", "Failed")
    running = ("fieldSelector", "status.phase=Running")
    events = await watch_pods(
        api, namespace, ("resourceVersion", rv), running, ("timeoutSeconds", "5"), until=2
    )
    assert names(events) == [("ADDED", "p"), ("DELETED", "p")]
    # The DELETED event carries the last state that matched, at the version of the
    # write that made it leave.
    left = events[1]["object"]
    assert left["status"]["phase"] == "Running"
    assert left["metadata"]["resourceVersion"] == failed["metadata"]["resourceVersion"]


async def test_field_selectors_filter_lists(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "run", phase="Running")
    await make_pod(core, namespace, "dead", phase="Failed")
    await make_pod(core, namespace, "done", phase="Succeeded")
    terminal = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
    data = await list_raw(core, namespace, field_selector=terminal)
    assert sorted(p["metadata"]["name"] for p in data["items"]) == ["dead", "done"]
    data = await list_raw(core, namespace, field_selector="metadata.name==run")
    assert [p["metadata"]["name"] for p in data["items"]] == ["run"]
    data = await list_raw(
        core, namespace, field_selector=f"metadata.namespace={namespace},status.phase=Failed"
    )
    assert [p["metadata"]["name"] for p in data["items"]] == ["dead"]


async def test_label_selectors_filter_lists(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "a")
    await core.patch_namespaced_pod("a", namespace, {"metadata": {"labels": {"tier": "web"}}})
    await make_pod(core, namespace, "b")
    for selector, expected in [
        ("tier=web", ["a"]),
        ("tier!=web", ["b"]),
        ("tier", ["a"]),
        ("!tier", ["b"]),
        ("tier in (web,db)", ["a"]),
        ("tier notin (web)", ["b"]),
        # "()" is the set of the empty value, not an error.
        ("tier in ()", []),
        ("tier notin ()", ["a", "b"]),
        ("app=contract,tier=web", ["a"]),
    ]:
        data = await list_raw(core, namespace, label_selector=selector)
        assert sorted(p["metadata"]["name"] for p in data["items"]) == expected, selector


async def test_unsupported_field_selector_is_a_bad_request(
    core: client.CoreV1Api, namespace: str
) -> None:
    status = await refused(core.list_namespaced_pod(namespace, field_selector="spec.bogus=1"), 400)
    assert status["reason"] == "BadRequest"
    assert "field label not supported: spec.bogus" in status["message"]


@pytest.mark.parametrize("selector", ["a in (", "a b", "=x", "a,,b", "k=v=w"])
async def test_invalid_label_selector_is_a_bad_request(
    core: client.CoreV1Api, namespace: str, selector: str
) -> None:
    status = await refused(core.list_namespaced_pod(namespace, label_selector=selector), 400)
    assert status["reason"] == "BadRequest"


# An unparsable resourceVersion is refused with a Status: 500 (no reason) on 1.20, 400
# BadRequest on newer servers; a paginated LIST says 400 on both. Portable: an error
# Status, 400 or 500, and never a stream or a list. A client must not take the 500 for
# a transient failure worth retrying: the same request fails the same way.


@pytest.mark.parametrize("rv", ["abc", "-1", "1.5", " 7"])
async def test_unparsable_resource_version_on_list_is_refused(
    server: Server, core: client.CoreV1Api, namespace: str, rv: str
) -> None:
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod(namespace, resource_version=rv)
    assert info.value.status in by_version(server, v1_20=500, current=400)
    assert "resourceVersion" in status_of(info.value)["message"]
    paged = core.list_namespaced_pod(namespace, resource_version=rv, limit=5)
    assert (await refused(paged, 400))["reason"] == "BadRequest"


@pytest.mark.parametrize("rv", ["abc", "-1"])
async def test_unparsable_resource_version_on_watch_is_refused(
    api: ApiClient, namespace: str, rv: str
) -> None:
    query = [("watch", "true"), ("resourceVersion", rv), ("timeoutSeconds", "5")]
    code, body = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
    assert code in (400, 500)
    status = json.loads(body)
    assert status["kind"] == "Status"
    assert status["code"] == code
    assert "resourceVersion" in status["message"]


async def test_limit_and_continue_page_through_everything_once(
    core: client.CoreV1Api, namespace: str
) -> None:
    for i in range(7):
        await make_pod(core, namespace, f"p{i}")
    first = await list_raw(core, namespace, limit=3)
    # Writes between pages do not show up: the list is a consistent snapshot.
    await make_pod(core, namespace, "zz-late")
    pages = [first]
    while token := pages[-1]["metadata"].get("continue"):
        pages.append(await list_raw(core, namespace, limit=3, _continue=token))
    assert len(pages) == 3
    assert {page["metadata"]["resourceVersion"] for page in pages} == {
        first["metadata"]["resourceVersion"]
    }
    seen = [pod["metadata"]["name"] for page in pages for pod in page["items"]]
    assert sorted(seen) == sorted(f"p{i}" for i in range(7))


async def test_list_all_namespaces(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "everywhere")
    listed = await core.list_pod_for_all_namespaces(
        field_selector=f"metadata.namespace={namespace}"
    )
    assert [p.metadata.name for p in listed.items] == ["everywhere"]


async def test_watch_sees_pods_in_its_namespace_only(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    rv = (await list_raw(core, namespace))["metadata"]["resourceVersion"]
    async with fresh_namespace(core) as other:
        await make_pod(core, other, "elsewhere")
        await make_pod(core, namespace, "here")
        events = await watch_pods(api, namespace, ("resourceVersion", rv), ("timeoutSeconds", "1"))
    assert names(events) == [("ADDED", "here")]


@pytest.mark.parametrize(
    "query",
    [
        [("resourceVersionMatch", "Exact")],
        [("resourceVersionMatch", "Sometimes"), ("resourceVersion", "1")],
        [("resourceVersionMatch", "Exact"), ("resourceVersion", "0")],
    ],
    ids=["without-resource-version", "unsupported", "exact-0"],
)
async def test_invalid_resource_version_match_on_list_is_invalid(
    api: ApiClient, namespace: str, query: list[tuple[str, str]]
) -> None:
    code, body = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
    status = json.loads(body)
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('ListOptions.meta.k8s.io "" is invalid: ')
    assert [c["field"] for c in status["details"]["causes"]] == ["resourceVersionMatch"]
