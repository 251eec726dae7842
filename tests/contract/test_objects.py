"""A Kubernetes API server creates, reads, updates and patches objects with Status errors."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Server, by_version, make_pod, pod_manifest, raw, status_of


async def test_get_missing_pod_is_not_found(core: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as info:
        await core.read_namespaced_pod("nope", namespace)
    assert info.value.status == 404
    assert status_of(info.value)["message"] == 'pods "nope" not found'


async def test_create_twice_is_already_exists(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "twin")
    with pytest.raises(ApiException) as info:
        await make_pod(core, namespace, "twin")
    assert info.value.status == 409
    status = status_of(info.value)
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


async def test_create_with_generate_name(core: client.CoreV1Api, namespace: str) -> None:
    body = pod_manifest("")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "gen-"
    pod = await core.create_namespaced_pod(namespace, body)
    assert pod.metadata.name.startswith("gen-")
    assert len(pod.metadata.name) > len("gen-")


async def test_create_in_missing_namespace_is_not_found(core: client.CoreV1Api) -> None:
    missing = "zc-missing-" + secrets.token_hex(3)
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod(missing, pod_manifest("x"))
    assert info.value.status == 404
    assert status_of(info.value)["message"] == f'namespaces "{missing}" not found'


async def test_namespace_mismatch_is_a_bad_request(core: client.CoreV1Api, namespace: str) -> None:
    body = pod_manifest("x")
    body["metadata"]["namespace"] = namespace + "-other"
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod(namespace, body)
    assert info.value.status == 400


async def test_status_patch_merges_conditions_by_type(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "p")
    await core.patch_namespaced_pod_status(
        "p",
        namespace,
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "True"},
                ]
            }
        },
    )
    await core.patch_namespaced_pod_status(
        "p",
        namespace,
        {
            "status": {
                "phase": "Failed",
                "reason": "Terminated",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "TerminationByKubelet",
                    }
                ],
            }
        },
    )
    pod = await core.read_namespaced_pod_status("p", namespace)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "Terminated"
    assert sorted(c.type for c in pod.status.conditions) == [
        "DisruptionTarget",
        "PodScheduled",
        "Ready",
    ]


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
    with pytest.raises(ApiException) as info:
        await core.replace_namespaced_pod("p", namespace, first)
    assert info.value.status == 409
    status = status_of(info.value)
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
    code, _ = await raw(
        api,
        "PATCH",
        path,
        body=[{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}],
        content_type="application/json-patch+json",
    )
    assert code == 200
    code, body = await raw(
        api,
        "PATCH",
        path,
        body={"metadata": {"annotations": {"a": None, "b": "2"}}},
        content_type="application/merge-patch+json",
    )
    assert code == 200
    assert json.loads(body)["metadata"]["annotations"] == {"b": "2"}


async def test_malformed_body_is_a_bad_request(api: ApiClient, namespace: str) -> None:
    code, body = await raw(
        api,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body=b"{not: [valid",
        content_type="application/yaml",
    )
    assert code == 400
    assert json.loads(body)["kind"] == "Status"


async def test_unknown_content_type_is_unsupported_media_type(
    api: ApiClient, namespace: str
) -> None:
    code, body = await raw(
        api,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/p",
        body=b"{}",
        content_type="text/x-whatever",
    )
    assert code == 415
    assert json.loads(body)["reason"] == "UnsupportedMediaType"


async def test_unknown_resource_path_is_not_found(api: ApiClient) -> None:
    code, body = await raw(api, "GET", "/api/v1/frobnicators")
    assert code == 404
    status: dict[str, Any] = json.loads(body)
    assert status["kind"] == "Status"
    assert status["reason"] == "NotFound"


async def test_version_names_the_release(server: Server, api: ApiClient) -> None:
    code, body = await raw(api, "GET", "/version")
    assert code == 200
    info = json.loads(body)
    assert info["gitVersion"] in by_version(server, v1_20="v1.20.2", current="v1.37.2")
    assert info["gitVersion"].startswith(f"v{info['major']}.{info['minor']}.")


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
