"""A Kubernetes API server creates, reads, updates and patches objects with Status errors."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from tests.contract.conftest import checked, make_pod, pod_manifest, raw, refused


async def test_get_missing_pod_is_not_found(core: client.CoreV1Api, namespace: str) -> None:
    status = await refused(core.read_namespaced_pod("nope", namespace), 404)
    assert status["message"] == 'pods "nope" not found'


async def test_create_twice_is_already_exists(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "twin")
    status = await refused(make_pod(core, namespace, "twin"), 409)
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'pods "twin" already exists'


async def test_create_sets_uid_rv_timestamp_and_pending_status(
    core: client.CoreV1Api, namespace: str
) -> None:
    pod = await make_pod(core, namespace, "fresh")
    meta = pod["metadata"]
    assert meta["uid"]
    assert int(meta["resourceVersion"]) > 0
    assert meta["creationTimestamp"].endswith("Z")
    assert meta["namespace"] == namespace
    assert pod["status"]["phase"] == "Pending"


@pytest.mark.parametrize("given", [None, "2001-01-01T00:00:00Z"], ids=["null", "dated"])
async def test_creation_timestamp_is_the_servers(
    core: client.CoreV1Api, namespace: str, given: str | None
) -> None:
    # kubectl run sends creationTimestamp: null; the server dates every object itself.
    body = pod_manifest("dated")
    body["metadata"]["creationTimestamp"] = given
    pod = await checked(await core.create_namespaced_pod(namespace, body, _preload_content=False))
    created = pod["metadata"]["creationTimestamp"]
    home = await core.read_namespace(namespace)
    assert isinstance(created, str)
    assert created != given
    assert created >= home.metadata.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("resource", "name"),
    [("pods", "Web-0"), ("pods", "web_0"), ("pods", "x" * 254), ("namespaces", "team.a")],
    ids=["uppercase", "underscore", "too-long", "namespace-with-a-dot"],
)
async def test_a_name_the_api_does_not_allow_is_invalid(
    core: client.CoreV1Api, namespace: str, resource: str, name: str
) -> None:
    if resource == "pods":
        request = core.create_namespaced_pod(namespace, pod_manifest(name))
    else:
        request = core.create_namespace({"metadata": {"name": name}})
    status = await refused(request, 422)
    assert status["reason"] == "Invalid"
    assert [cause["field"] for cause in status["details"]["causes"]] == ["metadata.name"]


async def test_create_with_generate_name(core: client.CoreV1Api, namespace: str) -> None:
    body = pod_manifest("")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "gen-"
    pod = await core.create_namespaced_pod(namespace, body)
    assert pod.metadata.name.startswith("gen-")
    assert len(pod.metadata.name) > len("gen-")


async def test_create_in_missing_namespace_is_not_found(core: client.CoreV1Api) -> None:
    missing = "zc-missing-" + secrets.token_hex(3)
    status = await refused(core.create_namespaced_pod(missing, pod_manifest("x")), 404)
    assert status["message"] == f'namespaces "{missing}" not found'


async def test_namespace_mismatch_is_a_bad_request(core: client.CoreV1Api, namespace: str) -> None:
    body = pod_manifest("x")
    body["metadata"]["namespace"] = namespace + "-other"
    await refused(core.create_namespaced_pod(namespace, body), 400)


async def test_status_patch_merges_conditions_by_type(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "p")
    ready = [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]
    await core.patch_namespaced_pod_status("p", namespace, {"status": {"conditions": ready}})
    target = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    failed = {"phase": "Failed", "reason": "Terminated", "conditions": [target]}
    await core.patch_namespaced_pod_status("p", namespace, {"status": failed})
    pod = await core.read_namespaced_pod_status("p", namespace)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Terminated")
    conditions = sorted(c.type for c in pod.status.conditions)
    assert conditions == ["DisruptionTarget", "PodScheduled", "Ready"]


async def test_status_update_does_not_change_spec_and_main_update_not_status(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "p")
    pod = await core.read_namespaced_pod("p", namespace)
    pod.status.phase = "Running"
    pod.spec.active_deadline_seconds = 99
    updated = await core.replace_namespaced_pod_status("p", namespace, pod)
    assert updated.status.phase == "Running"
    assert updated.spec.active_deadline_seconds is None
    updated.status.phase = "Failed"
    updated.metadata.labels = {"changed": "yes"}
    again = await core.replace_namespaced_pod("p", namespace, updated)
    assert again.status.phase == "Running"
    assert again.metadata.labels == {"changed": "yes"}


async def test_update_with_stale_resource_version_is_a_conflict(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "p")
    first = await core.read_namespaced_pod("p", namespace)
    await core.patch_namespaced_pod("p", namespace, {"metadata": {"labels": {"v": "2"}}})
    first.metadata.labels = {"v": "stale"}
    status = await refused(core.replace_namespaced_pod("p", namespace, first), 409)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on pods "p": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )


async def test_json_patch_and_merge_patch(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "p")
    path = f"/api/v1/namespaces/{namespace}/pods/p"
    add = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}]
    code, _ = await raw(api, "PATCH", path, body=add, content_type="application/json-patch+json")
    assert code == 200
    merge = {"metadata": {"annotations": {"a": None, "b": "2"}}}
    code, body = await raw(
        api, "PATCH", path, body=merge, content_type="application/merge-patch+json"
    )
    assert code == 200
    assert json.loads(body)["metadata"]["annotations"] == {"b": "2"}


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code", "reason"),
    [
        ("POST", "namespaces/{ns}/pods", b"{not: [valid", "application/yaml", 400, None),
        ("PATCH", "namespaces/{ns}/pods/p", b"{}", "text/x-whatever", 415, "UnsupportedMediaType"),
        ("GET", "frobnicators", None, None, 404, "NotFound"),
    ],
    ids=["malformed-body", "unknown-content-type", "unknown-resource"],
)
async def test_a_request_the_server_cannot_serve_is_a_status(
    api: ApiClient,
    namespace: str,
    method: str,
    path: str,
    body: bytes | None,
    content_type: str | None,
    code: int,
    reason: str | None,
) -> None:
    url = "/api/v1/" + path.format(ns=namespace)
    got, answer = await raw(api, method, url, body=body, content_type=content_type)
    assert got == code
    status: dict[str, Any] = json.loads(answer)
    assert status["kind"] == "Status"
    assert reason is None or status["reason"] == reason


async def test_a_request_rbac_does_not_allow_is_forbidden_naming_it(
    unprivileged: tuple[str, ApiClient], namespace: str
) -> None:
    user, api = unprivileged
    who = f'User "{user}" cannot'
    in_ns = f'in the namespace "{namespace}"'
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/zombied"
    status_path = f"/api/v1/namespaces/{namespace}/pods/web-0/status"
    cases = [
        ("GET", f"/api/v1/namespaces/{namespace}/pods", None, {"kind": "pods"},
         f'pods is forbidden: {who} list resource "pods" in API group "" {in_ns}'),
        ("GET", "/api/v1/pods", None, {"kind": "pods"},
         f'pods is forbidden: {who} list resource "pods" in API group "" at the cluster scope'),
        ("GET", lease, None,
         {"name": "zombied", "group": "coordination.k8s.io", "kind": "leases"},
         f'leases.coordination.k8s.io "zombied" is forbidden: {who} get resource "leases" '
         f'in API group "coordination.k8s.io" {in_ns}'),
        ("PATCH", status_path, {"status": {}}, {"name": "web-0", "kind": "pods"},
         f'pods "web-0" is forbidden: {who} patch resource "pods/status" in API group "" '
         f"{in_ns}"),
    ]  # fmt: skip
    for method, path, body, details, message in cases:
        merge = "application/merge-patch+json" if body is not None else None
        code, answer = await raw(api, method, path, body=body, content_type=merge)
        status = json.loads(answer)
        assert (code, status["reason"], status["details"]) == (403, "Forbidden", details)
        assert status["message"] == message


async def test_request_without_credentials_is_refused(server: Any) -> None:
    import aiohttp  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    config = yaml.safe_load(server.kubeconfig.read_text())
    url = config["clusters"][0]["cluster"]["server"]
    async with (
        aiohttp.ClientSession() as session,
        session.get(url + "/api/v1/pods", ssl=False) as resp,
    ):
        assert resp.status in (401, 403)
        body = await resp.json()
        assert body["kind"] == "Status"
